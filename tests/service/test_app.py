"""The HTTP API: tokens, uploads (content-addressed, confined), job submission with the bakes'
own checks, server-sent events with Last-Event-ID, downloads of verified outputs only."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from neuralbake.service.app import create_app, hash_token
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import Store
from neuralbake.service.worker import WorkerSettings, run_worker

TOKEN = "t" * 43


@pytest.fixture
def service(tmp_path: Path) -> tuple[TestClient, Store, ServiceSettings]:
    settings = ServiceSettings(data=tmp_path / "data", max_upload_bytes=200_000, max_request_bytes=20_000)
    settings.data.mkdir()
    store = Store(settings.database_url())
    store.migrate()
    store.add_token("tests", hash_token(TOKEN), quota_jobs=5)
    client = TestClient(create_app(settings, store), headers={"Authorization": f"Bearer {TOKEN}"})
    return client, store, settings


def _upload(client: TestClient, files: dict[str, bytes]) -> dict:
    response = client.post("/api/uploads", files=[("files", (name, data)) for name, data in files.items()])
    assert response.status_code == 201, response.text
    return response.json()


def test_requests_without_a_valid_token_are_refused(service) -> None:
    client, _, _ = service
    assert client.get("/api/health").status_code == 200
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        response = client.get("/api/jobs", headers=headers)
        assert response.status_code == 401 and "token" in response.json()["error"]


def test_uploads_are_content_addressed_and_names_are_confined(service, tiny_png: Path) -> None:
    client, _, _ = service
    first = _upload(client, {"a.png": tiny_png.read_bytes(), "sub/b.txt": b"x"})
    assert _upload(client, {"sub/b.txt": b"x", "a.png": tiny_png.read_bytes()})["id"] == first["id"]
    for name in ("../evil.png", "/etc/passwd", "a\\b.png", "sub/../../x", "."):
        response = client.post("/api/uploads", files=[("files", (name, b"x"))])
        assert response.status_code == 422, (name, response.text)
    big = client.post("/api/uploads", files=[("files", ("big.bin", b"0" * 300_000))])
    assert big.status_code == 413


def test_a_zip_is_unpacked_safely(service) -> None:
    client, _, _ = service
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mesh/model.gltf", "{}")
        archive.writestr("mesh/model.bin", b"\x00" * 16)
    assert set(_upload(client, {"asset.zip": buffer.getvalue()})["files"]) == {"mesh/model.gltf", "mesh/model.bin"}
    for evil in ("../../outside.txt", "/abs.txt"):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(evil, "x")
        assert client.post("/api/uploads", files=[("files", ("e.zip", buffer.getvalue()))]).status_code == 422
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\x00" * 5_000_000)  # 5 MB of zeros, a few kB zipped
    assert client.post("/api/uploads", files=[("files", ("bomb.zip", bomb.getvalue()))]).status_code == 413


def test_bad_jobs_get_the_bakes_own_messages(service, tiny_png: Path) -> None:
    client, _, _ = service
    upload = _upload(client, {"a.png": tiny_png.read_bytes()})
    cases = [
        ({"kind": "sculpt"}, "unknown job kind"),
        ({"kind": "texture", "config": {"image": "/etc/passwd"}}, "not a reference to an upload"),
        ({"kind": "texture", "inputs": {"image": "0" * 64 + "/a.png"}}, "no upload"),
        ({"kind": "texture", "inputs": {"image": upload["id"] + "/../a.png"}}, "not a plain relative"),
        ({"kind": "texture", "inputs": {"image": upload["id"] + "/b.png"}}, "has no file"),
        ({"kind": "texture", "config": {"train": {"steps": "many"}}, "inputs": {"image": upload["id"] + "/a.png"}}, "expected an integer"),
        ({"kind": "texture", "config": {"transform": "rotate"}, "inputs": {"image": upload["id"] + "/a.png"}}, "not one of"),
    ]
    for body, expected in cases:
        response = client.post("/api/jobs", json=body)
        assert response.status_code == 422, (body, response.text)
        assert expected in response.json()["error"], (body, response.json())
    assert client.post("/api/jobs", content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert client.post("/api/jobs", content=b"x" * 30_000, headers={"Content-Type": "application/json"}).status_code == 413


def test_quota_is_enforced(service, tiny_png: Path) -> None:
    client, _, _ = service
    upload = _upload(client, {"a.png": tiny_png.read_bytes()})
    body = {"kind": "texture", "inputs": {"image": upload["id"] + "/a.png"}}
    codes = [client.post("/api/jobs", json=body).status_code for _ in range(6)]
    assert codes == [201] * 5 + [429]


def test_submit_run_stream_and_download(service, tiny_png: Path) -> None:
    client, store, settings = service
    upload = _upload(client, {"photo.png": tiny_png.read_bytes()})
    body = {"kind": "texture", "config": {"batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2},
                                           "train": {"steps": 20, "precision": "fp32", "eval_every": 0}},
            "inputs": {"image": upload["id"] + "/photo.png"}}
    job = client.post("/api/jobs", json=body).json()
    assert job["status"] == "queued" and job["config"]["image"].endswith("photo.png")
    assert client.get(f"/api/jobs/{job['id']}/files").status_code == 409  # not finished
    run_worker(WorkerSettings(db=settings.database_url(), data=settings.data, poll_seconds=0.05), "w1", max_jobs=1)
    assert client.get(f"/api/jobs/{job['id']}").json()["status"] == "succeeded"

    def events(headers: dict[str, str] | None = None, query: str = "") -> list[tuple[int, str]]:
        with client.stream("GET", f"/api/jobs/{job['id']}/events{query}", headers=headers or {}) as response:
            assert response.status_code == 200
            seen, current = [], None
            for line in response.iter_lines():
                if line.startswith("id: "):
                    current = int(line[4:])
                elif line.startswith("event: "):
                    seen.append((current, line[7:]))
            return seen

    everything = events()
    assert everything[0] == (1, "queued") and everything[-1][1] == "succeeded"
    assert [seq for seq, _ in everything] == list(range(1, len(everything) + 1))
    assert events({"Last-Event-ID": "3"}) == everything[3:]  # a reconnect misses nothing, repeats nothing
    assert events(query="?after=5") == everything[5:]

    files = client.get(f"/api/jobs/{job['id']}/files").json()["files"]
    assert "network.safetensors" in files and "report.json" in files
    report = client.get(f"/api/jobs/{job['id']}/files/report.json")
    assert report.status_code == 200 and json.loads(report.content)["steps"] == 20
    for bad in ("../../service.db", ".neuralbake/checkpoints/train.pt", "nope.txt"):
        assert client.get(f"/api/jobs/{job['id']}/files/{bad}").status_code == 404, bad
    assert client.get("/api/jobs/0123/files").status_code == 404


def test_cancel_retry_and_kinds(service, tiny_png: Path) -> None:
    client, _, _ = service
    upload = _upload(client, {"a.png": tiny_png.read_bytes()})
    job = client.post("/api/jobs", json={"kind": "texture", "inputs": {"image": upload["id"] + "/a.png"}}).json()
    assert client.post(f"/api/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    assert client.post(f"/api/jobs/{job['id']}/retry").json()["status"] == "queued"
    assert client.post(f"/api/jobs/{job['id']}/retry").status_code == 409
    kinds = client.get("/api/kinds").json()
    assert set(kinds) == {"texture", "material", "material-pack", "ntc", "mipmap", "fit", "simplify", "skin", "lod", "postfx", "postfx-lora"}
    assert next(f for f in kinds["lod"]["fields"] if f["name"] == "ratio")["default"] == 0.25
    steps = next(f for f in kinds["texture"]["fields"] if f["name"] == "train.steps")
    assert steps["default"] is None and "optimiser steps" in steps["doc"]
