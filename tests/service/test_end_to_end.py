"""The service for real: `neuralbake serve` on loopback with a worker, driven by the Python client
and by the CLI; texture, material and fit jobs submitted, completed and downloaded; a server
restarted mid-queue finishes every job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuralbake.client import ServiceClient
from neuralbake.io.manifest import verify_bake_folder

from ._support import Server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TINY_TEXTURE = {"batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2}, "train": {"steps": 40, "precision": "fp32", "eval_every": 0}}


@pytest.fixture
def server(tmp_path: Path):
    instance = Server(tmp_path / "data")
    instance.start()
    yield instance
    instance.stop()


@pytest.mark.slow
def test_texture_material_and_fit_through_the_client(server: Server, tiny_png: Path, tmp_path: Path) -> None:
    client = ServiceClient(server.url, server.token)
    image = client.upload([tiny_png])
    texture = client.submit("texture", TINY_TEXTURE, {"image": f"{image['id']}/{tiny_png.name}"})
    velvet = client.upload([EXAMPLES / "materials" / "velvet.json"])
    material = client.submit("material", {"latent": 4, "texture_size": 8, "batch_size": 64, "device": "cpu", "compare_size": 8, "compare_spp": 1,
                                          "decoder_hidden": 16, "encoder_hidden": 16, "train": {"steps": 20}}, {"material": f"{velvet['id']}/velvet.json"})
    crate = client.upload(sorted(p for p in (EXAMPLES / "crate").iterdir() if p.suffix in (".gltf", ".bin", ".png")))
    fit = client.submit("fit", {"render_size": 32, "texture_size": 64, "views": 6, "held_out_views": 2, "epochs": 2, "environment_samples": 4, "device": "cpu"},
                        {"asset": f"{crate['id']}/crate.gltf"})
    for job in (texture, material, fit):
        seen = list(client.events(job["id"]))
        assert [event["seq"] for event in seen] == list(range(1, len(seen) + 1))
        final = client.job(job["id"])
        assert final["status"] == "succeeded", final
        folder = tmp_path / job["kind"]
        client.fetch(job["id"], folder)
        assert verify_bake_folder(folder) is not None
    assert (tmp_path / "fit" / "lod.gltf").is_file() and (tmp_path / "material" / "latents.u8.safetensors").is_file()
    client.close()


@pytest.mark.slow
def test_the_cli_submits_watches_and_fetches(server: Server, tiny_png: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NEURALBAKE_SERVER": server.url, "NEURALBAKE_TOKEN": server.token}
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(TINY_TEXTURE))
    submitted = subprocess.run([sys.executable, "-m", "neuralbake", "submit", "texture", "--input", f"image={tiny_png}", "--config", str(settings), "--set", "train.steps=30"],
                               capture_output=True, text=True, env=env, timeout=120)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = submitted.stdout.split("job ")[1].split()[0]
    watched = subprocess.run([sys.executable, "-m", "neuralbake", "watch", job_id], capture_output=True, text=True, env=env, timeout=300)
    assert watched.returncode == 0 and "succeeded" in watched.stdout, watched.stdout + watched.stderr
    fetched = subprocess.run([sys.executable, "-m", "neuralbake", "fetch", job_id, "--out", str(tmp_path / "got")], capture_output=True, text=True, env=env, timeout=120)
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads((tmp_path / "got" / "report.json").read_text())["steps"] == 30
    listed = subprocess.run([sys.executable, "-m", "neuralbake", "jobs"], capture_output=True, text=True, env=env, timeout=60)
    assert job_id in listed.stdout
    refused = subprocess.run([sys.executable, "-m", "neuralbake", "jobs", "--token", "wrong"], capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2 and "token" in refused.stderr


def _events_so_far(server: Server, job_id: str) -> list[dict]:
    """The job's stored events up to now (read from the store, without waiting for the end)."""
    from neuralbake.service.store import Store

    store = Store(f"sqlite:///{(server.data / 'service.db').resolve()}")
    try:
        return [{"type": event.type} for event in store.events_after(job_id)]
    finally:
        store.close()


@pytest.mark.slow
def test_a_restarted_server_finishes_every_queued_job(server: Server, tiny_png: Path) -> None:
    client = ServiceClient(server.url, server.token)
    image = client.upload([tiny_png])
    long = {**TINY_TEXTURE, "train": {**TINY_TEXTURE["train"], "steps": 20000, "checkpoint_every": 50}}
    ids = [client.submit("texture", long if i == 0 else TINY_TEXTURE, {"image": f"{image['id']}/{tiny_png.name}"})["id"] for i in range(3)]
    deadline = time.monotonic() + 120
    while not any(event["type"] == "checkpoint" for event in _events_so_far(server, ids[0])):
        assert time.monotonic() < deadline and client.job(ids[0])["status"] in ("queued", "running")
        time.sleep(0.1)
    client.close()
    server.stop()  # mid-bake: the worker saves a checkpoint and hands the job back
    server.start()
    client = ServiceClient(server.url, server.token)
    for job_id in ids:
        assert client.wait(job_id)["status"] == "succeeded", client.job(job_id)["error"]
    events = [event["type"] for event in client.events(ids[0])]
    assert "requeued" in events and events.count("succeeded") == 1, " ".join(events)
    client.close()


@pytest.mark.slow
def test_fifty_concurrent_submissions_each_run_exactly_once(tmp_path: Path, tiny_png: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = Server(tmp_path / "data", workers=2)
    server.start()
    try:
        client = ServiceClient(server.url, server.token)
        image = client.upload([tiny_png])
        quick = {**TINY_TEXTURE, "train": {**TINY_TEXTURE["train"], "steps": 5}}
        with ThreadPoolExecutor(8) as pool:
            jobs = list(pool.map(lambda _: client.submit("texture", quick, {"image": f"{image['id']}/{tiny_png.name}"}), range(50)))
        ids = [job["id"] for job in jobs]
        assert len(set(ids)) == 50
        for job_id in ids:
            assert client.wait(job_id)["status"] == "succeeded"
            kinds = [event["type"] for event in client.events(job_id)]
            assert kinds.count("started") == 1 and kinds.count("succeeded") == 1, kinds  # none lost, none run twice
        assert len(client.jobs(status="succeeded")) == 50
        client.close()
    finally:
        server.stop()
