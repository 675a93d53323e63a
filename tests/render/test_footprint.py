"""Pixel footprints in the preview renderer and latent filtering of neural materials with them.

The footprint is each camera sample's uv derivatives per pixel step (finite offset rays); a neural
material with ``filtering`` turns it into a level of detail and fetches its latents trilinearly.
Checked: the derivatives against the analytic ones of a plane, the sphere's seam, and that a
filtered 1-sample render of a receding floor is closer to a supersampled reference than the
unfiltered one (whose level-0 fetch aliases).
"""

from __future__ import annotations

import itertools
import math

import torch

from neuralbake.bakes.neural_material.model import NeuralMaterial, lod_from_derivatives
from neuralbake.nn.mlp import MLP, MLPConfig
from neuralbake.render.preview import _intersect, pixel_footprints, render_preview


def test_plane_footprint_matches_the_analytic_derivatives_and_grows_with_distance() -> None:
    size = 64
    geo, sx, sy = pixel_footprints("plane", size)
    hit = geo["hit"]
    assert hit.sum() > size * size // 4
    # analytic: uv = (x + 1) / 2, (1 - z) / 2 on y = 0; d(uv)/d(sx) by central differences of the exact map
    h = 1e-4
    for key, (dx, dy) in (("duv_dx", (1.0, 0.0)), ("duv_dy", (0.0, -1.0))):
        plus = _intersect("plane", sx + h * dx, sy + h * dy)["uv"]
        minus = _intersect("plane", sx - h * dx, sy - h * dy)["uv"]
        derivative = (plus - minus) / (2 * h) * (2.0 / size)  # per pixel step
        near = hit & (sy < -0.5)  # the lower screen, where one pixel is a small step on the floor
        relative = (geo[key][near] - derivative[near]).norm(dim=1) / derivative[near].norm(dim=1)
        assert relative.max() < 0.05, relative.max()
    lod = lod_from_derivatives(geo["duv_dx"], geo["duv_dy"], (64, 64)).reshape(size, size)
    rows = [lod[row][hit.reshape(size, size)[row]].mean() for row in range(size - 1, 0, -1) if hit.reshape(size, size)[row].any()]
    assert all(b >= a - 1e-4 for a, b in itertools.pairwise(rows))  # farther up the screen, coarser
    assert rows[-1] - rows[0] > 4.0


def test_sphere_footprint_is_small_across_the_seam_and_at_the_silhouette() -> None:
    geo, _, _ = pixel_footprints("sphere", 48)
    hit = geo["hit"]
    for key in ("duv_dx", "duv_dy"):
        assert geo[key][hit].abs().max() < 0.25  # no jump of ~1 where u wraps, no miss at the rim
    assert (geo["duv_dx"][hit].norm(dim=1) > 0).all()


def _striped_material(size: int = 64) -> NeuralMaterial:
    """Latents with a one-texel stripe pattern (channel 0) and its box-filtered pyramid; a fixed decoder."""
    torch.manual_seed(0)
    x = torch.arange(size)
    stripes = ((x[None, :] + x[:, None]) % 2).float()
    level = torch.zeros(size, size, 8)
    level[..., 0] = stripes * 2.0
    level[..., 1] = 0.5
    levels = [level]
    while levels[-1].shape[0] > 1:
        last = levels[-1].permute(2, 0, 1)[None]
        levels.append(torch.nn.functional.avg_pool2d(last, 2)[0].permute(1, 2, 0))
    decoder = MLP(MLPConfig(inputs=14, hidden=16, layers=2, outputs=3, hidden_activation="relu", output_activation="none"))
    with torch.no_grad():
        for layer in decoder.layers:
            layer.weight.mul_(0.5)
        decoder.layers[0].weight[:, 0].mul_(8.0)  # the stripes show
        decoder.layers[-1].bias.fill_(0.3)
    return NeuralMaterial(levels, decoder, ("wi", "wo"))


def test_filtered_latents_render_a_receding_floor_closer_to_the_supersampled_reference() -> None:
    material = _striped_material()
    options = {"size": 24, "light": "directional", "scenes": ("plane",), "seed": 3}
    rendered = render_preview(material, spp=256, **options)
    reference = rendered["plane"]
    inside = rendered.coverage["plane"] > 0.999  # the floor's edges and the horizon alias either way
    assert inside.sum() > 100
    errors = {}
    for filtering in (False, True):
        material.filtering = filtering
        image = render_preview(material, spp=1, **options)["plane"]
        errors[filtering] = math.sqrt(float(((image - reference) ** 2)[inside].mean()))
    material.filtering = False
    assert errors[True] < 0.3 * errors[False], errors


def test_degenerate_footprints_give_one_probe_and_no_error() -> None:
    """Zero derivatives (magnified to a point) and NaN ones: one probe; the NaN stays a NaN, it does not raise."""
    material = _striped_material(8)
    uv = torch.full((3, 2), 0.3)
    dx = torch.tensor([[0.0, 0.0], [float("nan"), 0.0], [0.5, 0.0]])
    dy = torch.tensor([[0.0, 0.0], [0.0, 0.1], [0.0, 0.5]])
    latent = material.latent_footprint(uv, dx, dy)
    assert torch.isfinite(latent[0]).all() and torch.isfinite(latent[2]).all()
    assert torch.allclose(latent[0], material.latent_at(uv[:1], 0)[0].float(), atol=1e-6)  # level 0 when magnified
