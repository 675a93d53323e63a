"""Texture sets for the mipmap tests: bumpy normal maps and small PNG sets on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from neuralbake.bakes.mipmap import MipmapConfig


def bumpy_normals(size: int, seed: int = 0, amplitude: float = 0.6) -> np.ndarray:
    """Unit normals of a sum of sines with periods of a few texels, encoded 0.5 n + 0.5."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    height = np.zeros((size, size))
    for _ in range(6):
        fx, fy = rng.integers(1, size // 4, 2)
        height += np.sin(2 * np.pi * (fx * x + fy * y) / size + rng.uniform(0, 2 * np.pi))
    n = np.stack((-amplitude * np.gradient(height, axis=1), -amplitude * np.gradient(height, axis=0), np.ones_like(height)), -1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    return 0.5 * n + 0.5


def write_maps(folder: Path, size: int = 32, *, normal_size: int | None = None, grey_normal: bool = False) -> tuple[Path, Path]:
    """A base colour gradient and a bumpy normal map as PNGs in ``folder``; returns their paths."""
    y, x = np.mgrid[0:size, 0:size] / size
    colour = np.stack((0.6 + 0.3 * x, 0.5 + 0.2 * y, 0.4 + 0 * x), -1)
    base = folder / "base.png"
    Image.fromarray(np.round(colour * 255).astype(np.uint8)).save(base)
    normal = folder / "normal.png"
    encoded = bumpy_normals(normal_size or size)
    if grey_normal:
        Image.fromarray(np.round(encoded[..., 0] * 255).astype(np.uint8), mode="L").save(normal)
    else:
        Image.fromarray(np.round(encoded * 255).astype(np.uint8)).save(normal)
    return base, normal


def small_config(base: Path, normal: Path, **overrides) -> MipmapConfig:
    """A CPU config for tiny maps: 24 held-out directions, no evaluation during training."""
    config = MipmapConfig(base_color=str(base), normal=str(normal), device="cpu", held_out_directions=24)
    steps = overrides.pop("steps", 150)
    for key, value in overrides.items():
        setattr(config, key, value)
    config.train.steps = steps
    config.train.eval_every = 0
    return config


def write_metal_set(folder: Path, size: int = 16, seed: int = 0) -> tuple[Path, Path, Path]:
    """A can-like metal set: random base colour per texel (fine detail), a flat normal map and a metallic-roughness
    map with metallic 1 and a roughness drawn per texel in [0.1, 0.25]. With one roughness box filtering would be
    exact; mixed, a level's footprint holds narrow and wide lobes, where a chain fitted on average loses the peak."""
    rng = np.random.default_rng(seed)
    base = folder / "metal_base.png"
    Image.fromarray(rng.integers(40, 250, (size, size, 3)).astype(np.uint8)).save(base)
    normal = folder / "metal_normal.png"
    Image.fromarray(np.full((size, size, 3), (128, 128, 255), np.uint8)).save(normal)
    roughness = rng.uniform(0.1, 0.25, (size, size))
    mr = np.stack((np.zeros_like(roughness), roughness, np.ones_like(roughness)), -1)
    metal_roughness = folder / "metal_mr.png"
    Image.fromarray(np.round(mr * 255).astype(np.uint8)).save(metal_roughness)
    return base, normal, metal_roughness
