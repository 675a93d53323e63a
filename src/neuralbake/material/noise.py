"""Procedural noise for material masks (patina in the recesses, scratches, dust breakup): value,
Perlin gradient and Worley cellular noise, and fBm sums of them, batched and deterministic.

PyTorch has no noise nodes, and ``torch.rand`` cannot be indexed by a lattice point, so lattice
randomness comes from an integer hash written here: the same seed and point give the same value on
every device and dtype (it is integer arithmetic on ``int64``, with every product kept below
``2^63``). Points are ``[N, 2]`` (uv) or ``[N, 3]`` (position) float tensors; the outputs are
``[N]`` and differentiable in the points (and in fBm's gain) wherever the noise is smooth. The
frequency is set by scaling the points (``value_noise(8 * uv)``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch

from neuralbake.errors import InputError

__all__ = ["fbm", "hash32", "hash_uniform", "perlin_noise", "value_noise", "worley_noise"]

_MASK32 = 0xFFFFFFFF
# Multipliers of the two-round "lowbias32" integer hash found by Chris Wellons' hash-prospector
# (https://github.com/skeeto/hash-prospector, a public-domain search result, used as constants).
_M1 = 0x7FEB352D
_M2 = 0x846CA68B


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # (x * c) mod 2^32 for x < 2^32 without int64 overflow: split c into 16-bit halves.
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & _MASK32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """Integer hash of the low 32 bits of ``x`` (int64, any shape) to ``[0, 2^32)``, same shape."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mul32(x, _M1)
    x = x ^ (x >> 15)
    x = _mul32(x, _M2)
    return x ^ (x >> 16)


def _hash_cells(cells: torch.Tensor, seed: int, salt: int = 0) -> torch.Tensor:
    # Chain the coordinates through the hash so that (1, 2) and (2, 1) differ.
    h = hash32(torch.full_like(cells[:, 0], (seed * 0x9E3779B9 + salt) & _MASK32))
    for d in range(cells.shape[1]):
        h = hash32(h ^ (cells[:, d] & _MASK32))
    return h


def hash_uniform(cells: torch.Tensor, *, seed: int = 0, salt: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A uniform number in ``[0, 1)`` per integer lattice point: ``cells`` ``[N, D]`` int64 -> ``[N]``.

    ``salt`` draws an independent number for the same point (e.g. the second coordinate of a
    gradient).
    """
    return (_hash_cells(cells, seed, salt) >> 8).to(dtype) * (1.0 / (1 << 24))


def _check_points(p: torch.Tensor) -> torch.Tensor:
    if not isinstance(p, torch.Tensor) or p.dim() != 2 or p.shape[1] not in (2, 3) or not p.is_floating_point():
        shape = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
        raise InputError(
            f"noise points must be a float tensor of shape [N, 2] or [N, 3], got {shape}.",
            field="p",
            fix="pass uv [N, 2] or positions [N, 3].",
        )
    return p


def _quintic(t: torch.Tensor) -> torch.Tensor:
    # Perlin's 6t^5 - 15t^4 + 10t^3: C2 across cell borders, so the noise has continuous normals.
    return t * t * t * (t * (t * 6.0 - 15.0) + 10.0)


def _corners(dim: int) -> list[tuple[int, ...]]:
    return list(itertools.product((0, 1), repeat=dim))


def value_noise(p: torch.Tensor, *, seed: int = 0) -> torch.Tensor:
    """Value noise in ``[0, 1]``: random lattice values, quintic interpolation, ``[N]``.

    ``p``: ``[N, 2]`` or ``[N, 3]``; one lattice cell per unit.
    """
    p = _check_points(p)
    cell = torch.floor(p.detach())
    f = p - cell
    w = _quintic(f)
    base = cell.long()
    out = torch.zeros_like(p[:, 0])
    for corner in _corners(p.shape[1]):
        offset = torch.tensor(corner, dtype=torch.long, device=p.device)
        weight = torch.ones_like(out)
        for d, c in enumerate(corner):
            weight = weight * (w[:, d] if c else 1.0 - w[:, d])
        out = out + weight * hash_uniform(base + offset, seed=seed, dtype=p.dtype)
    return out


def _gradients(cells: torch.Tensor, seed: int, dtype: torch.dtype) -> torch.Tensor:
    # Unit gradients uniform over the circle (2D) or sphere (3D).
    r1 = hash_uniform(cells, seed=seed, salt=1, dtype=dtype)
    phi = (2.0 * math.pi) * hash_uniform(cells, seed=seed, salt=2, dtype=dtype)
    if cells.shape[1] == 2:
        return torch.stack((torch.cos(phi), torch.sin(phi)), dim=-1)
    z = 2.0 * r1 - 1.0
    r = torch.sqrt(torch.clamp(1.0 - z * z, min=0.0))
    return torch.stack((r * torch.cos(phi), r * torch.sin(phi), z), dim=-1)


def perlin_noise(p: torch.Tensor, *, seed: int = 0) -> torch.Tensor:
    """Perlin gradient noise in ``[-1, 1]``, zero at lattice points, ``[N]``.

    Random unit gradients at the lattice points, quintic fade. With unit gradients the raw noise
    is bounded by ``sqrt(D) / 2`` (D = 2 or 3), so it is scaled by ``2 / sqrt(D)`` into ``[-1, 1]``.
    """
    p = _check_points(p)
    dim = p.shape[1]
    cell = torch.floor(p.detach())
    f = p - cell
    w = _quintic(f)
    base = cell.long()
    out = torch.zeros_like(p[:, 0])
    for corner in _corners(dim):
        offset = torch.tensor(corner, dtype=torch.long, device=p.device)
        delta = f - offset.to(p.dtype)
        weight = torch.ones_like(out)
        for d, c in enumerate(corner):
            weight = weight * (w[:, d] if c else 1.0 - w[:, d])
        out = out + weight * (_gradients(base + offset, seed, p.dtype) * delta).sum(dim=-1)
    return out * (2.0 / math.sqrt(dim))


def worley_noise(p: torch.Tensor, *, seed: int = 0, jitter: float = 1.0) -> torch.Tensor:
    """Worley (cellular) noise: distance ``F1`` to the nearest feature point, ``[N]``.

    One feature point per unit cell at ``cell + 0.5 + jitter (r - 0.5)`` with ``r`` uniform per
    coordinate; ``jitter`` in ``[0, 1]`` (0 is a regular grid). With ``jitter <= 1`` the nearest
    point always lies in the 3^D neighbourhood searched, and ``F1 <= sqrt(D)``.
    """
    p = _check_points(p)
    if not 0.0 <= jitter <= 1.0:
        raise InputError(f"jitter must be in [0, 1], got {jitter}.", field="jitter", fix="pass a value between 0 and 1.")
    dim = p.shape[1]
    cell = torch.floor(p.detach())
    base = cell.long()
    best = torch.full_like(p[:, 0], float("inf"))
    for offset in itertools.product((-1, 0, 1), repeat=dim):
        neighbour = base + torch.tensor(offset, dtype=torch.long, device=p.device)
        r = torch.stack([hash_uniform(neighbour, seed=seed, salt=10 + d, dtype=p.dtype) for d in range(dim)], dim=-1)
        feature = neighbour.to(p.dtype) + 0.5 + jitter * (r - 0.5)
        dist2 = ((p - feature) ** 2).sum(dim=-1)
        best = torch.minimum(best, dist2)
    # sqrt of a clamped square: a finite gradient even on a feature point.
    return torch.sqrt(torch.clamp(best, min=torch.finfo(p.dtype).tiny))


def fbm(
    p: torch.Tensor,
    *,
    octaves: int = 5,
    lacunarity: float = 2.0,
    gain: float | torch.Tensor = 0.5,
    seed: int = 0,
    noise: Callable[..., torch.Tensor] = perlin_noise,
) -> torch.Tensor:
    """Fractal Brownian motion: ``sum_k gain^k noise(lacunarity^k p) / sum_k gain^k``, ``[N]``.

    Normalised by the sum of the amplitudes, so the result has the range of ``noise`` (``[-1, 1]``
    for Perlin, ``[0, 1]`` for value noise). Each octave uses its own seed (``seed + k``) so the
    octaves do not line up at the origin. ``gain`` may be a tensor (a scalar, or ``[N]``) and gets
    gradients.
    """
    p = _check_points(p)
    if octaves < 1:
        raise InputError(f"fbm needs at least one octave, got {octaves}.", field="octaves", fix="pass octaves >= 1.")
    total = torch.zeros_like(p[:, 0])
    norm = torch.zeros_like(p[:, 0])
    amplitude: float | torch.Tensor = 1.0
    frequency = 1.0
    for k in range(octaves):
        total = total + amplitude * noise(p * frequency, seed=seed + k)
        norm = norm + amplitude
        amplitude = amplitude * gain
        frequency *= lacunarity
    return total / norm
