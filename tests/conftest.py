"""Shared fixtures: devices, tiny images, the shared asset folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

if not torch.cuda.is_available():
    # Without a GPU the fused Triton kernels run in Triton's interpreter (tests/kernels); it must be
    # chosen before the kernels are defined, so here, before any test module imports them.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _devices() -> list[str]:
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> torch.device:
    """Every test using this runs on the CPU, and on CUDA when a GPU is present."""
    return torch.device(request.param)


@pytest.fixture
def shared_dir() -> Path:
    """``../shared`` beside the project; tests using it skip when it is absent (users' machines)."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (team asset folder; not shipped with neuralbake)")
    return SHARED


def make_test_pattern(width: int = 24, height: int = 20, channels: int = 3, seed: int = 0) -> np.ndarray:
    """A smooth colourful pattern with some detail, float32 [H, W, C] in [0, 1]."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    u, v = x / width, y / height
    base = [0.5 + 0.4 * np.sin(2 * np.pi * (u + 0.3 * v)), 0.5 + 0.4 * np.cos(3 * np.pi * v), 0.5 + 0.4 * np.sin(np.pi * (u * v * 4))]
    base.append(np.clip(u + v, 0, 1))
    image = np.stack(base[:channels], axis=-1) + rng.normal(0, 0.02, (height, width, channels))
    return np.clip(image, 0, 1).astype(np.float32)


@pytest.fixture
def tiny_png(tmp_path: Path) -> Path:
    """A 24x20 RGB PNG."""
    path = tmp_path / "tiny.png"
    Image.fromarray((make_test_pattern() * 255).round().astype(np.uint8)).save(path)
    return path


def _kill_and_resume(argv: list[str], out: Path, *, timeout: float = 240.0, checkpoints: Path | None = None) -> dict:
    """Run ``neuralbake ARGV --out OUT`` in a subprocess, SIGKILL it once its first checkpoint is on
    disk, then run it again with ``--resume``; return the final report after checking the folder.

    The bake must checkpoint early and run long enough to be killed mid-way (e.g.
    ``--checkpoint-every 2`` and a few hundred tiny steps); a bake that finishes before the kill
    fails the test rather than passing it vacuously. ``checkpoints``: the folder whose first ``*.pt``
    triggers the kill (default: the bake's own ``OUT/.neuralbake/checkpoints``; a chained bake passes
    one of its stages' folders).
    """
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from neuralbake.io.manifest import verify_bake_folder

    command = [sys.executable, "-m", "neuralbake", *argv, "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    checkpoints = checkpoints or out / ".neuralbake" / "checkpoints"
    started = time.monotonic()
    try:
        while not (checkpoints.is_dir() and any(checkpoints.glob("*.pt"))):
            if process.poll() is not None:
                output = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"the bake ended (exit {process.returncode}) before its first checkpoint:\n{output}")
            if time.monotonic() - started > timeout:
                raise AssertionError("no checkpoint appeared in time")
            time.sleep(0.02)
        assert process.poll() is None, "the bake finished before it could be killed; make it longer"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not (out / "report.json").exists() or (out / "bake.json").exists()
    result = subprocess.run([*command, "--resume"], capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = verify_bake_folder(out)
    assert manifest is not None
    assert not (out / ".neuralbake" / "staging").exists()
    assert not list(out.rglob("*.partial"))
    report = json.loads((out / "report.json").read_text())
    assert report["resumed"] is True
    return report


@pytest.fixture
def kill_and_resume():
    """``kill_and_resume(argv, out) -> report``: a bake killed with SIGKILL mid-run, then resumed."""
    return _kill_and_resume
