"""postfx jobs on the asset service: the model, ControlNets and LoRAs are names in the server's model
library (`neuralbake serve --models DIR`), resolved inside it; the render and its passes are uploads;
a worker runs the chain and the result is downloaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from neuralbake.io.images import load_image, save_png
from neuralbake.service.app import create_app, hash_token
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import Store
from neuralbake.service.worker import WorkerSettings, run_worker

pytest.importorskip("diffusers")
TOKEN = "p" * 43


@pytest.fixture
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from neuralbake.postfx.models import make_random_model

    root = tmp_path_factory.mktemp("library")
    make_random_model(root / "sd", family="sd", size="tiny")
    (root / "styles").mkdir()
    (root / "styles" / "junk.safetensors").write_bytes(b"x")
    return root


def _service(tmp_path: Path, models: Path | None):
    settings = ServiceSettings(data=tmp_path / "data", models=models)
    settings.data.mkdir(parents=True)
    store = Store(settings.database_url())
    store.migrate()
    store.add_token("tests", hash_token(TOKEN), quota_jobs=20)
    return TestClient(create_app(settings, store), headers={"Authorization": f"Bearer {TOKEN}"}), store, settings


def _render(client: TestClient, tmp_path: Path) -> str:
    save_png(tmp_path / "render.png", np.full((32, 32, 3), 0.5, np.float32))
    upload = client.post("/api/uploads", files=[("files", ("render.png", (tmp_path / "render.png").read_bytes()))])
    assert upload.status_code == 201, upload.text
    return f"{upload.json()['id']}/render.png"


def test_a_postfx_job_runs_with_the_library_and_returns_the_result(library: Path, tmp_path: Path) -> None:
    client, store, settings = _service(tmp_path, library)
    ref = _render(client, tmp_path)
    config = {"model": "sd/base", "controlnets": ["canny=sd/controlnet:0.5"], "prompt": "x", "steps": 2, "size": 64, "device": "cpu"}
    job = client.post("/api/jobs", json={"kind": "postfx", "config": config, "inputs": {"render": ref}})
    assert job.status_code == 201, job.text
    stored = store.get_job(job.json()["id"]).config
    # The job keeps the library's names (the worker resolves them in its own --models), never the server's paths.
    assert stored["model"] == "sd/base" and stored["controlnets"] == ["canny=sd/controlnet:0.5"]
    assert str(library) not in str(job.json()["config"])
    assert run_worker(WorkerSettings(db=settings.database_url(), data=settings.data, poll_seconds=0.05, models=library), "w1", max_jobs=1) == 1
    final = client.get(f"/api/jobs/{job.json()['id']}").json()
    assert final["status"] == "succeeded", final
    result = client.get(f"/api/jobs/{job.json()['id']}/files/result.png")
    assert result.status_code == 200
    (tmp_path / "got.png").write_bytes(result.content)
    assert load_image(tmp_path / "got.png")[0].shape == (32, 32, 3)


def test_library_names_are_confined_and_checked(library: Path, tmp_path: Path) -> None:
    client, _, _ = _service(tmp_path, library)
    ref = _render(client, tmp_path)
    cases = [
        ({"model": "../outside"}, "outside the model library", "config.model"),
        ({"model": str(library / "sd" / "base")}, "not a name in the model library", "config.model"),
        ({"model": "sd/nothing"}, "has no folder", "config.model"),
        ({"model": "sd/base", "controlnets": ["depth=../../etc"]}, "outside the model library", "config.controlnets[0]"),
        ({"model": "sd/base", "loras": ["styles/missing.safetensors:0.5"]}, "has no file", "config.loras[0]"),
    ]
    for config, message, field in cases:
        response = client.post("/api/jobs", json={"kind": "postfx", "config": config, "inputs": {"render": ref}})
        assert response.status_code == 422 and message in response.json()["error"] and response.json()["field"] == field, (config, response.text)
    bare, _, _ = _service(tmp_path / "bare", None)
    response = bare.post("/api/jobs", json={"kind": "postfx", "config": {"model": "sd/base"}, "inputs": {"render": _render(bare, tmp_path)}})
    assert response.status_code == 422 and "--models" in response.json()["fix"]


def test_a_frame_sequence_is_a_folder_input_of_postfx_jobs_only(library: Path, tmp_path: Path) -> None:
    client, store, _ = _service(tmp_path, library)
    save_png(tmp_path / "frame.png", np.full((16, 16, 3), 0.5, np.float32))
    data = (tmp_path / "frame.png").read_bytes()
    upload = client.post("/api/uploads", files=[("files", (f"frames/{k:04d}.png", data)) for k in range(2)]).json()
    job = client.post("/api/jobs", json={"kind": "postfx", "config": {"model": "sd/base"}, "inputs": {"render": f"{upload['id']}/frames"}})
    assert job.status_code == 201, job.text
    assert store.get_job(job.json()["id"]).config["render"] == f"{upload['id']}/frames"
    texture = client.post("/api/jobs", json={"kind": "texture", "config": {}, "inputs": {"image": f"{upload['id']}/frames"}})
    assert texture.status_code == 422 and "has no file" in texture.json()["error"]
    escape = client.post("/api/jobs", json={"kind": "postfx", "config": {"model": "sd/base"}, "inputs": {"render": f"{upload['id']}/../frames"}})
    assert escape.status_code == 422
