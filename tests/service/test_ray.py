"""Workers as Ray tasks: a job runs on a local single-node Ray cluster, the same run path as local workers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from neuralbake.io.manifest import verify_bake_folder
from neuralbake.service.store import Store
from neuralbake.service.worker import WorkerSettings, job_folder, serve_workers_ray

from ._support import uploaded

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install ray); the service's --ray workers are untested here")


@pytest.mark.slow
def test_a_job_runs_as_a_ray_task(tmp_path: Path, tiny_png: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings = WorkerSettings(db=f"sqlite:///{data / 'service.db'}", data=data, lease_seconds=10, poll_seconds=0.1)
    store = Store(settings.db)
    store.migrate()
    job = store.create_job("texture", {"image": uploaded(data, tiny_png), "batch_size": 64, "device": "cpu", "network": {"hidden": 16, "layers": 2},
                                       "train": {"steps": 20, "precision": "fp32", "eval_every": 0}})
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    stop = threading.Event()
    supervisor = threading.Thread(target=serve_workers_ray, args=(settings, 1, stop))
    supervisor.start()
    try:
        deadline = time.monotonic() + 180
        while (current := store.get_job(job.id)) is not None and current.status not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, "the Ray worker did not finish the job"
            time.sleep(0.2)
        assert current is not None and current.status == "succeeded", current
        assert current.worker is not None and current.worker.startswith("ray:")
        assert verify_bake_folder(job_folder(data, job.id)) is not None
    finally:
        stop.set()
        supervisor.join(timeout=60)
        ray.shutdown()
