"""Comparison pictures: panel layout, the signed and heat-map error pictures, display of stored
channels (grey + alpha, two data channels, normals with Z rebuilt)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralbake.render.pictures import comparison_row, display_rgb, error_heat_map, panel_grid, preview_strip, signed_difference


def test_panel_grid_puts_white_gaps_between_panels_and_rows() -> None:
    a = np.zeros((2, 3, 3), dtype=np.float32)
    grid = panel_grid([[a, torch.zeros(2, 3, 3)], [a, a]], gap=1)
    assert grid.shape == (5, 7, 3) and grid.dtype == np.float32
    assert grid[:, 3].min() == 1.0 and grid[2].min() == 1.0 and grid[:2, :3].max() == 0.0
    with pytest.raises(ValueError, match="widths"):
        panel_grid([[a], [a, a]])


def test_error_pictures() -> None:
    ref = np.full((2, 2, 3), 0.5, dtype=np.float32)
    out = ref + np.float32(0.05)
    np.testing.assert_allclose(signed_difference(ref, out, gain=10.0), 0.75, atol=1e-6)
    np.testing.assert_allclose(signed_difference(ref, ref), 0.5)
    red = error_heat_map(ref, out, scale=0.1, colormap="red")
    np.testing.assert_allclose(red[0, 0], [0.5, 0.1, 0.0], atol=1e-6)
    assert error_heat_map(ref, out, colormap="inferno").shape == (2, 2, 3)


def test_display_and_rows() -> None:
    normal_xy = np.full((1, 1, 2), 0.5, dtype=np.float32)
    np.testing.assert_allclose(display_rgb(normal_xy, kind="normal_xy")[0, 0], [0.5, 0.5, 1.0])
    np.testing.assert_allclose(display_rgb(normal_xy)[0, 0], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(display_rgb(np.array([[[0.2, 0.9]]]), alpha=True)[0, 0], [0.2, 0.2, 0.2], atol=1e-7)
    rgba = np.random.default_rng(0).random((4, 4, 4)).astype(np.float32)
    rows = comparison_row(rgba, rgba, alpha=True)
    assert len(rows) == 2 and all(len(row) == 3 for row in rows)
    assert len(comparison_row(rgba, rgba, error="none")[0]) == 2
    strip = preview_strip(rgba, rgba)
    assert strip.shape == ((4 + 4 + 4) * 64, (3 * 4 + 2 * 4) * 64, 3)
