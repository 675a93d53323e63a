"""Layered materials: the coat-albedo table against Monte Carlo, reciprocity, white furnace (energy
conservation and the known loss of the reciprocal albedo scaling), absorption, chi-square tests of
the mixture samplers, autograd checks, and the copper tray built from procedural nodes."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.autograd import gradcheck

from neuralbake.errors import InputError
from neuralbake.material import (
    Layer,
    coat,
    coat_albedo,
    conductor_ior,
    fbm,
    layer,
    mix,
    perlin_noise,
    ramp,
    smoothstep,
    up_facing,
    worley_noise,
)

from ._support import chi2_sampler_pvalue, direction, directional_albedo, hemisphere_directions

F64 = torch.float64
VIEW_COSINES = (1.0, 0.7, 0.3, 0.08)


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def _copper() -> Layer:
    eta, k = conductor_ior("Cu", dtype=F64)
    return layer("conductor", {"eta": eta, "k": k, "alpha_x": 0.3})


def _varnished_copper(thickness: float = 0.5) -> Layer:
    return coat(_copper(), alpha_x=0.1, ior=1.5, absorption=_t(0.1, 0.4, 0.9), thickness=thickness)


def layer_albedo(bsdf: Layer, wo: torch.Tensor, n: int = 4096, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-sampled directional albedo of a layer and its standard error, ``[3]`` each."""
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(seed), dtype=wo.dtype)
    wo_n = wo.expand(n, 3)
    wi, pdf = bsdf.sample(wo_n, u)
    value = bsdf.eval(wi, wo_n)
    ok = (pdf > 0.0)[:, None]
    weight = torch.where(ok, value / torch.where(ok, pdf[:, None], torch.ones_like(value)), torch.zeros_like(value))
    return weight.mean(dim=0), weight.std(dim=0) / math.sqrt(n)


# --- the coat-albedo table ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cos_o", "alpha", "ior"), [(1.0, 0.05, 1.5), (0.5, 0.3, 1.45), (0.1, 0.7, 2.2), (0.03, 0.3, 1.5), (0.2, 0.02, 1.33)]
)
def test_coat_albedo_table_matches_monte_carlo(cos_o: float, alpha: float, ior: float) -> None:
    # Interpolation error of the table is below 0.006 everywhere we measured (worst: nearly
    # smooth coats at grazing views, where E rises steeply).
    reference, stderr = directional_albedo("coating", {"alpha_x": alpha, "ior": ior}, direction(cos_o), n=32768)
    table = coat_albedo(_t(cos_o), alpha, ior)
    assert abs(table.item() - reference[0].item()) < 0.006 + 4.0 * stderr[0].item()


def test_coat_albedo_known_values() -> None:
    # A smooth coat at normal incidence reflects ((n - 1) / (n + 1))^2; an ior of 1 reflects nothing.
    torch.testing.assert_close(coat_albedo(_t(1.0), 0.0, 1.5), _t(0.04), atol=2e-4, rtol=0.0)
    torch.testing.assert_close(coat_albedo(_t(0.3, 0.9), 0.4, 1.0), _t(0.0, 0.0), atol=1e-12, rtol=0.0)


# --- pointwise properties -----------------------------------------------------------------------


def _reciprocity_cases() -> list[tuple[str, Layer]]:
    n = 64
    g = torch.Generator().manual_seed(9)
    mask = torch.rand(n, generator=g, dtype=F64)
    patina = layer("lambert", {"albedo": _t(0.25, 0.55, 0.45)})
    return [
        ("coated-copper", _varnished_copper()),
        ("coated-aniso", coat(_copper(), alpha_x=0.1, alpha_y=0.4, ior=1.7, absorption=0.3, thickness=1.0)),
        ("mask-blend", mix(_copper(), patina, mask)),
        ("coat-over-blend", coat(mix(_copper(), patina, mask), alpha_x=0.2, absorption=_t(0.0, 0.2, 0.5), thickness=0.3)),
    ]


@pytest.mark.parametrize(("case", "bsdf"), _reciprocity_cases(), ids=[c[0] for c in _reciprocity_cases()])
def test_reciprocity(case: str, bsdf: Layer) -> None:
    wi = hemisphere_directions(64, seed=1)
    wo = hemisphere_directions(64, seed=2)
    forward = bsdf.eval(wi, wo) / wi[:, 2:]
    backward = bsdf.eval(wo, wi) / wo[:, 2:]
    torch.testing.assert_close(forward, backward, rtol=1e-9, atol=1e-12)
    assert (forward > 0).all()


def test_sample_returns_its_pdf_and_stays_above() -> None:
    wo = hemisphere_directions(512, seed=4)
    u = torch.rand(512, 2, generator=torch.Generator().manual_seed(5), dtype=F64)
    mask = torch.rand(512, generator=torch.Generator().manual_seed(6), dtype=F64)
    bsdf = mix(_varnished_copper(), layer("lambert", {"albedo": 0.5}), mask)
    wi, pdf = bsdf.sample(wo, u)
    torch.testing.assert_close(pdf, bsdf.pdf(wi, wo), rtol=1e-12, atol=0.0)
    valid = pdf > 0
    assert valid.float().mean() > 0.9
    assert (bsdf.eval(wi, wo).sum(dim=-1)[valid] > 0).all()
    down = wo * _t(1.0, 1.0, -1.0)
    assert (bsdf.eval(wi, down) == 0).all() and (bsdf.pdf(wi, down) == 0).all()


def test_mask_extremes_select_one_layer() -> None:
    wi, wo = hemisphere_directions(32, seed=1), hemisphere_directions(32, seed=2)
    a, b = _copper(), layer("lambert", {"albedo": 0.7})
    torch.testing.assert_close(mix(a, b, 0.0).eval(wi, wo), a.eval(wi, wo))
    torch.testing.assert_close(mix(a, b, 1.0).eval(wi, wo), b.eval(wi, wo))
    torch.testing.assert_close(mix(a, b, 1.0).pdf(wi, wo), b.pdf(wi, wo))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_device(dtype: torch.dtype, device: torch.device) -> None:
    eta, k = conductor_ior("Cu", dtype=dtype, device=device)
    mask = torch.rand(8, dtype=dtype, device=device)
    base = mix(layer("conductor", {"eta": eta, "k": k, "alpha_x": 0.3}), layer("lambert", {"albedo": 0.5}), mask)
    bsdf = coat(base, alpha_x=0.1, absorption=torch.tensor([0.1, 0.2, 0.3], dtype=dtype, device=device), thickness=0.5)
    wi = hemisphere_directions(8, seed=6, dtype=dtype).to(device)
    wo = hemisphere_directions(8, seed=7, dtype=dtype).to(device)
    value = bsdf.eval(wi, wo)
    sampled, pdf = bsdf.sample(wo, torch.rand(8, 2, dtype=dtype, device=device))
    assert value.shape == (8, 3) and value.dtype == dtype and value.device.type == device.type
    assert sampled.shape == (8, 3) and sampled.dtype == dtype and pdf.shape == (8,) and torch.isfinite(value).all()


def test_unknown_lobe_names_the_field() -> None:
    with pytest.raises(InputError, match="lobe.*unknown lobe 'patina'"):
        layer("patina", {})


# --- energy -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "bsdf"),
    [
        ("clear-coat-white-lambert-smooth", coat(layer("lambert", {"albedo": 1.0}), alpha_x=0.02, ior=1.5)),
        ("clear-coat-white-lambert-rough", coat(layer("lambert", {"albedo": 1.0}), alpha_x=0.5, ior=1.8)),
        ("clear-coat-perfect-mirror", coat(layer("conductor", {"eta": 0.0, "k": 1e4, "alpha_x": 0.05}), alpha_x=0.1, ior=1.5)),
        ("varnished-copper", _varnished_copper()),
        ("blend", mix(_varnished_copper(0.0), layer("lambert", {"albedo": 1.0}), 0.6)),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_white_furnace_at_most_one(case: str, bsdf: Layer) -> None:
    for cos_o in VIEW_COSINES:
        albedo, stderr = layer_albedo(bsdf, direction(cos_o))
        assert (albedo <= 1.0 + 4.0 * stderr + 1e-9).all(), (cos_o, albedo, stderr)
        assert (albedo > 0.0).all()


def test_clear_coat_over_white_lambert_loses_only_the_internal_reflection() -> None:
    # Bound of the reciprocal albedo scaling: E_total(normal) = E(1) + (1 - E(1)) (1 - E_avg), with
    # E_avg = 2 int E(mu) mu dmu (light the coat's underside sends back is not re-bounced).
    # For a smooth ior-1.5 coat that is 0.913 (measured 0.913 +- 0.0005): 1 - E_total <= E_avg < 0.1.
    bsdf = coat(layer("lambert", {"albedo": 1.0}), alpha_x=0.02, ior=1.5)
    mu = torch.linspace(0.0, 1.0, 4001, dtype=F64)
    e_avg = torch.trapezoid(2.0 * coat_albedo(mu, 0.02, 1.5) * mu, mu).item()
    e_1 = coat_albedo(_t(1.0), 0.02, 1.5).item()
    expected = e_1 + (1.0 - e_1) * (1.0 - e_avg)
    albedo, stderr = layer_albedo(bsdf, direction(1.0), n=32768)
    assert abs(albedo[0].item() - expected) < 4.0 * stderr[0].item() + 1e-3
    assert 0.9 < albedo[0].item() <= 1.0 and e_avg < 0.1


def test_absorption_darkens_monotonically_with_thickness() -> None:
    wi, wo = hemisphere_directions(128, seed=1), hemisphere_directions(128, seed=2)
    values = [_varnished_copper(d).eval(wi, wo) for d in (0.0, 0.1, 0.3, 1.0, 3.0)]
    for thinner, thicker in itertools.pairwise(values):
        assert (thicker <= thinner).all() and (thicker.sum() < thinner.sum())
    albedos = [layer_albedo(_varnished_copper(d), direction(0.7))[0] for d in (0.0, 0.3, 1.0, 3.0)]
    for thinner, thicker in itertools.pairwise(albedos):
        assert (thicker < thinner).all()
    # Blue is absorbed most (sigma 0.9 vs 0.1 for red).
    assert albedos[-1][2] < albedos[-1][0]


# --- sampling -----------------------------------------------------------------------------------


def _rough_varnished_copper() -> Layer:
    # Coat alpha 0.25 rather than 0.1: the chi-square helper integrates the pdf with 6 x 6 nodes
    # per cell, which under-resolves narrower peaks (the mixture logic does not depend on it).
    return coat(_copper(), alpha_x=0.25, ior=1.5, absorption=_t(0.1, 0.4, 0.9), thickness=0.5)


@pytest.mark.parametrize(
    ("case", "bsdf", "cos_o"),
    [
        ("coated-copper-front", _rough_varnished_copper(), 0.9),
        ("coated-copper-oblique", _rough_varnished_copper(), 0.35),
        ("mask-blend", mix(_rough_varnished_copper(), layer("lambert", {"albedo": 0.5}), 0.3), 0.6),
        (
            "coat-over-blend-aniso",
            coat(mix(_copper(), layer("sheen", {"color": 1.0, "roughness": 0.5}), 0.5), alpha_x=0.2, alpha_y=0.4),
            0.5,
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_sampler_matches_pdf(case: str, bsdf: Layer, cos_o: float) -> None:
    pytest.importorskip("scipy", reason="scipy is needed for the chi-square p-value (pip install scipy)")
    p_value = chi2_sampler_pvalue(bsdf.sample, bsdf.pdf, direction(cos_o, phi=0.7), n_samples=100_000, seed=5)
    assert p_value > 0.01, f"{case}: p = {p_value:.3g}"


def test_chi2_detects_a_wrong_mixture_weight() -> None:
    # Guard the guard: a blend sampled with mask 0.3 but claiming the density of mask 0.6 must fail.
    pytest.importorskip("scipy", reason="scipy is needed for the chi-square p-value (pip install scipy)")
    lambert = layer("lambert", {"albedo": 0.5})
    sampled, claimed = mix(_rough_varnished_copper(), lambert, 0.3), mix(_rough_varnished_copper(), lambert, 0.6)
    assert chi2_sampler_pvalue(sampled.sample, claimed.pdf, direction(0.6, phi=0.7), n_samples=100_000, seed=5) < 1e-6


# --- gradients ----------------------------------------------------------------------------------


def test_coat_gradcheck() -> None:
    n = 3
    wi, wo = hemisphere_directions(n, seed=21, min_cos=0.15), hemisphere_directions(n, seed=22, min_cos=0.15)
    alpha = _t(0.2, 0.35, 0.6).requires_grad_(True)
    ior = _t(1.3, 1.45, 1.7).requires_grad_(True)  # away from the table's ior nodes (steps of 0.125)
    sigma = _t(0.1, 0.5, 0.9, 0.3, 0.2, 0.1, 1.0, 0.0, 0.4).reshape(n, 3).requires_grad_(True)
    thickness = _t(0.2, 0.5, 1.5).requires_grad_(True)
    mask = _t(0.2, 0.5, 0.9).requires_grad_(True)
    eta, k = conductor_ior("Cu", dtype=F64)
    patina = layer("lambert", {"albedo": _t(0.25, 0.55, 0.45)})

    def f(a: torch.Tensor, n_: torch.Tensor, s: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        base = mix(layer("conductor", {"eta": eta, "k": k, "alpha_x": 0.3}), patina, m)
        return coat(base, alpha_x=a, ior=n_, absorption=s, thickness=d).eval(wi, wo)

    assert gradcheck(f, (alpha, ior, sigma, thickness, mask))


# --- the copper tray from procedural nodes ------------------------------------------------------


def test_copper_tray_from_procedural_nodes() -> None:
    # The seed's tray with no image files: copper, patina in cavities (fBm), varnish, dust on
    # up-facing areas (n.z), scratches (stretched Perlin lines) cutting through everything.
    n = 256
    g = torch.Generator().manual_seed(3)
    uv = torch.rand(n, 2, generator=g, dtype=F64)
    normal = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=F64), dim=-1)
    patina_colour = _t(0.20, 0.45, 0.38, 0.35, 0.60, 0.50).reshape(2, 3).requires_grad_(True)

    cavity = smoothstep(0.0, 0.5, -fbm(uv * 6.0, octaves=4, seed=1))
    scratches = 1.0 - smoothstep(0.0, 0.05, perlin_noise(uv * torch.tensor([3.0, 80.0], dtype=F64), seed=2).abs())
    grain = worley_noise(uv * 20.0, seed=3)
    dust = up_facing(normal) * smoothstep(0.2, 0.8, grain)
    patina = layer("lambert", {"albedo": ramp(cavity, [0.0, 1.0], patina_colour)})
    eta, k = conductor_ior("Cu", dtype=F64)
    tarnished = mix(_copper(), patina, cavity)
    varnished = coat(tarnished, alpha_x=0.08, ior=1.5, absorption=_t(0.05, 0.1, 0.3), thickness=0.2)
    dusty = mix(varnished, layer("sheen", {"color": 0.8, "roughness": 0.9}), dust)
    brushed_copper = layer("conductor", {"eta": eta, "k": k, "alpha_x": 0.05, "alpha_y": 0.4})
    tray = mix(dusty, brushed_copper, scratches)
    wi, wo = hemisphere_directions(n, seed=1), hemisphere_directions(n, seed=2)
    value = tray.eval(wi, wo)
    assert value.shape == (n, 3) and torch.isfinite(value).all() and (value >= 0).all()
    torch.testing.assert_close(value / wi[:, 2:], tray.eval(wo, wi) / wo[:, 2:], rtol=1e-9, atol=1e-12)
    for mask in (cavity, scratches, dust):
        assert mask.min() >= 0.0 and mask.max() <= 1.0 and mask.std() > 0.01
    value.sum().backward()
    assert patina_colour.grad is not None and (patina_colour.grad.abs().sum(dim=-1) > 0).all()
    u = torch.rand(n, 2, generator=g, dtype=F64)
    sampled, pdf = tray.sample(wo, u)
    torch.testing.assert_close(pdf, tray.pdf(sampled, wo))
