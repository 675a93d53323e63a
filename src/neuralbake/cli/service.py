"""``neuralbake serve`` and ``neuralbake token``: run the asset service, and make API tokens for it.

``serve`` runs the HTTP API (:mod:`neuralbake.service.app`, on uvicorn) and N local worker
processes (:mod:`neuralbake.service.worker`) over one data folder and job store. ``token create``
prints a new token once; only its sha256 is stored.
"""

from __future__ import annotations

import secrets
import signal
import threading
import tomllib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from neuralbake.bakes.registry import BAKES, service_kinds
from neuralbake.cli.common import entry_flags, print_done, run_action
from neuralbake.core.names import resolve_key, setting_keys, split_setting
from neuralbake.client import ServiceClient
from neuralbake.errors import ConfigError
from neuralbake.io.limits import load_json_file
from neuralbake.service.app import create_app, hash_token
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import Store
from neuralbake.service.worker import WorkerSettings, serve_workers, serve_workers_ray

__all__ = ["register"]

token_app = typer.Typer(help="API tokens of the asset service.", no_args_is_help=True)

_DATA = typer.Option("--data", help="The service's data folder (uploads, job outputs, the SQLite database).")
_DB = typer.Option("--db", help="Job store URL: sqlite:///PATH or postgresql://user@host/db. \\[default: sqlite in --data]")


def serve(
    data: Annotated[Path, _DATA] = Path("neuralbake-data"),
    db: Annotated[str, _DB] = "",
    host: Annotated[str, typer.Option(help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8642,
    workers: Annotated[int, typer.Option(help="Local worker processes (one bake each at a time).")] = 1,
    no_token: Annotated[bool, typer.Option("--no-token", help="Accept requests without an API token (only on a machine you alone use).")] = False,
    cors: Annotated[list[str] | None, typer.Option("--cors", help="An origin allowed to call the API from a browser page (repeatable); none by default.")] = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Run the workers as Ray tasks: `auto` (this machine's cluster, else a local one) or a cluster ADDRESS. Workers must see --data and --db.")] = None,
    gpus_per_worker: Annotated[float, typer.Option(help="With --ray: GPUs each worker asks the cluster for.")] = 0.0,
    models: Annotated[Path | None, typer.Option("--models", help="Model library for postfx jobs (diffusion models, ControlNets, LoRAs), named relative to it.")] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Most training steps one job may ask for.")] = 10_000_000,
    lease: Annotated[float, typer.Option("--lease", help="Seconds a running job's worker may go silent before the job is requeued (a lost worker's job waits this long).")] = 30.0,
    job_memory: Annotated[float | None, typer.Option("--job-memory", help="GiB one job may need (checked against its settings before it is queued). \\[default: the workers' GPU or RAM shared among --workers]")] = None,
) -> None:
    """Run the asset service: the HTTP API and local workers over one job store."""

    def action() -> None:
        import uvicorn


        if db:
            Store(db).close()  # a bad URL is refused before the data folder is made
        data.mkdir(parents=True, exist_ok=True)

        if max_steps < 1 or (job_memory is not None and not job_memory > 0):
            raise ConfigError("--max-steps and --job-memory must be positive.", field="--max-steps" if max_steps < 1 else "--job-memory", fix="pass e.g. --max-steps 100000 --job-memory 8.")
        if not 3.0 <= lease <= 3600.0:
            raise ConfigError(f"--lease must be from 3 to 3600 seconds, got {lease:g}.", field="--lease", fix="pass e.g. --lease 10 (a heartbeat comes every third of it).")
        settings = ServiceSettings(data=data, db=db, host=host, port=port, workers=workers, require_token=not no_token, cors_origins=list(cors or []),
                                   models=models, max_steps=max_steps, job_memory=None if job_memory is None else int(job_memory * 2**30),
                                   lease_seconds=lease)
        app = create_app(settings)
        stop = threading.Event()
        worker_settings = WorkerSettings(db=settings.database_url(), data=data, lease_seconds=settings.lease_seconds, models=models)
        if ray:
            target, kwargs = serve_workers_ray, {"address": ray, "gpus_per_worker": gpus_per_worker}
        else:
            target, kwargs = serve_workers, {}
        supervisor = threading.Thread(target=target, args=(worker_settings, workers, stop), kwargs=kwargs, daemon=True, name="workers")
        supervisor.start()
        Console(stderr=True).print(f"neuralbake service on http://{host}:{port} (API docs at /docs), {workers} worker(s){' on Ray' if ray else ''}, data in {data}", highlight=False, markup=False)
        # uvicorn re-raises the SIGTERM it caught once it has shut down; with Python's default
        # handler that would end the process before the workers are stopped, leaving them running.
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        try:
            uvicorn.run(app, host=host, port=port, log_level="warning")
        finally:
            stop.set()
            supervisor.join(timeout=30)

    run_action(action)


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="Who or what the token is for (shown in listings).")],
    data: Annotated[Path, _DATA] = Path("neuralbake-data"),
    db: Annotated[str, _DB] = "",
    quota: Annotated[int | None, typer.Option(help="Most jobs this token may submit. \\[default: no limit]")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="The token sees and acts on every token's jobs and uploads (an operator's).")] = False,
) -> None:
    """Create an API token and print it once (only its hash is stored). A token sees only its own jobs and uploads."""

    def action() -> str:

        url = ServiceSettings(data=data, db=db).database_url()
        store = Store(url)  # a bad URL is refused before the data folder is made
        data.mkdir(parents=True, exist_ok=True)
        store.migrate()
        token = secrets.token_urlsafe(32)
        store.add_token(name, hash_token(token), quota_jobs=quota, admin=admin)
        store.close()
        return token

    token = run_action(action)
    print_done(f"token for {name} (shown once; send it as 'Authorization: Bearer <token>'):")
    Console().print(token, highlight=False, markup=False)


def _token_store(data: Path, db: str) -> Store:

    url = ServiceSettings(data=data, db=db).database_url()
    if not db and not (data / "service.db").is_file():
        raise ConfigError(f"there is no service database in {data}.", field="--data", fix="pass the folder `neuralbake serve --data` uses.")
    store = Store(url)
    store.migrate()
    return store


@token_app.command("list")
def token_list(data: Annotated[Path, _DATA] = Path("neuralbake-data"), db: Annotated[str, _DB] = "") -> None:
    """List the tokens: id, name, admin, quota, jobs submitted, revoked (never the tokens themselves)."""

    def action() -> list:
        store = _token_store(data, db)
        try:
            return [(t, store.count_jobs(t.id)) for t in store.list_tokens()]
        finally:
            store.close()

    out = Console()
    for token, count in run_action(action):
        flags = ", ".join(f for f in ("admin" if token.admin else "", "revoked" if token.revoked else "") if f)
        quota = "no quota" if token.quota_jobs is None else f"quota {token.quota_jobs}"
        out.print(f"{token.id}  {token.name:<20} {count} jobs, {quota}{', ' + flags if flags else ''}", highlight=False, markup=False)


@token_app.command("revoke")
def token_revoke(
    which: Annotated[str, typer.Argument(help="The token's id or name (as `token list` shows them).")],
    data: Annotated[Path, _DATA] = Path("neuralbake-data"),
    db: Annotated[str, _DB] = "",
) -> None:
    """Refuse a token from now on (its jobs and uploads stay; an admin token still sees them)."""

    def action() -> str:

        store = _token_store(data, db)
        try:
            matches = [t for t in store.list_tokens() if which in (t.id, t.name) and not t.revoked]
            if len(matches) != 1:
                problem = f"no live token is called {which!r}." if not matches else f"{len(matches)} live tokens are called {which!r}."
                raise ConfigError(problem, field="WHICH", fix="name it by the id `neuralbake token list` shows.")
            store.revoke_token(matches[0].id)
            return matches[0].id
        finally:
            store.close()

    print_done(f"token {run_action(action)} revoked")


_SERVER = typer.Option("--server", envvar="NEURALBAKE_SERVER", help="The service's URL, e.g. http://127.0.0.1:8642 (or $NEURALBAKE_SERVER).")
_TOKEN = typer.Option("--token", envvar="NEURALBAKE_TOKEN", help="API token (or $NEURALBAKE_TOKEN).", show_default=False)


def _client(server: str, token: str | None) -> ServiceClient:
    return ServiceClient(server, token)


def _settings(config: Path | None, sets: list[str], kind: str) -> dict:
    """The job's settings: the ``--config`` file's, then each ``--set KEY=VALUE`` (KEY a config field, or a flag
    name of the kind's command: ``size`` is ``texture_size``; see :mod:`neuralbake.core.names`)."""
    data: dict = {}
    if config is not None:
        if config.suffix.lower() == ".toml":
            try:
                data = tomllib.loads(config.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"the config file cannot be read ({exc}).", path=config, fix="pass a JSON or TOML file.") from exc
        else:
            data = load_json_file(config, what="config file")
        if not isinstance(data, dict):
            raise ConfigError("the config file does not hold a table of settings.", path=config, fix='write e.g. {"train": {"steps": 500}}.')
    entry = BAKES[kind]
    config_type = entry.bake.config_type
    keys = setting_keys(config_type, entry_flags(entry)) if sets else {}
    for item in sets:
        given, value = split_setting(item, example="train.steps=500")
        key = resolve_key(given, config_type, keys)
        if key is None:
            raise ConfigError(f"{kind} jobs have no setting {given[:60]!r}.", field="--set",
                              fix=f"name a config field (as the web UI shows them, e.g. train.steps) or a flag of `neuralbake {' '.join(entry.command)}` "
                              "(e.g. size for texture_size); its --help lists them.")
        target = data
        *parents, last = key.split(".")
        for part in parents:
            if not isinstance(target.get(part), dict):
                target[part] = {}  # --set wins over a value the file gave the whole table
            target = target[part]
        target[last] = value
    return data


def _files_under(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)]


def _upload_input(client: ServiceClient, path: Path) -> str:
    """Upload one input -> '<upload id>/<name>': a file; a glTF with every file of its folder; a folder
    (frames, training images, a baked neural material) with everything in it."""
    if path.is_dir():
        files = _files_under(path)
        if not files:
            raise ConfigError(f"the folder {path} holds no files.", field="--input", fix="name a folder with the bake's input files.")
        upload = client.upload(files, base=path.parent)
        return f"{upload['id']}/{path.name}"
    upload = client.upload(_files_under(path.parent) if path.suffix.lower() == ".gltf" else [path])
    return f"{upload['id']}/{path.name}"


def submit(
    kind: Annotated[str, typer.Argument(help=f"The job kind: {', '.join(service_kinds())}.")],
    inputs: Annotated[list[str], typer.Option("--input", "-i", help="FIELD=PATH: a file or folder the bake reads (e.g. image=photo.png; a .gltf brings its folder). Repeat a field for a list.")],
    server: Annotated[str, _SERVER] = "http://127.0.0.1:8642",
    token: Annotated[str | None, _TOKEN] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Settings as a JSON or TOML file (the bake's config fields).")] = None,
    sets: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE setting, JSON values: KEY a config field (dotted, as the web UI names it: texture_size, train.steps) or a flag name of the kind's command (size, steps), e.g. --set train.steps=500. Repeatable.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Watch the job until it ends.")] = False,
) -> None:
    """Upload a bake's inputs and queue it on a service; print the job id."""

    def action() -> dict:
        if kind not in service_kinds():  # before anything is uploaded
            raise ConfigError(f"unknown job kind {kind!r}.", field="KIND", fix=f"use one of {', '.join(service_kinds())}.")
        settings = _settings(config, sets or [], kind)  # a bad setting is refused before anything is uploaded too
        client = _client(server, token)
        bound: dict = {}
        for item in inputs:
            field, sep, path = item.partition("=")
            if not sep or not field or not path:
                raise ConfigError(f"{item!r} is not FIELD=PATH.", field="--input", fix="write e.g. --input image=photo.png.")
            ref = _upload_input(client, Path(path))
            bound[field] = [*bound[field], ref] if field in bound and isinstance(bound[field], list) else [bound[field], ref] if field in bound else ref
        for arg in BAKES[kind].arguments:  # a list field given once is still a list
            if arg.many and isinstance(bound.get(arg.field), str):
                bound[arg.field] = [bound[arg.field]]
        job = client.submit(kind, settings, bound)
        return client.wait(job["id"]) if wait else job

    job = run_action(action)
    print_done(f"job {job['id']} ({job['kind']}): {job['status']}" + (f" ({job['error']})" if job.get("error") else ""))
    if wait and job["status"] != "succeeded":
        raise typer.Exit(1)


def jobs(
    server: Annotated[str, _SERVER] = "http://127.0.0.1:8642",
    token: Annotated[str | None, _TOKEN] = None,
    status: Annotated[str | None, typer.Option(help="Only jobs in this state (queued, running, succeeded, failed, cancelled).")] = None,
) -> None:
    """List a service's jobs, newest first."""
    listed = run_action(lambda: _client(server, token).jobs(status))
    out = Console()
    for job in listed:
        out.print(f"{job['id']}  {job['kind']:<8} {job['status']:<10} attempts {job['attempts']}  {job.get('error') or ''}", highlight=False, markup=False)


def watch(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    server: Annotated[str, _SERVER] = "http://127.0.0.1:8642",
    token: Annotated[str | None, _TOKEN] = None,
) -> None:
    """Follow a job's events until it ends (reconnects resume where they left off)."""

    def action() -> dict:
        client = _client(server, token)
        out = Console()
        for event in client.events(job_id):
            data = event["data"]
            detail = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in data.items() if not isinstance(v, dict | list))
            out.print(f"{event['seq']:>5} {event['type']:<12} {detail}", highlight=False, markup=False)
        return client.job(job_id)

    job = run_action(action)
    print_done(f"job {job['id']}: {job['status']}" + (f" ({job['error']})" if job.get("error") else ""))
    if job["status"] != "succeeded":
        raise typer.Exit(1)


def fetch(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to download the job's outputs into.")],
    server: Annotated[str, _SERVER] = "http://127.0.0.1:8642",
    token: Annotated[str | None, _TOKEN] = None,
) -> None:
    """Download a finished job's outputs, each checked against its bake.json."""
    written = run_action(lambda: _client(server, token).fetch(job_id, out), out=out)
    print_done(f"{len(written)} files -> {out}")


def register(app: typer.Typer) -> None:
    """Add ``serve``, ``token``, ``submit``, ``jobs``, ``watch`` and ``fetch`` to the main CLI."""
    app.command("serve")(serve)
    app.add_typer(token_app, name="token")
    for command in (submit, jobs, watch, fetch):
        app.command(command.__name__)(command)
