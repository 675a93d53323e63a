"""The service's HTTP API (FastAPI): uploads, jobs, live events, downloads, behind API tokens.

``create_app(settings)`` builds the app; ``neuralbake serve`` runs it with uvicorn beside the
worker processes. Every route is under ``/api`` and speaks JSON; errors are
``{"error": ..., "field": ..., "fix": ...}`` with a 4xx status. A job is submitted as
``{"kind": "texture", "config": {...}, "inputs": {"image": "<upload id>/<name>"}}``: the config is
parsed by the bake's own config dataclass (the CLI's error text), and every field that names a
file may only be set through ``inputs``, which resolve inside an upload, so a request can never
make the server read its own files. Job events stream as server-sent events numbered by the
store's gap-free per-job sequence, so a client that reconnects with ``Last-Event-ID`` receives
every later event exactly once. Downloads serve only the files a finished job's ``bake.json``
lists, after checking them against it. Live pictures that a running bake publishes (``preview``
events) are served from ``/api/jobs/<id>/previews/<file>``; ``POST /api/jobs/<id>/paint`` turns an
artist's strokes on a fit's view into new weights and a warm-started refit
(:mod:`neuralbake.service.paint`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import typing
from dataclasses import fields as dataclass_fields
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.datastructures import UploadFile

from neuralbake.core.config import config_from_dict, config_to_dict, field_docs
from neuralbake.errors import ConfigError, NeuralbakeError
from neuralbake.io.manifest import verify_bake_folder
from neuralbake.service.paint import parse_paint_request, refit_with_strokes
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import TERMINAL_STATES, JobStateError, Store, TokenRecord
from neuralbake.service.uploads import UploadStore
from neuralbake.service.worker import KINDS, bake_of, job_folder

__all__ = ["INPUT_FIELDS", "create_app", "hash_token"]

INPUT_FIELDS: dict[str, tuple[str, ...]] = {
    "texture": ("image",),
    "material": ("material", "shared_decoder"),
    "ntc": ("sources", "material"),
    "mipmap": ("base_color", "normal", "roughness_map"),
    "fit": ("asset", "reference", "weights", "warm_start"),
    "simplify": ("asset", "lod", "protect_mask"),
    "skin": ("lod", "reference"),
    "lod": ("asset",),
    "postfx": ("render", "depth", "normal", "ids", "motion"),
}
"""Per job kind, the config fields that name files: settable only through ``inputs``."""

FOLDER_INPUTS = ("postfx",)
"""Job kinds whose inputs may name a folder of an upload (a frame sequence and its passes)."""

PREVIEW_FILE = re.compile(r"[A-Za-z0-9_-]{1,64}\.[0-9]{6}\.png")
"""A live preview's file name, as the runner writes it (``<name>.<number>.png``)."""


def hash_token(token: str) -> str:
    """The sha256 a token is stored as."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class _HttpError(Exception):
    def __init__(self, status: int, problem: str, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(problem)
        self.status, self.problem, self.field, self.fix = status, problem, field, fix


def _error(status: int, problem: str, field: str | None = None, fix: str | None = None) -> JSONResponse:
    return JSONResponse({"error": problem, "field": field, "fix": fix}, status_code=status)


def create_app(settings: ServiceSettings, store: Store | None = None) -> FastAPI:
    """The FastAPI app over ``store`` (default: the settings' database, migrated)."""
    if store is None:
        store = Store(settings.database_url())
        store.migrate()
    uploads = UploadStore(settings.data / "uploads", max_bytes=settings.max_upload_bytes)
    app = FastAPI(title="neuralbake asset service", version="1", summary="Submit bakes, watch them, download what they made.")
    app.state.store = store
    if settings.cors_origins:  # off unless origins are named: a browser page elsewhere gets no access
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type", "Last-Event-ID"])

    @app.exception_handler(_HttpError)
    async def _http_error(request: Request, exc: _HttpError) -> JSONResponse:
        return _error(exc.status, exc.problem, exc.field, exc.fix)

    @app.exception_handler(NeuralbakeError)
    async def _neuralbake_error(request: Request, exc: NeuralbakeError) -> JSONResponse:
        status = getattr(exc, "status", None) or (404 if isinstance(exc, JobStateError) and "no job" in exc.problem else 409 if isinstance(exc, JobStateError) else 422)
        return _error(status, exc.problem, exc.field, exc.fix)

    @app.middleware("http")
    async def _limit_body(request: Request, call_next: Any) -> Any:
        limit = settings.max_upload_bytes + (1 << 20) if request.url.path == "/api/uploads" else settings.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return _error(413, f"the request body is larger than {limit:,} bytes.", "body", "send less, or raise the server's limit.")
        return await call_next(request)

    def authorise(request: Request) -> TokenRecord | None:
        if not settings.require_token:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        record = store.token_by_hash(hash_token(token.strip())) if scheme.lower() == "bearer" and token.strip() else None
        if record is None:
            raise _HttpError(401, "a valid API token is required.", "Authorization", "send 'Authorization: Bearer <token>' (neuralbake token create).")
        return record

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        # The web UI: one static page; it calls the API below with the token the user types in.
        page = FileResponse(Path(__file__).with_name("static") / "index.html", media_type="text/html")
        page.headers["Content-Security-Policy"] = "default-src 'self'; img-src 'self' blob:; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'"
        return page

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "kinds": list(KINDS)}

    @app.get("/api/kinds")
    def kinds(token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        return {kind: {"inputs": list(INPUT_FIELDS[kind]), "fields": _describe(bake_of(kind).config_type)} for kind in KINDS}

    @app.post("/api/uploads", status_code=201)
    async def upload(request: Request, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        form = await request.form(max_files=512)
        files = [(item.filename or "", item.file) for item in form.getlist("files") if isinstance(item, UploadFile)]
        record = await asyncio.to_thread(uploads.add, files)
        return {"id": record.id, "files": record.files}

    @app.post("/api/jobs", status_code=201)
    async def submit(request: Request, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _HttpError(400, f"the request body is not JSON ({exc}).", "body", "send a JSON object.") from exc
        if not isinstance(body, dict):
            raise _HttpError(422, "the request body must be a JSON object.", "body", 'send {"kind": ..., "config": {...}, "inputs": {...}}.')
        if token is not None and token.quota_jobs is not None and store.count_jobs(token.id) >= token.quota_jobs:
            raise _HttpError(429, f"this token's quota of {token.quota_jobs} jobs is used up.", "token", "ask for a token with a larger quota.")
        kind, config = _parse_job(body, uploads, models=settings.models)
        job = store.create_job(kind, config, token_id=token.id if token else None, max_attempts=settings.max_attempts)
        return job.to_json()

    @app.get("/api/jobs")
    def list_jobs(status: str | None = None, limit: int = 100, token: TokenRecord | None = Depends(authorise)) -> list[dict[str, Any]]:
        return [job.to_json() for job in store.list_jobs(status=status, limit=limit)]

    @app.get("/api/jobs/{job_id}")
    def get_job(job_id: str, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        return _job_or_404(store, job_id).to_json()

    @app.post("/api/jobs/{job_id}/cancel")
    def cancel(job_id: str, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        _job_or_404(store, job_id)
        return store.request_cancel(job_id).to_json()

    @app.post("/api/jobs/{job_id}/retry")
    def retry(job_id: str, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        _job_or_404(store, job_id)
        return store.retry(job_id).to_json()

    @app.get("/api/jobs/{job_id}/events")
    async def job_events(job_id: str, request: Request, after: int = 0, token: TokenRecord | None = Depends(authorise)) -> EventSourceResponse:
        _job_or_404(store, job_id)
        last = request.headers.get("last-event-id", "")
        start = int(last) if last.isdigit() else max(0, after)

        async def stream() -> Any:
            seq = start
            while True:
                batch = await asyncio.to_thread(store.events_after, job_id, seq)
                for item in batch:
                    seq = item.seq
                    yield {"id": str(item.seq), "event": item.type, "data": json.dumps(item.data)}
                    if item.type in TERMINAL_STATES:
                        return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.2)

        return EventSourceResponse(stream(), ping=15)

    @app.get("/api/jobs/{job_id}/previews/{file}")
    def preview(job_id: str, file: str, token: TokenRecord | None = Depends(authorise)) -> FileResponse:
        # A live picture the job's bake published (a `preview` event names it), while it runs or after.
        _job_or_404(store, job_id)
        if not PREVIEW_FILE.fullmatch(file):
            raise _HttpError(404, f"{file[:80]!r} is not a preview name.", "file", "use the file a preview event names.")
        path = job_folder(settings.data, job_id) / ".neuralbake" / "previews" / file
        if path.is_symlink() or not path.is_file():
            raise _HttpError(404, f"the job has no preview {file!r} (only the newest ones are kept).", "file", "use the file of a recent preview event.")
        return FileResponse(path, media_type="image/png", headers={"Cache-Control": "no-store"})

    @app.post("/api/jobs/{job_id}/paint", status_code=201)
    async def paint(job_id: str, request: Request, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        # Interactive fitting (service.paint): strokes on a paint view -> uv0 weights -> a warm-started refit.
        job = _job_or_404(store, job_id)
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _HttpError(400, f"the request body is not JSON ({exc}).", "body", "send a JSON object.") from exc
        if token is not None and token.quota_jobs is not None and store.count_jobs(token.id) >= token.quota_jobs:
            raise _HttpError(429, f"this token's quota of {token.quota_jobs} jobs is used up.", "token", "ask for a token with a larger quota.")
        parsed = await asyncio.to_thread(parse_paint_request, body)
        return await asyncio.to_thread(
            refit_with_strokes, store, uploads, settings.data, job, parsed, token_id=token.id if token else None, max_attempts=settings.max_attempts
        )

    @app.get("/api/jobs/{job_id}/files")
    def list_files(job_id: str, token: TokenRecord | None = Depends(authorise)) -> dict[str, Any]:
        manifest = _finished_manifest(store, settings, job_id)
        return {"files": manifest["files"]}

    @app.get("/api/jobs/{job_id}/files/{name:path}")
    def download(job_id: str, name: str, token: TokenRecord | None = Depends(authorise)) -> FileResponse:
        manifest = _finished_manifest(store, settings, job_id)
        if name not in manifest["files"] and name != "bake.json":
            raise _HttpError(404, f"the job wrote no file {name[:120]!r}.", "name", "list the job's files first.")
        return FileResponse(job_folder(settings.data, job_id) / name)

    return app


def _job_or_404(store: Store, job_id: str) -> Any:
    job = store.get_job(job_id)
    if job is None:
        raise _HttpError(404, f"there is no job {job_id[:80]!r}.", "job", "list the jobs to find its id.")
    return job


def _finished_manifest(store: Store, settings: ServiceSettings, job_id: str) -> dict[str, Any]:
    job = _job_or_404(store, job_id)
    manifest = verify_bake_folder(job_folder(settings.data, job_id)) if job.status == "succeeded" else None
    if manifest is None:
        raise _HttpError(409, f"the job is {job.status}; it has no finished outputs.", "status", "wait for it to succeed.")
    return manifest


def _library_path(models: Path | None, name: Any, field: str, *, folder: bool) -> str:
    """A model library entry (a path relative to ``--models``) as its absolute path, never outside the library."""
    if models is None:
        raise ConfigError("this service has no model library, so it runs no postfx jobs.", field=field,
                          fix="start it with `neuralbake serve --models DIR` (diffusion models, ControlNets and LoRAs under DIR).")
    if not isinstance(name, str) or not name or Path(name).is_absolute() or name.startswith("\\") or re.match(r"[A-Za-z]:", name):
        raise ConfigError(f"{str(name)[:80]!r} is not a name in the model library.", field=field, fix="name it by its path relative to the library, e.g. sd15/base.")
    root = models.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(f"{name[:80]!r} points outside the model library.", field=field, fix="name an entry under the library, without '..'.")
    if not (path.is_dir() if folder else path.is_file()):
        listing = sorted(p.name for p in root.iterdir())[:10] if root.is_dir() else []
        raise ConfigError(f"the model library has no {'folder' if folder else 'file'} {name[:80]!r}.", field=field,
                          fix=f"use one of the library's entries ({', '.join(listing)}), or put it there.")
    return str(path)


def _postfx_models(config: dict[str, Any], models: Path | None) -> dict[str, Any]:
    """A postfx job names its model, ControlNets and LoRAs in the server's library; they become the library's paths."""
    from neuralbake.postfx.chain import parse_controlnet, parse_weighted

    data = dict(config)
    data["model"] = _library_path(models, config.get("model", ""), "config.model", folder=True)
    nets = []
    for spec in config.get("controlnets", []) or []:
        condition, name, scale = parse_controlnet(str(spec))
        nets.append(f"{condition}={_library_path(models, name, 'config.controlnets', folder=True)}:{scale:g}")
    data["controlnets"] = nets

    def loras(specs: Any, field: str) -> list[str]:
        out = []
        for spec in specs or []:
            name, weight = parse_weighted(str(spec), field)
            out.append(f"{_library_path(models, name, field, folder=False)}:{weight:g}")
        return out

    data["loras"] = loras(config.get("loras"), "config.loras")
    if isinstance(config.get("passes"), list):
        data["passes"] = [{**p, "loras": loras(p.get("loras"), f"config.passes[{i}].loras")} if isinstance(p, dict) else p for i, p in enumerate(config["passes"])]
    return data


def _parse_job(body: dict[str, Any], uploads: UploadStore, *, models: Path | None = None) -> tuple[str, dict[str, Any]]:
    """``{kind, config, inputs}`` -> (kind, the config as stored), with the bake's own checks."""
    unknown = sorted(set(body) - {"kind", "config", "inputs"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in the request.", field=unknown[0], fix="send kind, config and inputs.")
    kind = body.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"unknown job kind {kind!r}.", field="kind", fix=f"use one of {', '.join(KINDS)}.")
    config, inputs = body.get("config", {}), body.get("inputs", {})
    if not isinstance(config, dict) or not isinstance(inputs, dict):
        raise ConfigError("config and inputs must be JSON objects.", field="config", fix='send {"config": {...}, "inputs": {...}}.')
    for name in INPUT_FIELDS[kind]:
        if config.get(name) not in (None, "", []):
            raise ConfigError(f"{name} names a file and can only be given in inputs.", field=f"config.{name}", fix=f'send "inputs": {{"{name}": "<upload id>/<file name>"}}.')
    data = _postfx_models(config, models) if kind == "postfx" else dict(config)
    for name, ref in inputs.items():
        if name not in INPUT_FIELDS[kind]:
            raise ConfigError(f"{kind} jobs take no input {name!r}.", field=f"inputs.{name}", fix=f"inputs are: {', '.join(INPUT_FIELDS[kind])}.")
        refs = ref if isinstance(ref, list) else [ref]
        if not refs or not all(isinstance(r, str) for r in refs):
            raise ConfigError("an input is '<upload id>/<file name>' (or a list of them).", field=f"inputs.{name}")
        paths = [str(uploads.resolve(r, field=name, folders=kind in FOLDER_INPUTS)) for r in refs]
        data[name] = paths if isinstance(ref, list) else paths[0]
    bake = bake_of(kind)
    parsed = config_from_dict(bake.config_type, data, source="the request")
    from neuralbake.bakes.run import validate_for_any_device

    validate_for_any_device(bake, parsed)
    return kind, config_to_dict(parsed)


def _describe(config_type: type, prefix: str = "", instance: Any = None) -> list[dict[str, Any]]:
    """Every field of a config (nested ones dotted): name, type, default (the bake's), docstring."""
    hints = typing.get_type_hints(config_type)
    instance = config_type() if instance is None else instance
    docs, out = field_docs(config_type), []
    for item in dataclass_fields(config_type):
        if not item.init:
            continue
        value = getattr(instance, item.name)
        if is_dataclass(hints[item.name]):
            out += _describe(hints[item.name], f"{prefix}{item.name}.", value)
            continue
        out.append({"name": prefix + item.name, "type": str(hints[item.name]).replace("typing.", ""), "default": value if isinstance(value, int | float | str | bool | list | tuple | None) else str(value), "doc": docs.get(item.name, "")})
    return out

