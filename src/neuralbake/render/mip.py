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

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from neuralbake.errors import InputError
from neuralbake.material.texture import WRAP_MODES, wrap_texel_index

__all__ = ["PackedPyramid", "box_downsample", "build_mip_pyramid", "is_power_of_two", "mip_level", "pack_pyramid", "sample_bilinear", "sample_trilinear"]


def _check_texture(texture: torch.Tensor) -> None:
    if not isinstance(texture, torch.Tensor) or texture.dim() != 3 or not texture.is_floating_point():
        shape = tuple(texture.shape) if isinstance(texture, torch.Tensor) else type(texture).__name__
        raise InputError(f"a texture must be a float tensor [H, W, C], got {shape}.", field="texture", fix="pass [H, W, C] texels.")


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is an ``int`` (not a bool) of the form ``2^k``, ``k >= 0`` (1 counts)."""
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and (n & (n - 1)) == 0


def box_downsample(texture: torch.Tensor, factor: int = 2) -> torch.Tensor:
    """Box average of ``texture`` over ``factor x factor`` footprints.

    Parameters
    ----------
    texture : torch.Tensor
        Float ``[H, W, C]`` or batched ``[..., H, W, C]`` (channels last), ``H`` and ``W``
        multiples of ``factor``.
    factor : int
        Footprint side; 1 returns ``texture`` itself.

    Returns
    -------
    torch.Tensor
        ``[..., H / factor, W / factor, C]``, same dtype; differentiable in ``texture``.
    """
    if factor == 1:
        return texture
    lead = texture.shape[:-3]
    x = texture.reshape(-1, *texture.shape[-3:]).permute(0, 3, 1, 2)
    x = F.avg_pool2d(x, factor).permute(0, 2, 3, 1)
    return x.reshape(*lead, *x.shape[1:])


def build_mip_pyramid(
    texture: torch.Tensor,
    *,
    levels: int | None = None,
    odd: str = "floor",
    compute_dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """The box-filtered mip chain of ``texture``: each level the 2x2 average of the one above.

    Parameters
    ----------
    texture : torch.Tensor
        Float ``[H, W, C]`` or batched ``[..., H, W, C]`` (channels last); level 0, returned as is.
    levels : int, optional
        Most levels to return, level 0 included; ``None``: down to ``1 x 1``.
    odd : str
        Side rounding for odd sizes. ``"floor"`` (OpenGL's rule): ``max(side // 2, 1)``, an odd
        level resampled with ``area`` interpolation. ``"ceil"``: ``ceil(side / 2)``, the last row
        or column averaged on its own (2x2 pooling with ``ceil_mode``). Power-of-two sides give
        the same chain either way; a side of 1 stays 1 (2x1 averages).
    compute_dtype : torch.dtype, optional
        Average in this dtype (e.g. ``torch.float64``) and round each level back to
        ``texture``'s dtype before the next; ``None``: in ``texture``'s dtype.

    Returns
    -------
    list of torch.Tensor
        ``[H, W, C], [H/2, W/2, C], ...``, same dtype and device; differentiable in ``texture``.
    """
    if not isinstance(texture, torch.Tensor) or texture.dim() < 3 or not texture.is_floating_point():
        _check_texture(texture)
    if odd not in ("floor", "ceil"):
        raise InputError(f"unknown odd-size rule {odd!r}.", field="odd", fix="use 'floor' or 'ceil'.")
    lead = texture.shape[:-3]
    chain = [texture]
    x = texture.reshape(-1, *texture.shape[-3:]).permute(0, 3, 1, 2)
    while (x.shape[-2] > 1 or x.shape[-1] > 1) and (levels is None or len(chain) < levels):
        h, w = x.shape[-2:]
        kernel = (min(2, h), min(2, w))
        y = x if compute_dtype is None else x.to(compute_dtype)
        if odd == "ceil":
            y = F.avg_pool2d(y, kernel, ceil_mode=True)
        elif h % kernel[0] == 0 and w % kernel[1] == 0:
            y = F.avg_pool2d(y, kernel)
        else:
            y = F.interpolate(y, size=(max(h // 2, 1), max(w // 2, 1)), mode="area")
        x = y if compute_dtype is None else y.to(texture.dtype)
        level = x.permute(0, 2, 3, 1)
        chain.append(level.reshape(*lead, *level.shape[1:]))
    return chain


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
    xa, xb = wrap_texel_index(x0, w, wrap_s), wrap_texel_index(x0 + 1, w, wrap_s)
    ya, yb = wrap_texel_index(y0, h, wrap_t) * w, wrap_texel_index(y0 + 1, h, wrap_t) * w
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


@dataclass(frozen=True, eq=False)
class PackedPyramid:
    """A mip pyramid as one texel table, so that a trilinear lookup is a fixed handful of tensor operations
    whatever the number of levels (no loop over levels, no host synchronisation): GPU steps that sample
    textures many times (shape fits, references) are bound by how many kernels they launch."""

    texels: torch.Tensor
    """``[T, C]``: every level's texels, row-major, level 0 first."""
    offsets: torch.Tensor
    """int64 ``[L]``: each level's first row in :attr:`texels`."""
    widths: torch.Tensor
    """int64 ``[L]``."""
    heights: torch.Tensor
    """int64 ``[L]``."""
    height: int
    """Level 0's height."""
    width: int
    """Level 0's width."""

    @property
    def levels(self) -> int:
        return int(self.offsets.shape[0])

    @property
    def channels(self) -> int:
        return int(self.texels.shape[1])


@functools.lru_cache(maxsize=256)
def _level_tables(sizes: tuple[tuple[int, int], ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Offsets, widths and heights of levels of ``(height, width)`` ``sizes`` as int64 tensors on ``device``
    (cached: made once per pyramid shape, not copied to the device every lookup)."""
    counts = [h * w for h, w in sizes]
    offsets = [sum(counts[:k]) for k in range(len(counts))]
    table = torch.tensor([offsets, [w for _, w in sizes], [h for h, _ in sizes]], dtype=torch.int64, device=device)
    return table[0], table[1], table[2]


def pack_pyramid(pyramid: list[torch.Tensor]) -> PackedPyramid:
    """``pyramid`` (from :func:`build_mip_pyramid`, ``[H, W, C]`` levels) as a :class:`PackedPyramid`;
    differentiable in the levels."""
    if not pyramid:
        raise InputError("the mip pyramid is empty.", field="pyramid", fix="build it with build_mip_pyramid(texture).")
    for level in pyramid:
        _check_texture(level)
    channels = pyramid[0].shape[2]
    flat = [level.reshape(-1, channels) for level in pyramid]
    sizes = tuple((int(level.shape[0]), int(level.shape[1])) for level in pyramid)
    offsets, widths, heights = _level_tables(sizes, pyramid[0].device)
    texels = flat[0] if len(flat) == 1 else torch.cat(flat)
    return PackedPyramid(texels=texels, offsets=offsets, widths=widths, heights=heights, height=sizes[0][0], width=sizes[0][1])


def sample_trilinear(
    pyramid: list[torch.Tensor] | PackedPyramid,
    uv: torch.Tensor,
    uv_dx: torch.Tensor | None = None,
    uv_dy: torch.Tensor | None = None,
    *,
    wrap_s: str = "repeat",
    wrap_t: str = "repeat",
) -> torch.Tensor:
    """Trilinearly filtered texels ``[N, C]`` at ``uv`` ``[N, 2]``.

    ``pyramid``: from :func:`build_mip_pyramid`, or packed (:func:`pack_pyramid`, to pack a fixed
    texture once); ``uv_dx``, ``uv_dy``: ``[N, 2]`` change of uv to the next pixel right and down
    (``None``: level 0, plain bilinear). Each sample blends the two levels around its
    :func:`mip_level`: the four taps of both levels are gathered from the packed texels at once.
    Differentiable in the pyramid, ``uv`` and the derivatives.
    """
    if uv.dim() != 2 or uv.shape[1] != 2:
        raise InputError(f"uv must have shape [N, 2], got {tuple(uv.shape)}.", field="uv", fix="pass one (u, v) per row.")
    _check_wrap(wrap_s, wrap_t)
    packed = pyramid if isinstance(pyramid, PackedPyramid) else pack_pyramid(pyramid)
    texels = packed.texels
    n, levels = uv.shape[0], packed.levels
    if uv_dx is None or uv_dy is None or levels == 1:
        base = texels[: packed.height * packed.width].reshape(packed.height, packed.width, packed.channels)
        return sample_bilinear(base, uv, wrap_s=wrap_s, wrap_t=wrap_t)
    dtype = texels.dtype
    lod = mip_level(uv_dx.to(dtype), uv_dy.to(dtype), packed.height, packed.width, levels)
    lo = torch.floor(lod.detach()).long()
    frac = lod - lo.to(dtype)
    level = torch.stack((lo, torch.clamp(lo + 1, max=levels - 1)), 1)  # [N, 2]: the two levels blended
    w, h = packed.widths[level], packed.heights[level]
    uv = uv.to(dtype)
    x = uv[:, None, 0] * w.to(dtype) - 0.5
    y = uv[:, None, 1] * h.to(dtype) - 0.5
    x0, y0 = torch.floor(x.detach()), torch.floor(y.detach())
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    x0, y0 = x0.long(), y0.long()
    xa, xb = wrap_texel_index(x0, w, wrap_s), wrap_texel_index(x0 + 1, w, wrap_s)
    ya, yb = wrap_texel_index(y0, h, wrap_t) * w, wrap_texel_index(y0 + 1, h, wrap_t) * w
    index = torch.stack((ya + xa, ya + xb, yb + xa, yb + xb), -1) + packed.offsets[level][..., None]  # [N, 2, 4]
    taps = texels.index_select(0, index.reshape(-1)).reshape(n, 2, 4, packed.channels)
    top = torch.lerp(taps[:, :, 0], taps[:, :, 1], fx)
    bottom = torch.lerp(taps[:, :, 2], taps[:, :, 3], fx)
    both = torch.lerp(top, bottom, fy)  # [N, 2, C]
    return torch.lerp(both[:, 0], both[:, 1], frac[:, None])
