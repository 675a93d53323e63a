"""Comparison pictures the bakes write for a person to look at: panels of reference | result |
error laid out in rows with white gaps. One home for the strip every bake draws (neural texture
``preview.png``, NTC ``preview.png``, fit ``triptych.png``, neural-material ``texture_views.png``,
mipmap and render comparisons): how a stored image becomes an RGB panel (grey, alpha, two-channel
data, tangent-space normals with Z rebuilt), the two error pictures (a signed difference around
mid-grey, or a heat map of the mean absolute error) and the grid. Inputs are float ``[H, W, C]``
numpy arrays or tensors (any device) in ``[0, 1]``; outputs are float32 numpy ``[H, W, 3]`` ready
for :func:`~neuralbake.io.images.save_png`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ERROR_PICTURES", "comparison_row", "display_rgb", "error_heat_map", "panel_grid", "preview_strip", "signed_difference"]

ERROR_PICTURES = ("signed", "heat", "none")
"""What :func:`comparison_row` puts in the third panel."""


def _array(image: Any) -> np.ndarray:
    """A float32 numpy view of a numpy array or a tensor (detached, on the CPU)."""
    if hasattr(image, "detach"):
        image = image.detach().float().cpu().numpy()
    return np.asarray(image, dtype=np.float32)


def display_rgb(image: Any, *, kind: str = "color", alpha: bool = False) -> np.ndarray:
    """An RGB picture ``[H, W, 3]`` of a stored image ``[H, W, C]``.

    ``kind="normal_xy"``: two channels ``0.5 n + 0.5`` of a unit normal, Z rebuilt. Otherwise one
    channel is grey; two channels are grey + alpha when ``alpha`` (the grey shown) or two data
    channels (R, G, blue 0); three or more show the first three.
    """
    image = _array(image)
    channels = image.shape[2]
    if kind == "normal_xy":
        xy = image * 2.0 - 1.0
        z = np.sqrt(np.clip(1.0 - (xy**2).sum(axis=2, keepdims=True), 0.0, 1.0))
        return np.concatenate([image, z * 0.5 + 0.5], axis=2)
    if channels == 1 or (channels == 2 and alpha):
        return np.repeat(image[..., :1], 3, axis=2)
    if channels == 2:
        return np.concatenate([image, np.zeros_like(image[..., :1])], axis=2)
    return image[..., :3]


def signed_difference(reference: Any, result: Any, *, gain: float = 10.0) -> np.ndarray:
    """``(result - reference) * gain / 2 + 0.5`` clipped to [0, 1], same shape: mid-grey where equal."""
    return np.clip((_array(result) - _array(reference)) * 0.5 * gain + 0.5, 0.0, 1.0)


def error_heat_map(reference: Any, result: Any, *, scale: float = 0.25, colormap: str = "inferno") -> np.ndarray:
    """Heat map ``[H, W, 3]`` of the channel-mean absolute error divided by ``scale`` (1 = top colour).

    ``colormap``: a matplotlib colormap name, or ``"red"`` (red rising to 1 over a dim green that
    fades out, readable on small panels).
    """
    error = np.abs(_array(result) - _array(reference)).mean(-1) / scale
    if colormap == "red":
        red = np.clip(error, 0.0, 1.0)
        green = np.clip(1.0 - error, 0.0, 1.0) * 0.2
        return np.stack([red, green, np.zeros_like(red)], axis=-1).astype(np.float32)
    import matplotlib

    return matplotlib.colormaps[colormap](np.clip(error, 0.0, 1.0))[..., :3].astype(np.float32)


def comparison_row(
    reference: Any,
    result: Any,
    *,
    error: str = "signed",
    error_gain: float = 10.0,
    heat_scale: float = 0.25,
    colormap: str = "inferno",
    kind: str = "color",
    alpha: bool = False,
) -> list[list[np.ndarray]]:
    """Panels ``reference | result | error`` of two ``[H, W, C]`` images, as rows for :func:`panel_grid`.

    ``error``: ``"signed"`` (:func:`signed_difference` x ``error_gain``), ``"heat"``
    (:func:`error_heat_map` over ``heat_scale`` in ``colormap``) or ``"none"`` (two panels).
    ``kind`` and ``alpha`` are :func:`display_rgb`'s (the signed error is shown as data); with
    ``alpha`` and 2 or 4 channels a second row shows the alpha channels.
    """
    if error not in ERROR_PICTURES:
        raise ValueError(f"comparison_row: unknown error picture {error!r}; use one of {', '.join(ERROR_PICTURES)}")
    reference, result = _array(reference), _array(result)
    images = [(reference, kind), (result, kind)]
    if error == "signed":
        images.append((signed_difference(reference, result, gain=error_gain), "data"))
    rows = [[display_rgb(image, kind=k, alpha=alpha) for image, k in images]]
    if error == "heat":
        rows[0].append(error_heat_map(reference, result, scale=heat_scale, colormap=colormap))
    if alpha and error != "heat" and reference.shape[2] in (2, 4):
        rows.append([np.repeat(image[..., -1:], 3, axis=2) for image, _ in images])
    return rows


def panel_grid(rows: Sequence[Sequence[Any]], *, gap: int = 4) -> np.ndarray:
    """Panels ``[h, w, 3]`` (numpy or tensors) laid out row by row with ``gap`` white pixels between
    panels and between rows; the panels of a row share their height. Returns float32 ``[H, W, 3]``."""
    lines = []
    for row in rows:
        panels = [_array(panel) for panel in row]
        spacer = np.ones((panels[0].shape[0], gap, 3), dtype=np.float32)
        lines.append(np.concatenate([x for panel in panels for x in (panel, spacer)][:-1], axis=1))
    width = max(line.shape[1] for line in lines)
    if any(line.shape[1] != width for line in lines):
        raise ValueError(f"panel_grid: rows of different widths {[line.shape[1] for line in lines]}")
    spacer = np.ones((gap, width, 3), dtype=np.float32)
    return np.concatenate([x for line in lines for x in (line, spacer)][:-1], axis=0)


def preview_strip(reference: Any, output: Any, *, error_gain: float = 10.0, min_height: int = 256) -> np.ndarray:
    """``reference | output | (output - reference) * gain / 2 + 0.5`` of ``[H, W, C]`` images (grey,
    grey + alpha, RGB or RGBA), with an alpha row below if any, 4-pixel gaps, enlarged by whole
    pixels to at least ``min_height`` rows where the image is smaller. Float32 ``[H', W', 3]``."""
    strip = panel_grid(comparison_row(reference, output, error="signed", error_gain=error_gain, alpha=True), gap=4)
    scale = max(1, min_height // max(_array(reference).shape[0], 1))
    return strip.repeat(scale, axis=0).repeat(scale, axis=1) if scale > 1 else strip
