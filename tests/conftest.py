"""Shared fixtures: devices, tiny images, the shared asset folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


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
