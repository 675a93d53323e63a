"""A real `neuralbake serve` on loopback for the service's end-to-end and browser tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from neuralbake.client import ServiceClient, ServiceError
from neuralbake.service.uploads import UploadStore


def uploaded(data: Path, *files: Path) -> str:
    """Store ``files`` as one upload in the service's data folder, as ``POST /api/uploads`` does;
    return the reference of the first (``<upload id>/<name>``), what a stored job config holds."""
    handles = [(f.name, open(f, "rb")) for f in files]  # noqa: SIM115 - closed below
    try:
        record = UploadStore(Path(data) / "uploads", max_bytes=2**30).add(handles)
    finally:
        for _, handle in handles:
            handle.close()
    return f"{record.id}/{files[0].name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, data: Path, workers: int = 1, extra: list[str] | None = None) -> None:
        self.data, self.port, self.workers = data, _free_port(), workers
        self.extra = list(extra or [])
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        made = subprocess.run([sys.executable, "-m", "neuralbake", "token", "create", "tests", "--data", str(data)], capture_output=True, text=True, check=True)
        self.token = made.stdout.strip().splitlines()[-1].strip()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "neuralbake", "serve", "--data", str(self.data), "--port", str(self.port), "--workers", str(self.workers), *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        client = ServiceClient(self.url, self.token)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.jobs()
                break
            except ServiceError:
                assert self.process.poll() is None, self.process.stdout.read().decode() if self.process.stdout else ""
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
