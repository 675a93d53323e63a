"""Interactive fitting through the API: a watched fit publishes live previews and paintable views;
strokes posted on a view become uv0 weights and a warm-started refit that uses them; a running fit
is stopped first and the refit starts from the checkpoint it saved; bad paint requests get 4xx."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from neuralbake.service.app import create_app, hash_token
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import Store
from neuralbake.service.worker import WorkerSettings, run_worker

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "p" * 43
TINY_FIT = {"render_size": 32, "texture_size": 64, "views": 6, "held_out_views": 2, "epochs": 2, "environment_samples": 4, "device": "cpu"}


@pytest.fixture
def service(tmp_path: Path) -> tuple[TestClient, Store, ServiceSettings]:
    settings = ServiceSettings(data=tmp_path / "data")
    settings.data.mkdir()
    store = Store(settings.database_url())
    store.migrate()
    store.add_token("tests", hash_token(TOKEN))
    client = TestClient(create_app(settings, store), headers={"Authorization": f"Bearer {TOKEN}"})
    return client, store, settings


def _submit_fit(client: TestClient, **changes) -> dict:
    files = [("files", (p.name, p.read_bytes())) for p in sorted((ROOT / "examples" / "crate").iterdir()) if p.suffix in (".gltf", ".bin", ".png")]
    upload = client.post("/api/uploads", files=files).json()
    response = client.post("/api/jobs", json={"kind": "fit", "config": {**TINY_FIT, **changes}, "inputs": {"asset": upload["id"] + "/crate.gltf"}})
    assert response.status_code == 201, response.text
    return response.json()


def _work(settings: ServiceSettings, jobs: int = 1) -> None:
    run_worker(WorkerSettings(db=settings.database_url(), data=settings.data, poll_seconds=0.05), "w1", max_jobs=jobs)


def _strokes(size: int = 32, box: tuple[int, int, int, int] = (8, 8, 24, 24), fmt: str = "PNG") -> str:
    """A transparent canvas with an opaque painted square, as the browser sends it (a data URL)."""
    canvas = np.zeros((size, size, 4), np.uint8)
    x0, y0, x1, y1 = box
    canvas[y0:y1, x0:x1] = (255, 60, 0, 255)
    buffer = io.BytesIO()
    Image.fromarray(canvas if fmt == "PNG" else canvas[..., :3]).save(buffer, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


def _events(store: Store, job_id: str) -> list:
    return store.events_after(job_id)


def _report(client: TestClient, job_id: str) -> dict:
    return json.loads(client.get(f"/api/jobs/{job_id}/files/report.json").content)


def _mask(settings: ServiceSettings, ref: str) -> np.ndarray:
    return np.asarray(Image.open(settings.data / "uploads" / ref), np.float32) / 255.0


@pytest.mark.slow
def test_paint_on_a_finished_fit_starts_a_weighted_warm_refit(service) -> None:
    client, store, settings = service
    job = _submit_fit(client)
    _work(settings)
    assert client.get(f"/api/jobs/{job['id']}").json()["status"] == "succeeded"
    events = _events(store, job["id"])
    previews = [e.data for e in events if e.type == "preview"]
    assert {p["name"] for p in previews} == {"triptych", "view0", "view1"}
    assert [e.data["view"] for e in events if e.type == "paint_view"] == [0, 1]
    latest = [p for p in previews if p["name"] == "triptych"][-1]
    picture = client.get(f"/api/jobs/{job['id']}/previews/{latest['file']}")
    assert picture.status_code == 200 and picture.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(picture.content)).size == (latest["width"], latest["height"])
    for bad in ("view0.npz", "..%2F..%2Fservice.db", "triptych.999999.png", "x.png"):
        assert client.get(f"/api/jobs/{job['id']}/previews/{bad}").status_code == 404, bad

    painted = client.post(f"/api/jobs/{job['id']}/paint", json={"view": 0, "strokes": _strokes(), "config": {"epochs": 1}})
    assert painted.status_code == 201, painted.text
    refit = painted.json()
    assert refit["painted_texels"] > 0 and refit["warm_start"] and refit["weights_size"] == [512, 512]
    config = refit["job"]["config"]
    assert config["epochs"] == 1 and config["weights"].endswith("weights.png") and config["warm_start"].endswith("fit.pt")
    assert _mask(settings, refit["weights"]).max() == 1.0
    assert [e.data["job"] for e in _events(store, job["id"]) if e.type == "refit"] == [refit["job"]["id"]]
    _work(settings)
    assert client.get(f"/api/jobs/{refit['job']['id']}").json()["status"] == "succeeded"
    first, second = _report(client, job["id"]), _report(client, refit["job"]["id"])
    assert second["initial_psnr_db"] == pytest.approx(first["psnr_db"], abs=1e-6)  # the refit starts where the fit stood
    assert second["weighted_pixel_fraction"] > 0.0 == first["weighted_pixel_fraction"]

    # painting again starts from the refit's own mask: erasing part of the square shrinks it
    erased = client.post(f"/api/jobs/{refit['job']['id']}/paint", json={"view": 0, "mode": "erase", "strokes": _strokes(box=(8, 8, 16, 24))})
    assert erased.status_code == 201, erased.text
    before, after = _mask(settings, refit["weights"]), _mask(settings, erased.json()["weights"])
    assert 0 < after.sum() < before.sum() and (after <= before).all()


@pytest.mark.slow
def test_paint_on_a_running_fit_stops_it_and_refits_from_its_checkpoint(service) -> None:
    client, store, settings = service
    job = _submit_fit(client, epochs=400)
    worker = threading.Thread(target=_work, args=(settings,), daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while not any(e.type == "preview" and e.data["name"] == "triptych" and e.data["step"] > 0 for e in _events(store, job["id"])):
        assert time.monotonic() < deadline, "the fit published no triptych after training started"
        time.sleep(0.2)
    painted = client.post(f"/api/jobs/{job['id']}/paint", json={"view": 1, "strokes": _strokes(), "config": {"epochs": 1}})
    assert painted.status_code == 201, painted.text
    worker.join(timeout=60)
    old = client.get(f"/api/jobs/{job['id']}").json()
    assert old["status"] == "cancelled"
    checkpoints = [e.data["step"] for e in _events(store, job["id"]) if e.type == "checkpoint"]
    assert checkpoints and checkpoints[-1] < 400 * 6  # stopped early, its last state saved
    _work(settings)
    refit = painted.json()["job"]
    assert client.get(f"/api/jobs/{refit['id']}").json()["status"] == "succeeded"
    assert _report(client, refit["id"])["weighted_pixel_fraction"] > 0


def test_bad_paint_requests_get_clear_4xx(service, tiny_png: Path) -> None:
    client, store, settings = service
    job = _submit_fit(client, epochs=1)
    assert client.post(f"/api/jobs/{job['id']}/paint", json={"view": 0, "strokes": _strokes()}).status_code == 409  # no views yet
    _work(settings)
    upload = client.post("/api/uploads", files=[("files", ("a.png", tiny_png.read_bytes()))]).json()
    texture = client.post("/api/jobs", json={"kind": "texture", "inputs": {"image": upload["id"] + "/a.png"}}).json()
    cases = [
        (job["id"], {"view": 7, "strokes": _strokes()}, 409, "no paintable view 7"),
        (texture["id"], {"view": 0, "strokes": _strokes()}, 409, "only fit jobs"),
        (job["id"], {"view": 0, "strokes": "data:image/png;base64,@@@"}, 422, "not base64"),
        (job["id"], {"view": 0, "strokes": _strokes(fmt="JPEG")}, 422, "must be a PNG"),
        (job["id"], {"view": 0, "strokes": base64.b64encode(b"not a png").decode()}, 422, "cannot be read"),
        (job["id"], {"view": 0, "strokes": _strokes(box=(0, 0, 2, 2))}, 422, "touch no part"),
        (job["id"], {"view": 0, "strokes": _strokes(), "config": {"asset": "/etc/passwd"}}, 422, "keeps the job's asset"),
        (job["id"], {"view": 0, "strokes": _strokes(), "config": {"render_size": 3}}, 422, "render_size"),
        (job["id"], {"view": 0, "strokes": _strokes(), "brush": 3}, 422, "unknown key 'brush'"),
        (job["id"], {"view": -1, "strokes": _strokes()}, 422, "view must be"),
        (job["id"], {"view": 0, "strokes": _strokes(), "mode": "smudge"}, 422, "mode must be"),
        (job["id"], [1, 2], 422, "JSON object"),
        ("0123", {"view": 0, "strokes": _strokes()}, 404, "no job"),
    ]
    for job_id, body, status, message in cases:
        response = client.post(f"/api/jobs/{job_id}/paint", json=body)
        assert response.status_code == status and message in response.json()["error"], (body if not isinstance(body, dict) else list(body), response.text)
    assert client.post(f"/api/jobs/{job['id']}/paint", json={"view": 0, "strokes": _strokes()}, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert len(store.list_jobs()) == 2  # no refused request made a job
