"""Benchmark: the asset service's throughput and per-job overhead against running the bake directly.

The same tiny texture bake (``examples/neural_texture/grace_hopper_256.png``, ``--steps`` steps,
fp32 on the CPU) is run ``--jobs`` times directly through ``Bake.run``, then submitted ``--jobs``
times to a real ``neuralbake serve`` on loopback with ``--workers`` worker processes and waited
for through the Python client. Prints, as JSON: seconds per bake run directly, jobs per minute
through the service, and the service's overhead per job (upload excluded; queueing, claiming,
event storage, the worker's process and the download check included) measured as
``workers * service wall time / jobs - direct seconds per bake``.

    python bench/service.py                       # 20 jobs, 2 workers, 200 steps
    python bench/service.py --jobs 50 --workers 1 --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from neuralbake.bakes.neural_texture import NEURAL_TEXTURE, NeuralTextureConfig
from neuralbake.client import ServiceClient, ServiceError
from neuralbake.service.app import hash_token
from neuralbake.service.store import Store
from timing import Stopwatch

IMAGE = Path(__file__).resolve().parents[1] / "examples" / "neural_texture" / "grace_hopper_256.png"


def _config(steps: int) -> dict:
    return {"device": "cpu", "train": {"steps": steps, "precision": "fp32", "eval_every": 0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nb-bench-service-"))

    direct_watch = Stopwatch().start()
    for i in range(args.jobs):
        config = NeuralTextureConfig(image=str(IMAGE), device="cpu")
        config.train.steps, config.train.precision, config.train.eval_every = args.steps, "fp32", 0
        NEURAL_TEXTURE.run(config, root / "direct" / str(i), progress=False)
    direct = direct_watch.stop() / args.jobs

    data = root / "data"
    data.mkdir()
    store = Store(f"sqlite:///{(data / 'service.db').resolve()}")
    store.migrate()
    token = secrets.token_urlsafe(32)
    store.add_token("bench", hash_token(token))
    store.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "neuralbake", "serve", "--data", str(data), "--port", str(port), "--workers", str(args.workers)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = ServiceClient(f"http://127.0.0.1:{port}", token)
        while True:
            try:
                client.jobs()
                break
            except ServiceError:
                time.sleep(0.2)
        upload = client.upload([IMAGE])
        time.sleep(3.0)  # let the workers import torch and the bakes before the clock starts
        service_watch = Stopwatch().start()
        ids = [client.submit("texture", _config(args.steps), {"image": f"{upload['id']}/{IMAGE.name}"})["id"] for _ in range(args.jobs)]
        statuses = [client.wait(job_id)["status"] for job_id in ids]
        wall = service_watch.stop()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    print(json.dumps({
        "jobs": args.jobs, "workers": args.workers, "steps": args.steps, "cpu_count": os.cpu_count(),
        "succeeded": statuses.count("succeeded"),
        "direct_seconds_per_bake": round(direct, 3),
        "service_wall_seconds": round(wall, 2),
        "service_jobs_per_minute": round(args.jobs / wall * 60, 1),
        "direct_bakes_per_minute_one_process": round(60 / direct, 1),
        "overhead_seconds_per_job": round(args.workers * wall / args.jobs - direct, 3),
    }, indent=2))


if __name__ == "__main__":
    main()
