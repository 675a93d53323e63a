"""The shared service's security: a job reads only its caller's uploads, whatever field or depth names a
file; a job, its events, files, previews and paint, and an upload belong to the token that made
them (others get 404, an admin token sees all); nothing a client reads shows a path of the server."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from neuralbake.bakes.registry import BAKES, service_kinds
from neuralbake.core.config import field_docs
from neuralbake.core.paths import PathSpec, _unwrap, path_fields
from neuralbake.service.app import create_app, hash_token
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import Store
from neuralbake.service.worker import WorkerSettings, bake_of, job_folder, run_worker

TOKEN_A, TOKEN_B, TOKEN_ADMIN = "a" * 43, "b" * 43, "c" * 43
TINY_TEXTURE = {"batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2}, "train": {"steps": 10, "precision": "fp32", "eval_every": 0}}

_forbidden: set[str] = set()
_opened: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if _forbidden and event in ("open", "os.open") and args and isinstance(args[0], str | bytes | os.PathLike):
        path = os.fsdecode(args[0]) if isinstance(args[0], bytes) else os.fspath(args[0])
        if os.path.realpath(path) in _forbidden:
            _opened.append(path)


sys.addaudithook(_audit)  # inert unless a test fills _forbidden


@dataclasses.dataclass
class Service:
    settings: ServiceSettings
    store: Store
    a: TestClient
    b: TestClient
    admin: TestClient

    def work(self, jobs: int = 1) -> None:
        run_worker(WorkerSettings(db=self.settings.database_url(), data=self.settings.data, poll_seconds=0.05, models=self.settings.models), "w", max_jobs=jobs)


@pytest.fixture
def service(tmp_path: Path) -> Service:
    models = tmp_path / "models"
    (models / "sd").mkdir(parents=True)
    settings = ServiceSettings(data=tmp_path / "data", models=models)
    settings.data.mkdir()
    store = Store(settings.database_url())
    store.migrate()
    clients = []
    for name, token, admin in (("a", TOKEN_A, False), ("b", TOKEN_B, False), ("ops", TOKEN_ADMIN, True)):
        store.add_token(name, hash_token(token), admin=admin)
        clients.append(TestClient(create_app(settings, store), headers={"Authorization": f"Bearer {token}"}))
    return Service(settings, store, *clients)


def _upload(client: TestClient, files: dict[str, bytes]) -> str:
    response = client.post("/api/uploads", files=[("files", (name, data)) for name, data in files.items()])
    assert response.status_code == 201, response.text
    return response.json()["id"]


# -- every path field, at any depth ----------------------------------------------------------------


def _config_with(spec: PathSpec, value: str) -> dict[str, Any]:
    """A config dict holding ``value`` in the path field ``spec`` (dotted, ``[]`` for a list of configs)."""
    config: dict[str, Any] = {}
    target = config
    parts = spec.name.split(".")
    for part in parts[:-1]:
        if part.endswith("[]"):
            item: dict[str, Any] = {}
            target[part[:-2]] = [item]
            target = item
        else:
            target = target.setdefault(part, {})
    target[parts[-1]] = [value] if spec.many else value
    return config


def _wrapped(spec: PathSpec, path: str) -> str:
    """``path`` inside the text the field's values carry around their path (``depth=DIR:0.5``, ``normal=PATH``)."""
    for template in ("depth={}:0.5", "normal={}", "{}:0.5", "{}"):
        value = template.format(path)
        if spec.field.split(value)[1] == path:
            return value
    raise AssertionError(spec)


def test_every_bake_declares_its_file_fields_as_path_types() -> None:
    bakes = {kind: entry.bake for kind, entry in BAKES.items()}
    looks_like_a_file = re.compile(r"\b(file|files|folder|path|directory)\b|\.(gltf|glb|png|json|mtlx|pt|exr|safetensors)\b", re.I)

    def plain_strings(config_type: type, prefix: str = "") -> typing.Iterator[tuple[str, str]]:
        hints, docs = typing.get_type_hints(config_type, include_extras=True), field_docs(config_type)
        for item in dataclasses.fields(config_type):
            inner, marker, _ = _unwrap(hints[item.name])
            if marker is None and dataclasses.is_dataclass(inner):
                yield from plain_strings(inner, f"{prefix}{item.name}.")
            elif marker is None and inner is str:
                yield prefix + item.name, docs.get(item.name, "")

    for kind, bake in bakes.items():
        assert path_fields(bake.config_type), f"{kind} declares no path field, yet every bake reads a file"
        suspicious = [name for name, doc in plain_strings(bake.config_type) if looks_like_a_file.search(doc)]
        assert not suspicious, f"{kind}: {suspicious} say they name files but are plain str; declare them InputPath"


def test_a_job_names_files_only_by_its_own_upload_at_any_depth(service: Service, tiny_png: Path, tmp_path: Path) -> None:
    """Walks every job kind's path fields (nested configs, lists of configs, the lod chain's stage
    options, the model library's names): an absolute path, a '..' path, a path into another job's
    folder, another token's upload or job are refused naming the field, and never opened."""
    secret = tmp_path / "SECRET.bin"
    secret.write_bytes(b"not yours")
    own = _upload(service.a, {"a.png": tiny_png.read_bytes()})
    theirs = _upload(service.b, {"b.png": tiny_png.read_bytes() + b"\x00"})
    their_job = service.b.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{theirs}/b.png"}}).json()
    service.work()
    their_report = job_folder(service.settings.data, their_job["id"]).resolve() / "report.json"
    assert their_report.is_file()
    hostile = {
        "absolute": str(secret),
        "parent": "../" * 8 + str(secret).lstrip("/"),
        "upload escape": f"{own}/../{theirs}/b.png",
        "into a job": str(their_report),
        "job folder relative": f"jobs/{their_job['id']}/out/report.json",
        "their upload": f"{theirs}/b.png",
        "their job": f"job:{their_job['id']}/report.json",
    }
    _forbidden.update({os.path.realpath(secret), os.path.realpath(their_report), os.path.realpath(service.settings.data / "uploads" / theirs / "b.png")})
    checked = 0
    try:
        for kind in service_kinds():
            for spec in path_fields(bake_of(kind).config_type):
                for case, value in hostile.items():
                    if spec.field.library and case in ("their upload", "their job"):
                        continue  # library names are not uploads; the other cases cover them
                    body = {"kind": kind, "config": _config_with(spec, _wrapped(spec, value))}
                    response = service.a.post("/api/jobs", json=body)
                    assert response.status_code in (404, 422), (kind, spec.name, case, response.text)
                    error = response.json()
                    assert error["field"] and error["field"].startswith("config." + spec.name.split("[]")[0].split(".")[0]), (kind, spec.name, case, error)
                    assert str(service.settings.data.resolve()) not in response.text, error  # server paths come back as references
                    checked += 1
    finally:
        _forbidden.clear()
    assert not _opened, f"the service opened {_opened}"
    assert checked > 100
    assert [job.id for job in service.store.list_jobs()] == [their_job["id"]]  # nothing was queued


def test_a_job_may_read_its_callers_earlier_outputs(service: Service, tiny_png: Path) -> None:
    upload = _upload(service.a, {"a.png": tiny_png.read_bytes()})
    first = service.a.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{upload}/a.png"}}).json()
    service.work()
    # The preview picture the texture bake wrote is an image: a later job may bake it.
    second = service.a.post("/api/jobs", json={"kind": "texture", "config": {**TINY_TEXTURE, "image": f"job:{first['id']}/preview.png"}})
    assert second.status_code == 201, second.text
    stored = second.json()["config"]["image"]
    assert re.fullmatch(r"[0-9a-f]{64}/preview\.png", stored)
    assert service.b.post("/api/jobs", json={"kind": "texture", "config": {**TINY_TEXTURE, "image": f"job:{first['id']}/preview.png"}}).status_code == 422
    assert service.a.post("/api/jobs", json={"kind": "texture", "config": {**TINY_TEXTURE, "image": f"job:{first['id']}/.neuralbake/checkpoints/train.pt"}}).status_code == 422


# -- ownership, route by route ---------------------------------------------------------------------

JOB_ROUTES = {
    ("GET", "/api/jobs/{job_id}"),
    ("POST", "/api/jobs/{job_id}/cancel"),
    ("POST", "/api/jobs/{job_id}/retry"),
    ("GET", "/api/jobs/{job_id}/events"),
    ("GET", "/api/jobs/{job_id}/previews/{file}"),
    ("POST", "/api/jobs/{job_id}/paint"),
    ("GET", "/api/jobs/{job_id}/files"),
    ("GET", "/api/jobs/{job_id}/files/{name:path}"),
}


def _route_calls(job_id: str) -> dict[tuple[str, str], tuple[str, str, dict[str, Any]]]:
    return {
        ("GET", "/api/jobs/{job_id}"): ("GET", f"/api/jobs/{job_id}", {}),
        ("POST", "/api/jobs/{job_id}/cancel"): ("POST", f"/api/jobs/{job_id}/cancel", {}),
        ("POST", "/api/jobs/{job_id}/retry"): ("POST", f"/api/jobs/{job_id}/retry", {}),
        ("GET", "/api/jobs/{job_id}/events"): ("GET", f"/api/jobs/{job_id}/events", {}),
        ("GET", "/api/jobs/{job_id}/previews/{file}"): ("GET", f"/api/jobs/{job_id}/previews/view0.000001.png", {}),
        ("POST", "/api/jobs/{job_id}/paint"): ("POST", f"/api/jobs/{job_id}/paint", {"json": {"view": 0, "strokes": "AAAA"}}),
        ("GET", "/api/jobs/{job_id}/files"): ("GET", f"/api/jobs/{job_id}/files", {}),
        ("GET", "/api/jobs/{job_id}/files/{name:path}"): ("GET", f"/api/jobs/{job_id}/files/report.json", {}),
    }


def test_the_route_table_is_covered(service: Service) -> None:
    with_ids = {(method, route.path) for route in service.a.app.routes for method in getattr(route, "methods", ()) if "{job_id}" in route.path and method != "HEAD"}
    assert with_ids == JOB_ROUTES, "a job route was added or renamed: give it an ownership check and a case here"


def test_another_token_gets_404_on_every_route_and_an_admin_sees_all(service: Service, tiny_png: Path) -> None:
    upload = _upload(service.a, {"a.png": tiny_png.read_bytes()})
    job = service.a.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{upload}/a.png"}}).json()
    service.work()
    assert service.a.get(f"/api/jobs/{job['id']}").json()["status"] == "succeeded"
    missing = "f" * 32
    for route, (method, url, kwargs) in _route_calls(job["id"]).items():
        theirs = service.b.request(method, url, **kwargs)
        assert theirs.status_code == 404, (route, theirs.text)
        unknown = service.b.request(method, url.replace(job["id"], missing), **kwargs)
        assert unknown.status_code == 404 and theirs.json()["error"] == unknown.json()["error"].replace(missing, job["id"]), route  # no probing
        mine = service.a.request(method, url, **kwargs)
        admin = service.admin.request(method, url, **kwargs)
        for response in (mine, admin):
            assert response.status_code != 404 or "no job" not in response.json().get("error", ""), (route, response.text)
    # Listings, and what is submitted with another's upload.
    assert [j["id"] for j in service.b.get("/api/jobs").json()] == []
    assert [j["id"] for j in service.a.get("/api/jobs").json()] == [job["id"]]
    assert job["id"] in [j["id"] for j in service.admin.get("/api/jobs").json()]
    stolen = service.b.post("/api/jobs", json={"kind": "texture", "inputs": {"image": f"{upload}/a.png"}})
    assert stolen.status_code == 422 and "no upload" in stolen.json()["error"]
    # The same bytes sent by B make the upload B's too (B has them anyway).
    assert _upload(service.b, {"a.png": tiny_png.read_bytes()}) == upload
    assert service.b.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{upload}/a.png"}}).status_code == 201


def test_a_running_job_cannot_be_cancelled_by_another_token(service: Service, tiny_png: Path) -> None:
    upload = _upload(service.a, {"a.png": tiny_png.read_bytes()})
    job = service.a.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{upload}/a.png"}}).json()
    assert service.b.post(f"/api/jobs/{job['id']}/cancel").status_code == 404
    assert service.store.get_job(job["id"]).status == "queued" and not service.store.get_job(job["id"]).cancel_requested


def test_nothing_a_client_reads_shows_a_server_path(service: Service, tmp_path: Path, tiny_png: Path) -> None:
    broken = _upload(service.a, {"broken.png": b"not a picture"})
    good = _upload(service.a, {"a.png": tiny_png.read_bytes()})
    ids = []
    for ref in (f"{good}/a.png", f"{broken}/broken.png"):
        response = service.a.post("/api/jobs", json={"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": ref}})
        assert response.status_code == 201, response.text  # the broken picture is found out by the bake, not at submission
        ids.append(response.json()["id"])
    service.work(2)
    roots = {str(service.settings.data), str(service.settings.data.resolve()), str(tmp_path), str(tmp_path.resolve())}
    for job_id in ids:
        record = service.a.get(f"/api/jobs/{job_id}").text
        with service.a.stream("GET", f"/api/jobs/{job_id}/events") as response:
            events = "".join(response.iter_text())
        for text in (record, events):
            assert not any(root in text for root in roots), text[:2000]
    files = service.a.get(f"/api/jobs/{ids[0]}/files").json()["files"]
    for name in ("config.json", "report.json", "events.jsonl"):
        assert name in files
        text = service.a.get(f"/api/jobs/{ids[0]}/files/{name}").text
        assert not any(root in text for root in roots), (name, text[:2000])
    assert f"{good}/a.png" in service.a.get(f"/api/jobs/{ids[0]}/files/config.json").json()["image"]
    failed = service.a.get(f"/api/jobs/{ids[1]}").json()
    assert failed["status"] == "failed" and f"{broken}/broken.png" in failed["error"], failed


def test_tokens_are_listed_revoked_and_made_admin_from_the_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from neuralbake.cli import app

    data = tmp_path / "data"
    runner = CliRunner()
    made = {name: runner.invoke(app, ["token", "create", name, "--data", str(data), *extra]) for name, extra in (("alice", []), ("ops", ["--admin"]))}
    assert all(result.exit_code == 0 for result in made.values()), {k: v.output for k, v in made.items()}
    secret = made["alice"].output.strip().splitlines()[-1].strip()
    listing = runner.invoke(app, ["token", "list", "--data", str(data)])
    assert listing.exit_code == 0 and "alice" in listing.output and "admin" in listing.output and secret not in listing.output
    settings = ServiceSettings(data=data)
    client = TestClient(create_app(settings), headers={"Authorization": f"Bearer {secret}"})
    assert client.get("/api/jobs").status_code == 200
    assert runner.invoke(app, ["token", "revoke", "alice", "--data", str(data)]).exit_code == 0
    assert client.get("/api/jobs").status_code == 401
    refused = runner.invoke(app, ["token", "revoke", "alice", "--data", str(data)])
    assert refused.exit_code == 2 and "no live token" in refused.output


def test_an_ntc_job_may_name_its_gltf_material(service: Service) -> None:
    """`material` of an ntc job is a material's name or index, not a file: the service leaves it alone."""
    crate = Path(__file__).resolve().parents[2] / "examples" / "crate"
    files = {p.name: p.read_bytes() for p in crate.iterdir() if p.name.startswith("crates") and p.suffix in (".gltf", ".bin", ".png")}
    upload = _upload(service.a, files)
    response = service.a.post("/api/jobs", json={"kind": "ntc", "config": {"material": "crate_red", "bpp": [4.0]}, "inputs": {"sources": [f"{upload}/crates.gltf"]}})
    assert response.status_code == 201, response.text
    assert response.json()["config"]["material"] == "crate_red"


@pytest.mark.slow
def test_no_output_of_any_finished_job_shows_a_server_path(service: Service, tmp_path: Path, tiny_png: Path) -> None:
    """A safety net over whole bakes (a neural material's bundle manifest, an NTC's per-rate reports,
    a texture's records): every text file a job's owner downloads names inputs by reference only."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    material = _upload(service.a, {"velvet.json": (examples / "materials" / "velvet.json").read_bytes()})
    import numpy as np
    from PIL import Image

    Image.fromarray((np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)).save(tmp_path / "square.png")
    maps = _upload(service.a, {"base.png": (tmp_path / "square.png").read_bytes(), "rough.png": (tmp_path / "square.png").read_bytes()})
    bodies = [
        {"kind": "material", "config": {"texture_size": 8, "batch_size": 512, "device": "cpu", "decoder_hidden": 16, "encoder_hidden": 16,
                                        "compare_size": 16, "compare_spp": 1, "train": {"steps": 20, "checkpoint_every": 0}},
         "inputs": {"material": f"{material}/velvet.json"}},
        {"kind": "ntc", "config": {"bpp": [8.0, 16.0], "hidden": [16], "batch_size": 256, "finetune_steps": 2, "baselines": False, "device": "cpu",
                                   "train": {"steps": 10, "precision": "fp32", "eval_every": 0, "checkpoint_every": 0}},
         "inputs": {"sources": [f"base_color={maps}/base.png", f"roughness={maps}/rough.png"]}},
        {"kind": "texture", "config": TINY_TEXTURE, "inputs": {"image": f"{maps}/base.png"}},
        {"kind": "material-pack", "config": {"bake": {"texture_size": 8, "batch_size": 512, "device": "cpu", "decoder_hidden": 16, "encoder_hidden": 16,
                                                      "compare_size": 16, "compare_spp": 1, "train": {"steps": 20, "checkpoint_every": 0}}},
         "inputs": {"materials": [f"{material}/velvet.json"]}},
    ]
    ids = []
    for body in bodies:
        response = service.a.post("/api/jobs", json=body)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    service.work(len(ids))
    roots = {str(service.settings.data.absolute()), str(service.settings.data.resolve()), str(tmp_path.resolve())}
    for job_id in ids:
        record = service.a.get(f"/api/jobs/{job_id}").json()
        assert record["status"] == "succeeded", (record["kind"], record["error"])
        for name in service.a.get(f"/api/jobs/{job_id}/files").json()["files"]:
            if name.endswith((".json", ".jsonl", ".txt", ".slang", ".hlsl")):
                text = service.a.get(f"/api/jobs/{job_id}/files/{name}").text
                assert not any(root in text for root in roots), (job_id, name, [line for line in text.splitlines() if any(r in line for r in roots)][:3])


def test_the_bakes_outside_the_first_five_are_jobs_too(service: Service, tiny_png: Path) -> None:
    """A material pack and a style LoRA (registered like every bake) are accepted, their list and folder inputs confined."""
    material = _upload(service.a, {"velvet.json": (Path(__file__).resolve().parents[2] / "examples" / "materials" / "velvet.json").read_bytes()})
    images = _upload(service.a, {"style/a.png": tiny_png.read_bytes(), "style/b.png": tiny_png.read_bytes()})
    pack = service.a.post("/api/jobs", json={"kind": "material-pack", "config": {"bake": {"device": "cpu"}}, "inputs": {"materials": [f"{material}/velvet.json"]}})
    assert pack.status_code == 201, pack.text
    assert pack.json()["config"]["materials"] == [f"{material}/velvet.json"] and pack.json()["config"]["bake"]["material"] == ""
    lora = service.a.post("/api/jobs", json={"kind": "postfx-lora", "config": {"base": "sd", "device": "cpu"}, "inputs": {"images": f"{images}/style"}})
    assert lora.status_code == 201 and lora.json()["config"]["images"] == f"{images}/style", lora.text
    for body in ({"kind": "postfx-lora", "config": {"base": "sd"}, "inputs": {"images": "/etc"}},
                 {"kind": "material-pack", "config": {}, "inputs": {"materials": [f"{images}/../../uploads"]}},
                 {"kind": "postfx-lora", "config": {"base": "sd"}, "inputs": {"images": f"{images}/style"}, "unused": 1}):
        response = service.b.post("/api/jobs", json=body)  # b owns neither upload; a path is never a reference
        assert response.status_code in (404, 422), response.text


def test_the_redactor_knows_only_absolute_paths_at_their_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neuralbake.service.paths import Redactor

    monkeypatch.chdir(tmp_path)
    relative = Redactor(Path("."))
    assert relative.text("ab12/a.png metadata, 1.5") == "ab12/a.png metadata, 1.5"  # a relative --data mangles nothing
    assert relative.text(f"{tmp_path}/uploads/{'a' * 64}/x.png") == f"{'a' * 64}/x.png"
    server = Redactor(Path("/srv/nb"), Path("/srv/models"))
    assert server.text("/srv/nb2/secret and '/srv/nb' and /srv/nb/service.db") == "/srv/nb2/secret and '<data>' and <data>/service.db"
    assert server.text(f"/srv/nb/jobs/{'b' * 32}/out/report.json, /srv/models/sd/base") == f"job:{'b' * 32}/report.json, sd/base"
