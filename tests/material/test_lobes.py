"""Pointwise properties of the lobes: reciprocity, hemisphere masking, sample/pdf agreement,
parameter broadcasting, dtypes and devices, error messages, and closed forms of the pieces."""

from __future__ import annotations

import math

import pytest
import torch

from neuralbake.errors import InputError
from neuralbake.material import (
    CONDUCTOR_IOR,
    LOBES,
    conductor_eval,
    conductor_ior,
    fresnel_conductor,
    fresnel_dielectric,
    fresnel_schlick,
    ggx_d,
    ggx_reflection_pdf,
    gltf_eval,
    lambert_eval,
    smith_g_height_correlated,
)
from neuralbake.material.gltf import dielectric_reflectance, gltf_visibility
from neuralbake.material.sheen import charlie_d

from ._support import direction, hemisphere_directions, lobe_cases

CASES = lobe_cases()
IDS = [case[0] for case in CASES]


NON_RECIPROCAL = {"gltf-clearcoat"}
"""KHR_materials_clearcoat weighs its coat by Fresnel at the view angle (N.V), by specification: not reciprocal."""


@pytest.mark.parametrize(("case", "lobe", "params"), [c for c in CASES if c[0] not in NON_RECIPROCAL], ids=[i for i in IDS if i not in NON_RECIPROCAL])
def test_reciprocity(case: str, lobe: str, params: dict) -> None:
    wi = hemisphere_directions(64, seed=1)
    wo = hemisphere_directions(64, seed=2)
    forward = LOBES[lobe].eval(wi, wo, params) / wi[:, 2:]
    backward = LOBES[lobe].eval(wo, wi, params) / wo[:, 2:]
    torch.testing.assert_close(forward, backward, rtol=1e-9, atol=1e-12)
    assert (forward > 0).all()


@pytest.mark.parametrize(("case", "lobe", "params"), CASES, ids=IDS)
def test_zero_below_surface(case: str, lobe: str, params: dict) -> None:
    up = hemisphere_directions(16, seed=3)
    down = up * torch.tensor([1.0, 1.0, -1.0], dtype=up.dtype)
    for wi, wo in ((down, up), (up, down), (down, down)):
        assert (LOBES[lobe].eval(wi, wo, params) == 0).all()
        assert (LOBES[lobe].pdf(wi, wo, params) == 0).all()
    u = torch.rand(16, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    _, pdf = LOBES[lobe].sample(down, u, params)
    assert (pdf == 0).all()


@pytest.mark.parametrize(("case", "lobe", "params"), CASES, ids=IDS)
def test_sample_returns_its_pdf(case: str, lobe: str, params: dict) -> None:
    wo = hemisphere_directions(512, seed=4)
    u = torch.rand(512, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    wi, pdf = LOBES[lobe].sample(wo, u, params)
    torch.testing.assert_close(wi.norm(dim=-1), torch.ones(512, dtype=torch.float64))
    torch.testing.assert_close(pdf, LOBES[lobe].pdf(wi, wo, params), rtol=1e-7, atol=1e-12)
    valid = pdf > 0
    assert valid.float().mean() > 0.5
    assert (LOBES[lobe].eval(wi[valid], wo[valid], params).sum(dim=-1) > 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("case", "lobe", "params"), CASES, ids=IDS)
def test_dtype_and_device(case: str, lobe: str, params: dict, dtype: torch.dtype, device: torch.device) -> None:
    params = {key: value.to(device=device, dtype=dtype) if isinstance(value, torch.Tensor) else value for key, value in params.items()}
    wi = hemisphere_directions(8, seed=6, dtype=dtype).to(device)
    wo = hemisphere_directions(8, seed=7, dtype=dtype).to(device)
    u = torch.rand(8, 2, dtype=dtype, device=device)
    value = LOBES[lobe].eval(wi, wo, params)
    sampled, pdf = LOBES[lobe].sample(wo, u, params)
    density = LOBES[lobe].pdf(wi, wo, params)
    assert value.shape == (8, 3) and value.dtype == dtype and value.device.type == device.type
    assert sampled.shape == (8, 3) and sampled.dtype == dtype and pdf.shape == (8,) and density.shape == (8,)
    assert torch.isfinite(value).all() and torch.isfinite(pdf).all()
    reference = LOBES[lobe].eval(wi.double().cpu(), wo.double().cpu(), lobe_params_double(params))
    tolerance = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(value.double().cpu(), reference, rtol=tolerance, atol=tolerance)


def lobe_params_double(params: dict) -> dict:
    return {key: value.double().cpu() if isinstance(value, torch.Tensor) else value for key, value in params.items()}


def test_per_sample_parameters_match_one_at_a_time() -> None:
    n = 5
    wi, wo = hemisphere_directions(n, seed=8), hemisphere_directions(n, seed=9)
    g = torch.Generator().manual_seed(10)
    eta = 0.2 + 2.0 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    k = 1.0 + 3.0 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    alpha_x = 0.1 + 0.6 * torch.rand(n, generator=g, dtype=torch.float64)
    alpha_y = 0.1 + 0.6 * torch.rand(n, 1, generator=g, dtype=torch.float64)  # [N, 1] is accepted too
    batched = conductor_eval(wi, wo, eta=eta, k=k, alpha_x=alpha_x, alpha_y=alpha_y)
    for j in range(n):
        single = conductor_eval(wi[j : j + 1], wo[j : j + 1], eta=eta[j], k=k[j], alpha_x=float(alpha_x[j]), alpha_y=alpha_y[j, 0])
        torch.testing.assert_close(batched[j : j + 1], single)


def test_bad_inputs_name_the_field() -> None:
    wi, wo = hemisphere_directions(4, seed=11), hemisphere_directions(4, seed=12)
    with pytest.raises(InputError, match="albedo"):
        lambert_eval(wi, wo, albedo=torch.ones(4, 2))
    with pytest.raises(InputError, match="wi.*\\[N, 3\\]"):
        lambert_eval(wi[:, :2], wo, albedo=1.0)
    with pytest.raises(InputError, match="wo.*one wo per wi"):
        lambert_eval(wi, wo[:3], albedo=1.0)
    with pytest.raises(InputError, match="alpha_x"):
        conductor_eval(wi, wo, eta=1.0, k=1.0, alpha_x=torch.ones(3))
    with pytest.raises(InputError, match="roughnes.*Fix"):
        LOBES["gltf"].eval(wi, wo, {"base_color": 1.0, "metallic": 0.0, "roughnes": 0.5})
    with pytest.raises(InputError, match="alpha_x.*Fix"):
        LOBES["conductor"].sample(wo, torch.rand(4, 2, dtype=torch.float64), {"eta": 1.0, "k": 1.0})
    with pytest.raises(InputError, match="u"):
        LOBES["lambert"].sample(wo, torch.rand(3, 2), {"albedo": 1.0})
    with pytest.raises(InputError, match="Fe"):
        conductor_ior("Steel")


def test_fresnel_closed_forms() -> None:
    one = torch.ones(1, 1, dtype=torch.float64)
    for eta, k in CONDUCTOR_IOR.values():
        eta_t, k_t = torch.tensor([eta], dtype=torch.float64), torch.tensor([k], dtype=torch.float64)
        normal = ((eta_t - 1) ** 2 + k_t**2) / ((eta_t + 1) ** 2 + k_t**2)
        torch.testing.assert_close(fresnel_conductor(one, eta_t, k_t), normal)
        torch.testing.assert_close(fresnel_conductor(0 * one, eta_t, k_t), torch.ones_like(normal))
    cos = torch.linspace(0.01, 1.0, 50, dtype=torch.float64)
    eta = torch.full_like(cos, 1.5)
    torch.testing.assert_close(fresnel_conductor(cos, eta, torch.zeros_like(cos)), fresnel_dielectric(cos, eta))
    torch.testing.assert_close(fresnel_dielectric(one, torch.tensor(1.5, dtype=torch.float64)), torch.tensor([[0.04]], dtype=torch.float64))
    # From the dense side (relative index < 1) beyond the critical angle: total internal reflection.
    assert fresnel_dielectric(torch.tensor(0.5), torch.tensor(1 / 1.5)).item() == 1.0
    torch.testing.assert_close(fresnel_schlick(torch.tensor(0.5), torch.tensor(0.04)), torch.tensor(0.04 + 0.96 * 0.5**5))


def test_ggx_distribution_is_normalised() -> None:
    # Projected-area normalisation: integral of D(m) cos(theta_m) over the hemisphere is 1.
    n = 400_000
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    z, phi = u[:, 0], 2 * math.pi * u[:, 1]
    m = torch.stack((torch.sqrt(1 - z * z) * torch.cos(phi), torch.sqrt(1 - z * z) * torch.sin(phi), z), dim=-1)
    for ax, ay in ((0.5, 0.5), (0.6, 0.3)):
        d = ggx_d(m, torch.full((n,), ax, dtype=torch.float64), torch.full((n,), ay, dtype=torch.float64))
        assert abs((d * z).mean().item() * 2 * math.pi - 1.0) < 0.01


def test_gltf_visibility_is_height_correlated_smith() -> None:
    wi, wo = hemisphere_directions(32, seed=14), hemisphere_directions(32, seed=15)
    alpha = torch.full((32,), 0.3, dtype=torch.float64)
    expected = smith_g_height_correlated(wi, wo, alpha, alpha) / (4 * wi[:, 2] * wo[:, 2])
    torch.testing.assert_close(gltf_visibility(wi[:, 2], wo[:, 2], alpha), expected)


@pytest.mark.parametrize(("ior", "specular", "tint"), [(1.5, 1.0, (1.0, 1.0, 1.0)), (2.0, 1.0, (1.0, 1.0, 1.0)), (1.0, 1.0, (1.0, 1.0, 1.0)),
                                                     (1.5, 0.5, (1.0, 0.4, 30.0))])
def test_gltf_matches_spec_full_code_at_one_point(ior: float, specular: float, tint: tuple[float, float, float]) -> None:
    # The "full code" of glTF 2.0 Appendix B, written out in scalar Python for one direction pair; KHR_materials_ior
    # replaces its dielectric 0.04 by ((ior - 1) / (ior + 1))^2 (0.04 at the default 1.5), and KHR_materials_specular
    # makes it min(that * specularColor, 1) * specular per channel with f90 = specular.
    f0s = [min(((ior - 1) / (ior + 1)) ** 2 * t, 1.0) * specular for t in tint]
    wi, wo = direction(0.8, 0.1), direction(0.6, 2.5)
    base, metallic, roughness = (0.9, 0.5, 0.2), 0.3, 0.6
    n_dot_l, n_dot_v = 0.8, 0.6
    h = (wi + wo)[0] / (wi + wo)[0].norm()
    n_dot_h, v_dot_h = h[2].item(), (wo[0] @ h).item()
    a = roughness**2
    d = a * a / (math.pi * (n_dot_h**2 * (a * a - 1) + 1) ** 2)
    vis = 1 / (2 * (n_dot_v * math.sqrt(a * a + (1 - a * a) * n_dot_l**2) + n_dot_l * math.sqrt(a * a + (1 - a * a) * n_dot_v**2)))
    fresnel_w = (1 - abs(v_dot_h)) ** 5
    expected = []
    for c, f0 in zip(base, f0s):
        spec = d * vis
        dielectric = c / math.pi + (spec - c / math.pi) * (f0 + (specular - f0) * fresnel_w)
        metal = (c + (1 - c) * fresnel_w) * spec
        expected.append((dielectric + (metal - dielectric) * metallic) * n_dot_l)
    rgb, f90 = dielectric_reflectance(ior, specular, tint)
    ours = gltf_eval(wi, wo, base_color=torch.tensor(base, dtype=torch.float64), metallic=metallic, roughness=roughness, f0=torch.tensor(rgb, dtype=torch.float64), f90=f90)
    torch.testing.assert_close(ours, torch.tensor([expected], dtype=torch.float64))
    if (ior, specular) == (1.5, 1.0):  # the spec's fixed dielectric is the default
        torch.testing.assert_close(gltf_eval(wi, wo, base_color=torch.tensor(base, dtype=torch.float64), metallic=metallic, roughness=roughness), ours)


def test_pdf_integrates_to_valid_fraction() -> None:
    # The GGX reflection pdf integrates to at most 1 (the rest lands below the surface).
    n = 400_000
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(16), dtype=torch.float64)
    z, phi = u[:, 0], 2 * math.pi * u[:, 1]
    wi = torch.stack((torch.sqrt(1 - z * z) * torch.cos(phi), torch.sqrt(1 - z * z) * torch.sin(phi), z), dim=-1)
    wo = direction(0.7).expand(n, 3)
    for alpha in (0.05, 0.3):
        a = torch.full((n,), alpha, dtype=torch.float64)
        total = ggx_reflection_pdf(wi, wo, a, a).mean().item() * 2 * math.pi
        assert total <= 1.0 + 0.02
        if alpha == 0.3:
            assert total > 0.9


def test_charlie_distribution_is_normalised() -> None:
    # Projected-area normalisation of the sheen distribution: integral of D cos(theta_h) is 1.
    cos_h = torch.linspace(0.0, 1.0, 200_001, dtype=torch.float64)
    for alpha in (0.05, 0.3, 1.0):
        d = charlie_d(cos_h, torch.tensor(alpha, dtype=torch.float64))
        integral = 2 * math.pi * torch.trapezoid(d * cos_h, cos_h).item()
        assert abs(integral - 1.0) < 1e-3


def test_lobe_parameters_come_from_eval() -> None:
    assert LOBES["conductor"].parameters == ("eta", "k", "alpha_x", "alpha_y", "film_weight", "film_thickness", "film_ior")
    assert LOBES["coating"].parameters == ("alpha_x", "alpha_y", "ior", "film_weight", "film_thickness", "film_ior")


@pytest.mark.parametrize("lobe", ["coating", "conductor"])
def test_thin_film_colours_the_fresnel_and_vanishes_with_its_weight(lobe: str) -> None:
    """A film over the coating or the metal tints the reflection (unequal RGB where the plain lobe is grey or smooth);
    weight 0, or a film of thickness 0 with weight 1, gives the plain lobe back; its sampler and pdf are the plain ones."""
    from ._support import hemisphere_directions

    wi, wo = hemisphere_directions(64, seed=3), hemisphere_directions(64, seed=4)
    params = {"alpha_x": 0.3, "ior": 1.5} if lobe == "coating" else {"eta": torch.tensor([0.2, 0.9, 1.1], dtype=torch.float64), "k": 3.0, "alpha_x": 0.3}
    plain = LOBES[lobe].eval(wi, wo, params)
    film = {"film_weight": 1.0, "film_thickness": 350.0, "film_ior": 1.4}
    tinted = LOBES[lobe].eval(wi, wo, {**params, **film})
    ratio = tinted / plain.clamp(min=1e-12)
    assert float((ratio.max(-1).values - ratio.min(-1).values)[plain[:, 0] > 1e-4].max()) > 0.2
    torch.testing.assert_close(LOBES[lobe].eval(wi, wo, {**params, **film, "film_weight": 0.0}), plain)
    torch.testing.assert_close(LOBES[lobe].eval(wi, wo, {**params, **film, "film_thickness": 0.0}), plain, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(LOBES[lobe].pdf(wi, wo, {**params, **film}), LOBES[lobe].pdf(wi, wo, params))


def test_gltf_iridescence_replaces_the_fresnel_by_the_film() -> None:
    """``KHR_materials_iridescence`` at factor 1: the dielectric's and the metal's Fresnel are the thin film's reflectance
    (over the dielectric's f0, over the metal's base colour); at factor 0 the BRDF is unchanged; in between, a blend."""
    from neuralbake.material.frame import half_vector
    from neuralbake.material.gltf import gltf_eval
    from neuralbake.material.thin_film import thin_film_reflectance

    from ._support import hemisphere_directions

    wi, wo = hemisphere_directions(32, seed=7), hemisphere_directions(32, seed=8)
    cos = (half_vector(wi, wo) * wo).sum(-1)
    base = torch.tensor([0.9, 0.6, 0.3], dtype=torch.float64)
    film = {"iridescence_ior": 1.4, "iridescence_thickness": 380.0}
    for metallic, f0 in ((1.0, base.expand(32, 3)), (0.0, torch.full((32, 3), 0.04, dtype=torch.float64))):
        params = {"base_color": base, "metallic": metallic, "roughness": 0.4}
        plain = gltf_eval(wi, wo, **params)
        torch.testing.assert_close(gltf_eval(wi, wo, **params, iridescence=0.0, **film), plain)
        full = gltf_eval(wi, wo, **params, iridescence=1.0, **film)
        half = gltf_eval(wi, wo, **params, iridescence=0.5, **film)
        torch.testing.assert_close(half, 0.5 * (plain + full))
        fresnel = thin_film_reflectance(cos, 1.4, 380.0, f0)
        if metallic == 1.0:  # the metal BRDF is Fresnel x specular: their ratio is the film's over Schlick's
            schlick = base + (1 - base) * (1 - cos[:, None]) ** 5
            torch.testing.assert_close(full / plain, fresnel / schlick)
        else:  # the dielectric: lerp(diffuse, specular, F), so F enters linearly
            assert not torch.allclose(full, plain)
    assert LOBES["gltf"].parameters == ("base_color", "metallic", "roughness", "f0", "f90", "iridescence", "iridescence_ior", "iridescence_thickness",
                                        "clearcoat", "clearcoat_roughness", "clearcoat_normal", "sheen_color", "sheen_roughness")


def test_gltf_clearcoat_is_the_extensions_layer() -> None:
    """``KHR_materials_clearcoat``: ``(1 - c F_c) f_base + c F_c D Vis`` with Schlick ``F_c`` (ior 1.5) at N.V."""
    from neuralbake.material.frame import half_vector
    from neuralbake.material.gltf import gltf_eval, gltf_visibility
    from neuralbake.material.microfacet import ggx_d

    from ._support import hemisphere_directions

    wi, wo = hemisphere_directions(32, seed=11), hemisphere_directions(32, seed=12)
    params = {"base_color": torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64), "metallic": 0.4, "roughness": 0.7}
    base = gltf_eval(wi, wo, **params)
    coated = gltf_eval(wi, wo, **params, clearcoat=0.8, clearcoat_roughness=0.3)
    fc = 0.04 + 0.96 * (1 - wo[:, 2]) ** 5
    alpha = torch.full((32,), 0.09, dtype=torch.float64)
    layer = ggx_d(half_vector(wi, wo), alpha, alpha) * gltf_visibility(wi[:, 2], wo[:, 2], alpha) * wi[:, 2]
    expected = (1 - 0.8 * fc)[:, None] * base + (0.8 * fc * layer)[:, None]
    torch.testing.assert_close(coated, expected)
    torch.testing.assert_close(gltf_eval(wi, wo, **params, clearcoat=0.0, clearcoat_roughness=0.3), base)


def test_gltf_sheen_is_the_extensions_layer() -> None:
    """``KHR_materials_sheen``: the Charlie lobe plus the rest scaled by ``min(1 - max(c) E(N.V), 1 - max(c) E(N.L))``."""
    from neuralbake.material.gltf import gltf_eval
    from neuralbake.material.sheen import sheen_albedo, sheen_eval

    from ._support import hemisphere_directions

    wi, wo = hemisphere_directions(32, seed=13), hemisphere_directions(32, seed=14)
    params = {"base_color": torch.tensor([0.3, 0.3, 0.6], dtype=torch.float64), "metallic": 0.0, "roughness": 0.8}
    colour = torch.tensor([0.9, 0.4, 0.2], dtype=torch.float64)
    r = torch.full((32,), 0.5, dtype=torch.float64)
    scale = torch.minimum(1 - 0.9 * sheen_albedo(wo[:, 2], r), 1 - 0.9 * sheen_albedo(wi[:, 2], r))
    expected = gltf_eval(wi, wo, **params) * scale[:, None] + sheen_eval(wi, wo, color=colour, roughness=0.5)
    torch.testing.assert_close(gltf_eval(wi, wo, **params, sheen_color=colour, sheen_roughness=0.5), expected)


def test_gltf_clearcoat_follows_its_own_normal() -> None:
    """The coat is evaluated and sampled about ``clearcoat_normal`` (the vertex normal; no normal map reaches it): its
    value equals the coat of a frame rotated so that normal is +z, and the sampler still matches the pdf."""
    import math

    from neuralbake.material.gltf import gltf_eval, gltf_pdf, gltf_sample

    from ._support import hemisphere_directions

    n = 64
    angle = 0.3
    tilt = torch.tensor([[math.sin(angle), 0.0, math.cos(angle)]], dtype=torch.float64).expand(n, 3)
    rot = torch.tensor([[math.cos(angle), 0.0, -math.sin(angle)], [0.0, 1.0, 0.0], [math.sin(angle), 0.0, math.cos(angle)]], dtype=torch.float64)
    wi, wo = hemisphere_directions(n, seed=21, min_cos=0.4), hemisphere_directions(n, seed=22, min_cos=0.4)
    params = {"base_color": torch.tensor([0.3, 0.3, 0.3], dtype=torch.float64), "metallic": 0.0, "roughness": 0.9}
    # the same coat about +z, seen in directions rotated by the tilt (rot maps the tilted normal to +z)
    wi_r, wo_r = wi @ rot.T, wo @ rot.T
    ok = (wi_r[:, 2] > 0) & (wo_r[:, 2] > 0)
    coat_tilted = gltf_eval(wi, wo, base_color=0.0, metallic=1.0, roughness=1.0, clearcoat=1.0, clearcoat_roughness=0.2, clearcoat_normal=tilt)
    coat_flat = gltf_eval(wi_r, wo_r, base_color=0.0, metallic=1.0, roughness=1.0, clearcoat=1.0, clearcoat_roughness=0.2)
    base_tilted = gltf_eval(wi, wo, base_color=0.0, metallic=1.0, roughness=1.0)
    base_flat = gltf_eval(wi_r, wo_r, base_color=0.0, metallic=1.0, roughness=1.0)
    fc = 0.04 + 0.96 * (1 - wo_r[:, 2:]) ** 5  # the coat's Fresnel at the view angle about its own normal
    # the coat's own term (coated minus the base it lets through), over the cosine about the coat normal
    term_tilted = (coat_tilted - (1 - fc) * base_tilted) / wi_r[:, 2:]
    term_flat = (coat_flat - (1 - fc) * base_flat) / wi_r[:, 2:]
    assert bool(ok.sum() > n // 2) and float(term_flat[ok].abs().max()) > 0
    torch.testing.assert_close(term_tilted[ok], term_flat[ok])
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    coat = {"clearcoat": 1.0, "clearcoat_roughness": 0.2, "clearcoat_normal": tilt}
    wi_s, pdf = gltf_sample(wo, u, **params, **coat)
    torch.testing.assert_close(pdf, gltf_pdf(wi_s, wo, **params, **coat))
