"""The rough dielectric boundary (reflection and refraction): its sampler against its pdf over the whole sphere,
the estimator it gives against quadrature, the smooth limit's energy split, gradients. Its values are checked
against Mitsuba 3's ``roughdielectric`` in ``test_mitsuba.py``."""

from __future__ import annotations

import math

import pytest
import torch

from neuralbake.material.dielectric import dielectric_eval, dielectric_pdf, dielectric_sample, refract
from neuralbake.material.fresnel import fresnel_dielectric

from ._support import chi2_sampler_pvalue, direction

F64 = torch.float64
CASES = [(0.3, None, 1.5), (0.2, 0.5, 1.33)]


def _below(w: torch.Tensor) -> torch.Tensor:
    return w * torch.tensor([1.0, 1.0, -1.0], dtype=w.dtype)


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize(("alpha_x", "alpha_y", "ior"), CASES)
def test_sampler_matches_pdf_over_the_sphere(alpha_x: float, alpha_y: float | None, ior: float, inside: bool) -> None:
    pytest.importorskip("scipy")
    params = {"alpha_x": alpha_x, "alpha_y": alpha_y, "ior": ior}
    wo = direction(0.7, phi=0.4)
    wo = _below(wo) if inside else wo
    p = chi2_sampler_pvalue(lambda w, u: dielectric_sample(w, u, **params), lambda wi, w: dielectric_pdf(wi, w, **params), wo, seed=5, sphere=True, n_cos=20, nodes=10)
    assert p > 0.01, f"p = {p:.3g}"


def test_chi2_over_the_sphere_detects_a_wrong_pdf() -> None:
    pytest.importorskip("scipy")
    params = {"alpha_x": 0.3, "ior": 1.5}
    wrong = lambda wi, w: dielectric_pdf(wi, w, alpha_x=0.3, ior=1.2)  # noqa: E731
    assert chi2_sampler_pvalue(lambda w, u: dielectric_sample(w, u, **params), wrong, direction(0.7), seed=5, sphere=True, n_cos=20, nodes=10) < 1e-6


@pytest.mark.parametrize("inside", [False, True])
def test_sampled_estimate_matches_quadrature(inside: bool) -> None:
    """``E[f cos / pdf]`` from the sampler equals the integral of ``f cos`` over the sphere (the albedo)."""
    params = {"alpha_x": 0.4, "ior": 1.5}
    wo = direction(0.6, phi=0.2)
    wo = _below(wo) if inside else wo
    n = 200_000
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    wi, pdf = dielectric_sample(wo.expand(n, 3), u, **params)
    ok = pdf > 0
    estimate = (dielectric_eval(wi[ok], wo.expand(int(ok.sum()), 3), **params)[:, 0] / pdf[ok]).sum() / n
    # quadrature: midpoint rule in (cos theta, phi) over the sphere
    k = 600
    c = -1.0 + 2.0 * (torch.arange(k, dtype=F64) + 0.5) / k
    phi = 2 * math.pi * (torch.arange(2 * k, dtype=F64) + 0.5) / (2 * k)
    cc, pp = torch.meshgrid(c, phi, indexing="ij")
    s = torch.sqrt(1 - cc * cc)
    dirs = torch.stack((s * torch.cos(pp), s * torch.sin(pp), cc), -1).reshape(-1, 3)
    integral = dielectric_eval(dirs, wo.expand(dirs.shape[0], 3), **params)[:, 0].sum() * (2.0 / k) * (2 * math.pi / (2 * k))
    # seen from the air at most everything comes back; from inside, radiance grows by ior^2 on the way in, so more
    assert 0.1 < float(integral) <= (2.25 if inside else 1.0)
    assert float(estimate) == pytest.approx(float(integral), rel=0.01)


def test_smooth_limit_splits_energy_by_fresnel() -> None:
    """Nearly smooth, seen from the air: reflection carries F(cos_o) and refraction (1 - F) / ior^2 (radiance shrinks
    by ior^2 entering the denser medium when traced backwards from the viewer: light from inside arrives dimmer)."""
    ior, cos_o = 1.5, 0.8
    wo = direction(cos_o, phi=0.1)
    n = 100_000
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(2), dtype=F64)
    wi, pdf = dielectric_sample(wo.expand(n, 3), u, alpha_x=0.01, ior=ior)
    weight = dielectric_eval(wi, wo.expand(n, 3), alpha_x=0.01, ior=ior)[:, 0] / pdf.clamp(min=1e-300) * (pdf > 0)
    up = wi[:, 2] > 0
    f = float(fresnel_dielectric(torch.tensor(cos_o, dtype=F64), torch.tensor(ior, dtype=F64)))
    assert float(weight[up].sum() / n) == pytest.approx(f, rel=0.02)
    assert float(weight[~up].sum() / n) == pytest.approx((1 - f) / ior**2, rel=0.02)
    # the refracted samples leave along Snell's direction
    snell, exists = refract(wo, torch.tensor([[0.0, 0.0, 1.0]], dtype=F64), torch.tensor([ior], dtype=F64))
    assert bool(exists.all())
    assert float((wi[~up].mean(0) - snell[0]).norm()) < 0.02
    assert math.sin(math.acos(-float(snell[0, 2]))) == pytest.approx(math.sin(math.acos(cos_o)) / ior, rel=1e-9)


def test_total_internal_reflection_reflects_everything() -> None:
    """Inside the medium well beyond the critical angle almost nothing refracts out (only microfacets in GGX's long
    tail tilt far enough), and on a flat boundary nothing does."""
    wo = _below(direction(0.3, phi=0.5))  # sin 0.95 > 1 / 1.5
    n = 4000
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(3), dtype=F64)
    wi, pdf = dielectric_sample(wo.expand(n, 3), u, alpha_x=0.02, ior=1.5)
    assert float((wi[pdf > 0, 2] > 0).double().mean()) < 0.005
    flat = torch.tensor([[0.0, 0.0, 1.0]], dtype=F64)
    _, exists = refract(wo, flat, torch.tensor([1.5], dtype=F64))
    assert not bool(exists.any())


def test_gradients() -> None:
    gen = torch.Generator().manual_seed(4)
    wo = torch.nn.functional.normalize(torch.randn(6, 3, generator=gen, dtype=F64), dim=-1)
    wi = torch.nn.functional.normalize(torch.randn(6, 3, generator=gen, dtype=F64), dim=-1)
    alpha = torch.full((6,), 0.4, dtype=F64, requires_grad=True)
    ior = torch.full((6,), 1.45, dtype=F64, requires_grad=True)
    assert bool((dielectric_eval(wi, wo, alpha_x=alpha, ior=ior) > 0).any())
    assert torch.autograd.gradcheck(lambda a, e: dielectric_eval(wi, wo, alpha_x=a, ior=e), (alpha, ior))
    assert torch.autograd.gradcheck(lambda a, e: dielectric_pdf(wi, wo, alpha_x=a, ior=e), (alpha, ior))


# --- thin-walled ---------------------------------------------------------------------------------------------

from neuralbake.material.dielectric import slab_reflectance, thin_dielectric_eval, thin_dielectric_pdf, thin_dielectric_sample  # noqa: E402


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize(("alpha_x", "alpha_y"), [(0.3, None), (0.15, 0.45)])
def test_thin_sampler_matches_pdf_over_the_sphere(alpha_x: float, alpha_y: float | None, inside: bool) -> None:
    pytest.importorskip("scipy")
    params = {"alpha_x": alpha_x, "alpha_y": alpha_y, "ior": 1.5}
    wo = direction(0.6, phi=0.9)
    wo = _below(wo) if inside else wo
    p = chi2_sampler_pvalue(lambda w, u: thin_dielectric_sample(w, u, **params), lambda wi, w: thin_dielectric_pdf(wi, w, **params), wo,
                            seed=7, sphere=True, n_cos=20, nodes=10)
    assert p > 0.01, f"p = {p:.3g}"


def test_thin_smooth_slab_splits_by_its_bounces_and_passes_light_straight() -> None:
    ior, cos_o = 1.5, 0.5
    wo = direction(cos_o, phi=1.1)
    n = 100_000
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(8), dtype=F64)
    wi, pdf = thin_dielectric_sample(wo.expand(n, 3), u, alpha_x=0.005, ior=ior)
    weight = thin_dielectric_eval(wi, wo.expand(n, 3), alpha_x=0.005, ior=ior)[:, 0] / pdf.clamp(min=1e-300) * (pdf > 0)
    f = fresnel_dielectric(torch.tensor(cos_o, dtype=F64), torch.tensor(ior, dtype=F64))
    r = float(slab_reflectance(f))
    assert r == pytest.approx(float(f + (1 - f) ** 2 * f / (1 - f * f)), rel=1e-12)
    up = wi[:, 2] > 0
    assert float(weight[up].sum() / n) == pytest.approx(r, rel=0.02)
    assert float(weight[~up].sum() / n) == pytest.approx(1.0 - r, rel=0.02)
    assert float((wi[~up].mean(0) + wo[0]).norm()) < 0.01  # straight through: no refraction in a thin wall


def test_thin_slab_looks_the_same_from_both_sides_and_conserves_energy() -> None:
    gen = torch.Generator().manual_seed(9)
    wo = torch.nn.functional.normalize(torch.randn(64, 3, generator=gen, dtype=F64), dim=-1)
    wi = torch.nn.functional.normalize(torch.randn(64, 3, generator=gen, dtype=F64), dim=-1)
    params = {"alpha_x": 0.35, "ior": 1.45}
    torch.testing.assert_close(thin_dielectric_eval(_below(wi), _below(wo), **params), thin_dielectric_eval(wi, wo, **params))
    # reciprocal: f itself (the value over |cos_i|) is symmetric in the two directions
    torch.testing.assert_close(thin_dielectric_eval(wi, wo, **params) / wi[:, 2:].abs(), thin_dielectric_eval(wo, wi, **params) / wo[:, 2:].abs())
    # no absorption: reflected and transmitted together, the slab returns what a perfect GGX mirror (F = 1) of the
    # same roughness does (single scattering); the same uniforms give the same microfacets
    from neuralbake.material.lobes import conductor_eval, conductor_sample

    wo1 = direction(0.4).expand(100_000, 3)
    u = torch.rand(100_000, 2, generator=gen, dtype=F64)
    wi_s, pdf = thin_dielectric_sample(wo1, u, **params)
    albedo = float((thin_dielectric_eval(wi_s, wo1, **params)[:, 0] / pdf.clamp(min=1e-300) * (pdf > 0)).mean())
    wi_m, pdf_m = conductor_sample(wo1, u, alpha_x=0.35, eta=1.0, k=1e4)
    mirror = float((conductor_eval(wi_m, wo1, alpha_x=0.35, eta=1.0, k=1e4)[:, 0] / pdf_m.clamp(min=1e-300) * (pdf_m > 0)).mean())
    assert albedo == pytest.approx(mirror, rel=1e-6) and 0.5 < albedo < 1.0


def test_thin_gradients() -> None:
    gen = torch.Generator().manual_seed(10)
    wo = torch.nn.functional.normalize(torch.randn(6, 3, generator=gen, dtype=F64), dim=-1)
    wi = torch.nn.functional.normalize(torch.randn(6, 3, generator=gen, dtype=F64), dim=-1)
    alpha = torch.full((6,), 0.5, dtype=F64, requires_grad=True)
    ior = torch.full((6,), 1.4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, e: thin_dielectric_eval(wi, wo, alpha_x=a, ior=e), (alpha, ior))
