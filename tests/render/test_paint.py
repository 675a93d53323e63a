"""Strokes on a rendered view carried into uv space through the view's uv buffer: exact texels on
a plane, no holes when a pixel covers several texels, erase, any stroke resolution, and on a real
render every hit pixel's own texel is painted and (nearly) nothing outside the asset's uv charts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from neuralbake.render.paint import project_strokes, view_uv_buffer

ROOT = Path(__file__).resolve().parents[2]


def _plane(size: int = 16) -> dict[str, np.ndarray]:
    """A view filled by a plane whose uv is the pixel's own position (one pixel = 1/size of uv)."""
    ys, xs = np.mgrid[0:size, 0:size]
    uv = np.stack(((xs + 0.5) / size, (ys + 0.5) / size), -1).reshape(-1, 2)
    n = size * size
    return view_uv_buffer(np.arange(n), uv, np.tile([1.0 / size, 0.0], (n, 1)), np.tile([0.0, 1.0 / size], (n, 1)), size, size)


def test_a_stroke_lands_on_exactly_the_texels_under_it_without_holes() -> None:
    strokes = np.zeros((16, 16), np.float32)
    strokes[4:8, 2:6] = 1.0  # rows 4-7, columns 2-5
    weights, texels = project_strokes(_plane(), strokes, np.zeros((64, 64), np.float32))  # 4 x 4 texels per pixel
    expected = np.zeros((64, 64), bool)
    expected[16:32, 8:24] = True
    assert texels == expected.sum() == 256
    assert np.array_equal(weights > 0, expected) and weights[expected].min() == 1.0


def test_stroke_strength_resolution_and_erase() -> None:
    fine = np.zeros((64, 64), np.float32)
    fine[16:32, 8:24] = 0.5  # the same region drawn on a 4x larger canvas, at half strength
    weights, _ = project_strokes(_plane(), fine, np.zeros((32, 32), np.float32))
    assert np.allclose(weights[8:16, 4:12], 0.5) and weights.sum() == pytest.approx(0.5 * 64)
    erased, texels = project_strokes(_plane(), fine * 2, np.ones((32, 32), np.float32), mode="erase")
    assert texels == 64 and erased[8:16, 4:12].max() == 0.0 and erased.sum() == 32 * 32 - 64
    again, _ = project_strokes(_plane(), fine, weights)  # painting never lowers a weight
    assert np.array_equal(again, weights)


def test_strokes_on_the_background_paint_nothing() -> None:
    buffer = _plane()
    keep = buffer["pixel"] >= 128  # the top half of the view sees nothing
    half = {**{k: v[keep] for k, v in buffer.items() if k != "size"}, "size": buffer["size"]}
    strokes = np.zeros((16, 16), np.float32)
    strokes[:8] = 1.0
    weights, texels = project_strokes(half, strokes, np.zeros((16, 16), np.float32))
    assert texels == 0 and weights.max() == 0.0
    with pytest.raises(ValueError, match="mode"):
        project_strokes(buffer, strokes, weights, mode="smudge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside"):
        view_uv_buffer(np.array([300]), np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 2)), 16, 16)


def test_on_a_real_render_every_seen_texel_is_painted_and_nothing_off_the_charts() -> None:
    from neuralbake.io.gltf import load_gltf
    from neuralbake.render.camera import fibonacci_orbit
    from neuralbake.render.gbuffer import render_gbuffer
    from neuralbake.render.scene import prepare_scene
    from neuralbake.render.uv_raster import rasterize_uv

    scene = prepare_scene(load_gltf(ROOT / "examples" / "crate" / "crate.gltf"))
    camera = fibonacci_orbit(3, 3.5)[1]
    g = render_gbuffer(scene, camera, 48, 48)
    buffer = view_uv_buffer(g.pixel.numpy(), g.uv[0].numpy(), g.uv_dx[0].numpy(), g.uv_dy[0].numpy(), 48, 48)
    weights, texels = project_strokes(buffer, np.ones((48, 48), np.float32), np.zeros((128, 128), np.float32))
    centre = np.floor(np.mod(buffer["uv"], 1.0) * 128).astype(int)
    assert (weights[centre[:, 1], centre[:, 0]] == 1.0).all()
    tri, _ = rasterize_uv(torch.remainder(scene.uv0, 1.0), scene.faces, 128, dilate=2)
    # a grazing pixel's footprint may reach a texel or two past its chart's gutter, no further
    stray = (weights.astype(bool) & (tri.numpy() < 0)).sum()
    assert stray <= 0.005 * texels, f"{stray} of {texels} painted texels lie outside every uv chart"
    assert 0 < texels < 128 * 128
