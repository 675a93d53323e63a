"""Paint on a rendered view, land in texture space: strokes drawn over a picture of the asset are
carried into a uv texture through the view's visibility buffer.

A view's visibility buffer says which surface point every pixel sees; interpolated, that is each
pixel's uv and its screen-space derivatives (``uv_dx``, ``uv_dy``: how far uv moves from one pixel
to the next). :func:`view_uv_buffer` keeps exactly that for the pixels that hit the asset.
:func:`project_strokes` then lays every painted pixel's footprint -- the parallelogram its
derivatives span -- onto the texture, sampled densely enough that a view seen up close (one pixel
over several texels) leaves no holes. Only surface the view saw is painted; a texel shared by two
places (mirrored or overlapping uv charts) is painted from either, as the texture itself would be.

Written here because no library maps screen strokes into a texture through a G-buffer; it is a few
vectorised numpy lines over data the renderer already has.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["MAX_FOOTPRINT_SAMPLES", "project_strokes", "view_uv_buffer"]

MAX_FOOTPRINT_SAMPLES = 16
"""Most samples along each side of one pixel's footprint (a pixel covering more texels than this
per side paints every ``footprint / 16``-th texel row of it: views that far out are for overview,
not for detail)."""


def view_uv_buffer(pixel: np.ndarray, uv: np.ndarray, uv_dx: np.ndarray, uv_dy: np.ndarray, width: int, height: int) -> dict[str, np.ndarray]:
    """A view's paintable data: hit pixels (flat indices, row-major), their uv and uv derivatives."""
    pixel = np.asarray(pixel).reshape(-1).astype(np.int64)
    arrays = {name: np.asarray(a, np.float32).reshape(-1, 2) for name, a in (("uv", uv), ("uv_dx", uv_dx), ("uv_dy", uv_dy))}
    if any(a.shape[0] != pixel.shape[0] for a in arrays.values()):
        raise ValueError("view_uv_buffer: pixel, uv, uv_dx and uv_dy must have one row per hit pixel")
    if pixel.size and (pixel.min() < 0 or pixel.max() >= width * height):
        raise ValueError("view_uv_buffer: a pixel index lies outside the view")
    return {"pixel": pixel.astype(np.int32), **arrays, "size": np.array([height, width], np.int32)}


def _strokes_at_view_size(strokes: np.ndarray, height: int, width: int) -> np.ndarray:
    """``strokes`` ``[h, w]`` resampled (nearest) to the view's ``[height, width]``."""
    h, w = strokes.shape
    if (h, w) == (height, width):
        return strokes
    rows = np.minimum((np.arange(height) + 0.5) * h / height, h - 1).astype(np.int64)
    cols = np.minimum((np.arange(width) + 0.5) * w / width, w - 1).astype(np.int64)
    return strokes[rows][:, cols]


def project_strokes(
    buffer: dict[str, np.ndarray],
    strokes: np.ndarray,
    weights: np.ndarray,
    *,
    mode: Literal["paint", "erase"] = "paint",
) -> tuple[np.ndarray, int]:
    """Carry ``strokes`` drawn over a view into the uv-space ``weights`` texture.

    ``buffer`` is a view's :func:`view_uv_buffer`; ``strokes`` ``[h, w]`` in ``[0, 1]`` is the
    stroke strength over the view's picture (any size: it is resampled to the view's); ``weights``
    ``[H, W]`` in ``[0, 1]`` is the current mask (row 0 at v = 0, as the renderer samples it).
    ``paint`` raises every texel under a stroke to the stroke's strength; ``erase`` lowers it to
    ``1 - strength``. Returns the new mask and how many texels the strokes reached.
    """
    if mode not in ("paint", "erase"):
        raise ValueError(f"project_strokes: mode is paint or erase, got {mode!r}")
    height, width = (int(v) for v in buffer["size"])
    strokes = np.clip(np.nan_to_num(np.asarray(strokes, np.float32)), 0.0, 1.0)
    if strokes.ndim != 2:
        raise ValueError(f"project_strokes: strokes must be [h, w], got shape {strokes.shape}")
    strength = _strokes_at_view_size(strokes, height, width).reshape(-1)[buffer["pixel"].astype(np.int64)]
    out = np.array(weights, np.float32, copy=True)
    size = np.array([out.shape[1], out.shape[0]], np.float32)  # texels along u, v
    hit = strength > 0
    if not hit.any():
        return out, 0
    strength = strength[hit]
    uv, uv_dx, uv_dy = buffer["uv"][hit], buffer["uv_dx"][hit], buffer["uv_dy"][hit]
    reach = np.nan_to_num(np.maximum(np.abs(uv_dx * size).max(1), np.abs(uv_dy * size).max(1)), nan=0.0, posinf=0.0)
    n = int(np.clip(np.ceil(np.percentile(reach, 99)) + 1, 1, MAX_FOOTPRINT_SAMPLES))
    offsets = (np.arange(n, dtype=np.float32) + 0.5) / n - 0.5  # sample points across the pixel
    ox, oy = (a.reshape(1, -1, 1) for a in np.meshgrid(offsets, offsets, indexing="xy"))
    samples = uv[:, None, :] + ox * uv_dx[:, None, :] + oy * uv_dy[:, None, :]  # [P, n*n, 2]
    texel = np.floor(np.mod(samples, 1.0) * size).astype(np.int64)
    x = np.minimum(texel[..., 0], out.shape[1] - 1).reshape(-1)
    y = np.minimum(texel[..., 1], out.shape[0] - 1).reshape(-1)
    value = np.repeat(strength, n * n)
    flat = out.reshape(-1)
    index = y * out.shape[1] + x
    if mode == "paint":
        np.maximum.at(flat, index, value)
    else:
        np.minimum.at(flat, index, 1.0 - value)
    return out, int(np.unique(index).size)
