"""Image textures for material graphs: bilinear sampling with wrap modes, the sRGB transfer
function, loading from files, and tangent-space normals from normal maps and from heights.

Textures are float tensors ``[H, W, C]`` (row 0 is the top of the image, as stored in the file)
sampled at uv ``[N, 2]``: ``u`` runs along the width, ``v`` down the rows, and texel ``(i, j)`` has
its centre at ``((j + 0.5) / W, (i + 0.5) / H)`` (the OpenGL / glTF convention, origin top left).
Sampling is differentiable in the texels and in uv. Normals are in the tangent frame the lobes
use: ``+x`` along ``u``, ``+y`` along ``v``, ``+z`` the surface normal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from neuralbake.errors import ConfigError, InputError
from neuralbake.io.images import load_image
from neuralbake.io.limits import MAX_IMAGE_PIXELS
from neuralbake.material.frame import normalize

__all__ = [
    "WRAP_MODES",
    "decode_normal_map",
    "height_to_normal",
    "linear_to_srgb",
    "load_texture",
    "sample_texture",
    "srgb_to_linear",
    "wrap_texel_index",
]

WRAP_MODES = ("repeat", "clamp", "mirror")
"""Addressing outside ``[0, 1]``: tile, repeat the edge texel, or tile mirrored (period 2)."""


def srgb_to_linear(c: torch.Tensor) -> torch.Tensor:
    """The exact piecewise sRGB decode (IEC 61966-2-1 EOTF), elementwise, same shape.

    ``c / 12.92`` up to 0.04045, ``((c + 0.055) / 1.055)^2.4`` above.
    """
    high = ((torch.clamp(c, min=0.04045) + 0.055) / 1.055) ** 2.4
    return torch.where(c <= 0.04045, c / 12.92, high)


def linear_to_srgb(c: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`srgb_to_linear`: ``12.92 c`` up to 0.0031308, ``1.055 c^(1/2.4) - 0.055`` above."""
    high = 1.055 * torch.clamp(c, min=0.0031308) ** (1.0 / 2.4) - 0.055
    return torch.where(c <= 0.0031308, 12.92 * c, high)


def wrap_texel_index(i: torch.Tensor, n: int | torch.Tensor, mode: str) -> torch.Tensor:
    """Integer texel indices ``i`` (any shape) wrapped into ``[0, n)``: ``repeat``, ``clamp`` (to the
    edge) or ``mirror`` (mirrored repeat, ``..., 1, 0, 0, 1, ..., n-1, n-1, n-2, ...``); same shape and dtype.
    ``n``: one size, or an integer tensor of sizes broadcast against ``i`` (one per row of a mip pyramid's levels)."""
    if mode == "repeat":
        return torch.remainder(i, n)
    if mode == "clamp":
        if isinstance(n, torch.Tensor):
            return torch.minimum(torch.clamp(i, min=0), n - 1)
        return torch.clamp(i, 0, n - 1)
    m = torch.remainder(i, 2 * n)
    return torch.where(m < n, m, 2 * n - 1 - m)


def _check_texture(texture: torch.Tensor) -> torch.Tensor:
    if not isinstance(texture, torch.Tensor) or texture.dim() != 3 or not texture.is_floating_point():
        shape = tuple(texture.shape) if isinstance(texture, torch.Tensor) else type(texture).__name__
        raise InputError(
            f"a texture must be a float tensor [H, W, C], got {shape}.", field="texture", fix="pass an [H, W, C] float tensor."
        )
    return texture


def sample_texture(texture: torch.Tensor, uv: torch.Tensor, *, wrap: str = "repeat") -> torch.Tensor:
    """Bilinearly filtered texture values at ``uv``.

    Parameters
    ----------
    texture:
        ``[H, W, C]`` float32/float64 texels (gradients flow to them).
    uv:
        ``[N, 2]`` coordinates, any range (gradients flow to them, piecewise linear).
    wrap:
        One of :data:`WRAP_MODES`, applied to the texel indices of the four taps.

    Returns
    -------
    ``[N, C]`` in the texture's dtype: exactly a texel at its centre, linear between centres.
    """
    texture = _check_texture(texture)
    if wrap not in WRAP_MODES:
        raise ConfigError(f"unknown wrap mode {wrap!r}.", field="wrap", fix=f"use one of {', '.join(WRAP_MODES)}.")
    if not isinstance(uv, torch.Tensor) or uv.dim() != 2 or uv.shape[1] != 2:
        shape = tuple(uv.shape) if isinstance(uv, torch.Tensor) else type(uv).__name__
        raise InputError(f"uv must have shape [N, 2], got {shape}.", field="uv", fix="pass one (u, v) per row.")
    h, w, c = texture.shape
    # Coordinates and weights in fp32 at least: in fp16, u x 1024 keeps half a texel of precision.
    compute = torch.promote_types(texture.dtype, torch.float32)
    uv = uv.to(compute)
    x = uv[:, 0] * w - 0.5
    y = uv[:, 1] * h - 0.5
    x0, y0 = torch.floor(x.detach()), torch.floor(y.detach())
    tx, ty = (x - x0)[:, None], (y - y0)[:, None]
    x0, y0 = x0.long(), y0.long()
    xs = (wrap_texel_index(x0, w, wrap), wrap_texel_index(x0 + 1, w, wrap))
    ys = (wrap_texel_index(y0, h, wrap), wrap_texel_index(y0 + 1, h, wrap))
    flat = texture.reshape(h * w, c)

    def tap(yi: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
        return flat[yi * w + xi].to(compute)

    top = tap(ys[0], xs[0]) * (1.0 - tx) + tap(ys[0], xs[1]) * tx
    bottom = tap(ys[1], xs[0]) * (1.0 - tx) + tap(ys[1], xs[1]) * tx
    return (top * (1.0 - ty) + bottom * ty).to(texture.dtype)


def load_texture(
    path: str | Path,
    *,
    srgb: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> torch.Tensor:
    """Read an image file as a texture ``[H, W, C]`` (see :func:`neuralbake.io.images.load_image`).

    ``srgb=True`` decodes the colour channels with :func:`srgb_to_linear` (use it for base
    colours); alpha (the last channel of a 2- or 4-channel image) is always linear. Pass
    ``srgb=False`` for data textures: normal, height, roughness and mask maps. A missing,
    unreadable or damaged file, or one over ``max_pixels`` (checked before decoding), raises the
    loader's :class:`~neuralbake.errors.InputError`.

    ``path`` is opened as given: callers that take it from a document resolve it first with
    :func:`neuralbake.io.refs.resolve_reference` (the material compilers do).
    """
    array, info = load_image(path, max_pixels=max_pixels)
    texture = torch.from_numpy(array).to(dtype=dtype, device=device)
    if srgb:
        colour = info.channels - 1 if info.channels in (2, 4) else info.channels
        texture = torch.cat((srgb_to_linear(texture[..., :colour]), texture[..., colour:]), dim=-1)
    return texture


def decode_normal_map(rgb: torch.Tensor, *, strength: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Unit tangent-space normals ``[N, 3]`` from normal-map texels ``[N, 3]`` in ``[0, 1]``.

    Decodes ``2 c - 1``, scales the tangential part by ``strength`` (0 gives the flat ``+z``, 1 the
    map as authored) and normalises (8-bit maps are never exactly unit length). Expects the
    OpenGL ``+y`` convention (green up); flip green first for DirectX-style maps. ``strength``:
    a float or a tensor broadcastable to ``[N]``.
    """
    n = 2.0 * rgb - 1.0
    s = torch.as_tensor(strength, dtype=rgb.dtype, device=rgb.device)
    s = s[:, None] if s.dim() == 1 else s
    return normalize(torch.cat((n[:, :2] * s, n[:, 2:]), dim=-1))


def height_to_normal(
    height: Callable[[torch.Tensor], torch.Tensor], uv: torch.Tensor, *, scale: float | torch.Tensor = 1.0, step: float = 1e-3
) -> torch.Tensor:
    """Tangent-space normals ``[N, 3]`` of the height field ``scale * height(uv)``.

    ``height`` maps uv ``[N, 2]`` to heights ``[N]`` (a noise, or ``lambda uv: sample_texture(t,
    uv)[:, 0]``); its gradient is taken by central differences with ``step`` in uv (for a
    texture, one texel, ``1 / W``, is a good step). The normal of ``z = s h(u, v)`` is
    ``normalize(-s dh/du, -s dh/dv, 1)``, with uv in the same unit as the height.
    """
    du = torch.tensor([step, 0.0], dtype=uv.dtype, device=uv.device)
    dv = torch.tensor([0.0, step], dtype=uv.dtype, device=uv.device)
    dh_du = (height(uv + du) - height(uv - du)) / (2.0 * step)
    dh_dv = (height(uv + dv) - height(uv - dv)) / (2.0 * step)
    s = torch.as_tensor(scale, dtype=uv.dtype, device=uv.device)
    return normalize(torch.stack((-s * dh_du, -s * dh_dv, torch.ones_like(dh_du)), dim=-1))
