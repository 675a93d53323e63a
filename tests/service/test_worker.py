"""Workers: a job runs on the bake run path with its events stored; failures, cancellation, a
worker killed mid-bake (the next attempt resumes from the checkpoint), a worker shut down."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from neuralbake.io.manifest import verify_bake_folder
from neuralbake.service.store import Store
from neuralbake.service.worker import StoreSink, WorkerSettings, _worker_process, job_folder, run_worker

from ._support import uploaded


def _texture_job(settings: WorkerSettings, image: Path, steps: int) -> dict:
    """A texture job as the service stores it: the image as a reference to an upload."""
    return {"image": uploaded(settings.data, image), "batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2},
            "train": {"steps": steps, "precision": "fp32", "checkpoint_every": 2, "eval_every": 0, "log_every": 10}}


@pytest.fixture
def settings(tmp_path: Path) -> WorkerSettings:
    data = tmp_path / "data"
    data.mkdir()
    url = f"sqlite:///{data / 'service.db'}"
    Store(url).migrate()
    return WorkerSettings(db=url, data=data, lease_seconds=1.5, poll_seconds=0.05)


def test_a_worker_runs_a_job_to_a_verified_bundle_with_its_events(settings: WorkerSettings, tiny_png: Path) -> None:
    store = Store(settings.db)
    job = store.create_job("texture", _texture_job(settings, tiny_png, 30))
    assert run_worker(settings, "w1", max_jobs=1) == 1
    done = store.get_job(job.id)
    assert done is not None and done.status == "succeeded", done
    kinds = [event.type for event in store.events_after(job.id)]
    assert kinds[:3] == ["queued", "started", "bake"] and "phase" in kinds and "train" in kinds and kinds[-1] == "succeeded"
    assert [e.seq for e in store.events_after(job.id)] == list(range(1, len(kinds) + 1))
    assert store.events_after(job.id)[-1].data["report"]["steps"] == 30
    assert verify_bake_folder(job_folder(settings.data, job.id)) is not None


def test_a_bad_job_fails_with_the_bake_s_message(settings: WorkerSettings, tmp_path: Path) -> None:
    store = Store(settings.db)
    broken = tmp_path / "nope.png"
    broken.write_bytes(b"not a picture")
    missing = store.create_job("texture", _texture_job(settings, broken, 10))
    mistyped = store.create_job("texture", {"train": {"steps": "many"}})
    unknown = store.create_job("sculpt", {})
    run_worker(settings, "w1", max_jobs=3)
    for job_id, expected in ((missing.id, "nope.png"), (mistyped.id, "expected an integer"), (unknown.id, "unknown job kind")):
        job = store.get_job(job_id)
        assert job is not None and job.status == "failed" and expected in (job.error or ""), job
        assert str(settings.data) not in (job.error or "") and str(settings.data.resolve()) not in (job.error or ""), job.error  # no server paths


def test_a_cancelled_job_stops_at_the_next_step(settings: WorkerSettings, tiny_png: Path) -> None:
    store = Store(settings.db)
    job = store.create_job("texture", _texture_job(settings, tiny_png, 100_000))
    stop = threading.Event()
    thread = threading.Thread(target=run_worker, args=(settings, "w1", stop), kwargs={"max_jobs": 1})
    thread.start()
    checkpoints = job_folder(settings.data, job.id) / ".neuralbake" / "checkpoints"
    deadline = time.monotonic() + 60
    while not (checkpoints.is_dir() and any(checkpoints.glob("*.pt"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    store.request_cancel(job.id)
    thread.join(timeout=60)
    assert not thread.is_alive()
    final = store.get_job(job.id)
    assert final is not None and final.status == "cancelled", final
    assert [e.type for e in store.events_after(job.id)][-1] == "cancelled"


def test_store_sink_throttles_train_events_but_keeps_the_last(settings: WorkerSettings) -> None:
    store = Store(settings.db)
    job = store.create_job("texture", {})
    sink = StoreSink(store, job.id, interval=60.0)
    for step in range(1, 51):
        sink.write({"event": "train", "step": step, "loss": 1.0 / step})
    sink.write({"event": "eval", "step": 50, "psnr_db": 20.0})
    sink.close()
    stored = [(e.type, e.data.get("step")) for e in store.events_after(job.id)][1:]
    assert stored == [("train", 1), ("train", 50), ("eval", 50)]


def _wait_for_checkpoint(folder: Path, timeout: float = 120.0) -> None:
    checkpoints = folder / ".neuralbake" / "checkpoints"
    deadline = time.monotonic() + timeout
    while not (checkpoints.is_dir() and any(checkpoints.glob("*.pt"))):
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_a_worker_lost_mid_bake_is_resumed_by_the_next_from_its_checkpoint(settings: WorkerSettings, tiny_png: Path, how: str) -> None:
    store = Store(settings.db)
    job = store.create_job("texture", _texture_job(settings, tiny_png, 1500))
    process = multiprocessing.get_context("spawn").Process(target=_worker_process, args=(settings, "doomed"))
    process.start()
    _wait_for_checkpoint(job_folder(settings.data, job.id))
    os.kill(process.pid, signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
    process.join(timeout=60)
    if how == "sigterm":
        handed_back = store.get_job(job.id)
        assert handed_back is not None and handed_back.status == "queued" and handed_back.attempts == 0  # released at once
    else:
        time.sleep(settings.lease_seconds + 0.2)
        assert store.requeue_expired() == [job.id]
    run_worker(settings, "heir", max_jobs=1)
    final = store.get_job(job.id)
    assert final is not None and final.status == "succeeded", final
    out = job_folder(settings.data, job.id)
    report = json.loads((out / "report.json").read_text())
    assert report["resumed"] is True and report["steps"] == 1500
    assert verify_bake_folder(out) is not None


def _cancel_when(store: Store, job_id: str, seen: Callable[[list], bool], timeout: float = 120.0) -> threading.Thread:
    """A thread that requests the job's cancellation once its stored events satisfy ``seen``."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if seen(store.events_after(job_id)):
                store.request_cancel(job_id)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_job_cancelled_before_its_first_step_ends_cancelled(settings: WorkerSettings, tiny_png: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work that reaches no training step (here: loading an input that takes minutes) is interrupted
    where it stands; the worker runs the job in its main thread, as a worker process does."""
    import neuralbake.bakes.neural_texture as texture
    import neuralbake.service.worker as worker

    monkeypatch.setattr(worker, "CANCEL_GRACE_SECONDS", 0.5)
    monkeypatch.setattr(texture, "load_image", lambda *args, **kwargs: time.sleep(300))
    store = Store(settings.db)
    job = store.create_job("texture", _texture_job(settings, tiny_png, 10))
    watcher = _cancel_when(store, job.id, lambda events: any(e.type == "bake" for e in events))
    started = time.monotonic()
    run_worker(settings, "w1", max_jobs=1)
    watcher.join()
    final = store.get_job(job.id)
    assert final is not None and final.status == "cancelled", final
    assert time.monotonic() - started < 30
    assert [e.type for e in store.events_after(job.id)][-1] == "cancelled"
    os.kill(os.getpid(), signal.SIGUSR1)  # a late signal, after the job ended, does nothing
    time.sleep(0.05)


@pytest.mark.slow
def test_a_cancel_reaches_every_stage_of_a_lod_chain(settings: WorkerSettings) -> None:
    """A lod job cancelled while its simplify stage runs ends cancelled there: no fit stage starts."""
    arm = Path(__file__).resolve().parents[2] / "examples" / "arm"
    store = Store(settings.db)
    small = {"simplify": {"views": 4, "held_out_views": 2, "render_size": 48, "epochs": 200, "patience": 0}, "fit": {"views": 4, "render_size": 48, "epochs": 2}}
    job = store.create_job("lod", {"asset": uploaded(settings.data, arm / "arm.gltf", arm / "arm.bin"), "ratio": 0.3, "device": "cpu",
                                   "skin": False, "shadows": False, "stage_options": small})
    watcher = _cancel_when(store, job.id, lambda events: any(e.type == "stage" and e.data.get("stage") == "simplify" for e in events)
                           or any(e.type == "train" for e in events))
    run_worker(settings, "w1", max_jobs=1)
    watcher.join()
    final = store.get_job(job.id)
    events = store.events_after(job.id)
    assert final is not None and final.status == "cancelled", (final, [e.type for e in events][-10:])
    assert not any(e.type == "stage" and e.data.get("stage") == "fit" for e in events)


def test_an_internal_error_keeps_its_traceback_in_the_log_not_in_the_job(settings: WorkerSettings, tiny_png: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    import neuralbake.bakes.neural_texture as texture

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"can't allocate 4000000000000 bytes in {settings.data}")

    monkeypatch.setattr(texture, "load_image", broken)
    store = Store(settings.db)
    job = store.create_job("texture", _texture_job(settings, tiny_png, 10))
    with caplog.at_level("ERROR", logger="neuralbake.service.worker"):
        run_worker(settings, "w1", max_jobs=1)
    final = store.get_job(job.id)
    assert final is not None and final.status == "failed" and final.error.startswith("internal error: RuntimeError"), final
    assert str(settings.data) not in final.error and "allocate" not in final.error and "log" in final.error
    last = store.events_after(job.id)[-1]
    assert last.type == "failed" and "traceback" not in last.data and "Traceback" not in json.dumps(last.data)
    assert "Traceback" in caplog.text or any(record.exc_info for record in caplog.records)
