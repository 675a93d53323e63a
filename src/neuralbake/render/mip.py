"""Mip-mapped texture sampling for deferred shading: a box-filtered mip pyramid, bilinear taps
with glTF's per-axis addressing, and trilinear filtering between the two mip levels chosen
from the uv footprint of a pixel. Everything is differentiable in the texels (through the
pyramid) and in uv and its derivatives.

Written here rather than calling :func:`neuralbake.material.texture.sample_texture` because glTF
samplers address u and v separately (``wrapS``/``wrapT``), which that function's single mode
cannot express; for equal modes the two agree (tested). The texel convention is the same: texture
``[H, W, C]`` with row 0 the top, texel ``(i, j)`` centred at ``((j + 0.5) / W, (i + 0.5) / H)``.

Level of detail is OpenGL's isotropic rule, ``lod = log2(max(|d(uv * size)/dx|, |d(uv * size)/dy|))``
measured on level 0, clamped to the pyramid; a non-square texture halves each side separately
(never below 1), so its levels are box filtered with ``area`` interpolation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from neuralbake.errors import InputError

__all__ = ["WRAP_MODES", "build_mip_pyramid", "mip_level", "sample_bilinear", "sample_trilinear"]

WRAP_MODES = ("repeat", "clamp", "mirror")
"""Texture addressing per axis (glTF REPEAT, CLAMP_TO_EDGE, MIRRORED_REPEAT)."""


def _check_texture(texture: torch.Tensor) -> None:
    if not isinstance(texture, torch.Tensor) or texture.dim() != 3 or not texture.is_floating_point():
        shape = tuple(texture.shape) if isinstance(texture, torch.Tensor) else type(texture).__name__
        raise InputError(f"a texture must be a float tensor [H, W, C], got {shape}.", field="texture", fix="pass [H, W, C] texels.")


def build_mip_pyramid(texture: torch.Tensor) -> list[torch.Tensor]:
    """Levels ``[H, W, C], [H/2, W/2, C], ..., [1, 1, C]`` (sides rounded down, at least 1), each the
    2x2 (area) average of the one above; differentiable in ``texture``."""
    _check_texture(texture)
    levels = [texture]
    x = texture.permute(2, 0, 1)[None]
    while x.shape[-2] > 1 or x.shape[-1] > 1:
        h, w = max(x.shape[-2] // 2, 1), max(x.shape[-1] // 2, 1)
        x = F.avg_pool2d(x, 2) if (x.shape[-2] == 2 * h and x.shape[-1] == 2 * w) else F.interpolate(x, size=(h, w), mode="area")
        levels.append(x[0].permute(1, 2, 0))
    return levels


def _wrap(i: torch.Tensor, n: int, mode: str) -> torch.Tensor:
    if mode == "repeat":
        return torch.remainder(i, n)
    if mode == "clamp":
        return torch.clamp(i, 0, n - 1)
    m = torch.remainder(i, 2 * n)
    return torch.where(m < n, m, 2 * n - 1 - m)


def _check_wrap(wrap_s: str, wrap_t: str) -> None:
    for name, mode in (("wrap_s", wrap_s), ("wrap_t", wrap_t)):
        if mode not in WRAP_MODES:
            raise InputError(f"unknown wrap mode {mode!r}.", field=name, fix=f"use one of {', '.join(WRAP_MODES)}.")


def sample_bilinear(texture: torch.Tensor, uv: torch.Tensor, *, wrap_s: str = "repeat", wrap_t: str = "repeat") -> torch.Tensor:
    """Bilinear texels ``[N, C]`` of ``texture`` ``[H, W, C]`` at ``uv`` ``[N, 2]`` with per-axis wrapping."""
    _check_texture(texture)
    _check_wrap(wrap_s, wrap_t)
    h, w, c = texture.shape
    uv = uv.to(texture.dtype)
    x = uv[:, 0] * w - 0.5
    y = uv[:, 1] * h - 0.5
    x0, y0 = torch.floor(x.detach()), torch.floor(y.detach())
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    x0, y0 = x0.long(), y0.long()
    xa, xb = _wrap(x0, w, wrap_s), _wrap(x0 + 1, w, wrap_s)
    ya, yb = _wrap(y0, h, wrap_t) * w, _wrap(y0 + 1, h, wrap_t) * w
    flat = texture.reshape(h * w, c)
    top = torch.lerp(flat[ya + xa], flat[ya + xb], fx)
    bottom = torch.lerp(flat[yb + xa], flat[yb + xb], fx)
    return torch.lerp(top, bottom, fy)


def mip_level(uv_dx: torch.Tensor, uv_dy: torch.Tensor, height: int, width: int, levels: int) -> torch.Tensor:
    """Continuous level of detail ``[N]`` in ``[0, levels - 1]`` from uv derivatives ``[N, 2]`` per pixel."""
    size = torch.tensor([width, height], dtype=uv_dx.dtype, device=uv_dx.device)
    tiny = torch.finfo(uv_dx.dtype).tiny
    rho2 = torch.maximum(((uv_dx * size) ** 2).sum(-1), ((uv_dy * size) ** 2).sum(-1))
    lod = 0.5 * torch.log2(torch.clamp(torch.nan_to_num(rho2, nan=0.0, posinf=1e30), min=tiny))
    return torch.clamp(lod, 0.0, float(levels - 1))


def sample_trilinear(
    pyramid: list[torch.Tensor],
    uv: torch.Tensor,
    uv_dx: torch.Tensor | None = None,
    uv_dy: torch.Tensor | None = None,
    *,
    wrap_s: str = "repeat",
    wrap_t: str = "repeat",
) -> torch.Tensor:
    """Trilinearly filtered texels ``[N, C]`` at ``uv`` ``[N, 2]``.

    ``pyramid``: from :func:`build_mip_pyramid`; ``uv_dx``, ``uv_dy``: ``[N, 2]`` change of uv to
    the next pixel right and down (``None``: level 0, plain bilinear). Each sample blends the two
    levels around its :func:`mip_level`. Differentiable in the pyramid, ``uv`` and the derivatives.
    """
    if not pyramid:
        raise InputError("the mip pyramid is empty.", field="pyramid", fix="build it with build_mip_pyramid(texture).")
    if uv.dim() != 2 or uv.shape[1] != 2:
        raise InputError(f"uv must have shape [N, 2], got {tuple(uv.shape)}.", field="uv", fix="pass one (u, v) per row.")
    base = pyramid[0]
    if uv_dx is None or uv_dy is None or len(pyramid) == 1:
        return sample_bilinear(base, uv, wrap_s=wrap_s, wrap_t=wrap_t)
    lod = mip_level(uv_dx.to(base.dtype), uv_dy.to(base.dtype), base.shape[0], base.shape[1], len(pyramid))
    lo = torch.floor(lod.detach()).long()
    frac = (lod - lo.to(lod.dtype))[:, None]
    hi = torch.clamp(lo + 1, max=len(pyramid) - 1)
    out = torch.zeros(uv.shape[0], base.shape[2], dtype=base.dtype, device=base.device)
    for level in range(len(pyramid)):
        w = torch.where((lo == level)[:, None], 1.0 - frac, torch.zeros_like(frac)) + torch.where(
            (hi == level)[:, None], frac, torch.zeros_like(frac)
        )
        rows = torch.nonzero((lo == level) | (hi == level)).reshape(-1)
        if rows.numel() == 0:
            continue
        taps = sample_bilinear(pyramid[level], uv[rows], wrap_s=wrap_s, wrap_t=wrap_t)
        out = out.index_add(0, rows, taps * w[rows])
    return out
