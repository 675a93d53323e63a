"""Cross-checks against Mitsuba 3 (``scalar_rgb`` variant), code nobody on this project wrote.

Same random direction pairs on both sides; relative error < 1e-3 on ``f cos`` and on the pdf.
Mitsuba's ``si.wi`` is our ``wo`` (view) and its ``wo`` argument is our ``wi`` (light); its
``eval`` also returns ``f * cos`` of that light direction, so the values compare directly.

Compared: ``diffuse`` vs Lambert; ``roughconductor`` (GGX, visible-normal sampling, named and
explicit ``eta``/``k``, isotropic and anisotropic) vs our conductor; ``roughplastic`` with a black
diffuse layer (its specular lobe alone; eval and pdf) and ``roughdielectric``'s reflection (eval
only: its pdf includes the Fresnel probability of choosing reflection) vs our coating.
Not compared, because the models differ: Mitsuba's ``principled`` is Disney's BSDF (retro-
reflective diffuse, specular tint, its own sheen and Fresnel blend), not glTF Appendix B's
``fresnel_mix``; and Mitsuba has no Charlie sheen lobe.
"""

from __future__ import annotations

import pytest
import torch

from neuralbake.material import LOBES, conductor_ior

from ._support import hemisphere_directions

try:
    import mitsuba as mi
except (ImportError, OSError) as exc:  # OSError: a wheel whose native libraries cannot load
    mi = None
    _SKIP_REASON = f"`import mitsuba` failed ({exc}); pip install mitsuba==3.9.1 to run the Mitsuba cross-checks"
else:
    _SKIP_REASON = ""

pytestmark = [pytest.mark.mitsuba, pytest.mark.skipif(mi is None, reason=_SKIP_REASON)]

TOLERANCE = 1e-3
N_PAIRS = 256


@pytest.fixture(scope="module")
def directions() -> tuple[torch.Tensor, torch.Tensor]:
    return hemisphere_directions(N_PAIRS, seed=31), hemisphere_directions(N_PAIRS, seed=32)


def _mitsuba_eval_pdf(bsdf_dict: dict, wi: torch.Tensor, wo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mi.set_variant("scalar_rgb")
    bsdf = mi.load_dict(bsdf_dict)
    ctx = mi.BSDFContext()
    values, pdfs = [], []
    for light, view in zip(wi.tolist(), wo.tolist(), strict=True):
        si = mi.SurfaceInteraction3f()
        si.wi = mi.Vector3f(*view)
        value = bsdf.eval(ctx, si, mi.Vector3f(*light))
        values.append([value[0], value[1], value[2]])
        pdfs.append(float(bsdf.pdf(ctx, si, mi.Vector3f(*light))))
    return torch.tensor(values, dtype=torch.float64), torch.tensor(pdfs, dtype=torch.float64)


def max_relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """Largest ``|ours - theirs| / |theirs|`` (theirs floored at 1e-6 where it is ~0)."""
    return ((ours - theirs).abs() / theirs.abs().clamp_min(1e-6)).max().item()


def _rgb(values: tuple[float, float, float] | torch.Tensor) -> dict:
    return {"type": "rgb", "value": [float(v) for v in values]}


def test_lambert_matches_diffuse(directions: tuple[torch.Tensor, torch.Tensor]) -> None:
    wi, wo = directions
    albedo = torch.tensor([0.8, 0.5, 0.2], dtype=torch.float64)
    theirs, their_pdf = _mitsuba_eval_pdf({"type": "diffuse", "reflectance": _rgb(albedo)}, wi, wo)
    assert max_relative_error(LOBES["lambert"].eval(wi, wo, {"albedo": albedo}), theirs) < TOLERANCE
    assert max_relative_error(LOBES["lambert"].pdf(wi, wo, {}), their_pdf) < TOLERANCE


@pytest.mark.parametrize(
    ("material", "alpha_x", "alpha_y"),
    [("Cu", 0.3, None), ("Au", 0.25, 0.08), ("Al", 0.1, None), ("Ag", 0.5, 0.2), ("Fe", 0.6, 0.35)],
)
def test_conductor_matches_roughconductor(
    directions: tuple[torch.Tensor, torch.Tensor], material: str, alpha_x: float, alpha_y: float | None
) -> None:
    wi, wo = directions
    eta, k = conductor_ior(material, dtype=torch.float64)
    bsdf = {"type": "roughconductor", "distribution": "ggx", "sample_visible": True}
    if material == "Fe":  # Mitsuba ships no iron data: pass our values explicitly
        bsdf |= {"eta": _rgb(eta), "k": _rgb(k)}
    else:
        bsdf["material"] = material
    bsdf |= {"alpha": alpha_x} if alpha_y is None else {"alpha_u": alpha_x, "alpha_v": alpha_y}
    theirs, their_pdf = _mitsuba_eval_pdf(bsdf, wi, wo)
    params = {"eta": eta, "k": k, "alpha_x": alpha_x, "alpha_y": alpha_y}
    assert max_relative_error(LOBES["conductor"].eval(wi, wo, params), theirs) < TOLERANCE
    assert max_relative_error(LOBES["conductor"].pdf(wi, wo, params), their_pdf) < TOLERANCE


@pytest.mark.parametrize("material", ["Cu", "Au", "Al", "Ag"])
def test_conductor_presets_are_mitsubas(material: str) -> None:
    mi.set_variant("scalar_rgb")
    params = mi.traverse(mi.load_dict({"type": "roughconductor", "material": material}))
    eta, k = conductor_ior(material, dtype=torch.float64)
    torch.testing.assert_close(eta, torch.tensor([float(v) for v in params["eta.value"]], dtype=torch.float64), rtol=1e-6, atol=0)
    torch.testing.assert_close(k, torch.tensor([float(v) for v in params["k.value"]], dtype=torch.float64), rtol=1e-6, atol=0)


@pytest.mark.parametrize(("alpha", "ior"), [(0.2, 1.5), (0.45, 1.33)])
def test_coating_matches_roughplastic_specular(directions: tuple[torch.Tensor, torch.Tensor], alpha: float, ior: float) -> None:
    wi, wo = directions
    bsdf = {
        "type": "roughplastic",
        "distribution": "ggx",
        "alpha": alpha,
        "int_ior": ior,
        "ext_ior": 1.0,
        "diffuse_reflectance": _rgb((0.0, 0.0, 0.0)),
    }
    theirs, their_pdf = _mitsuba_eval_pdf(bsdf, wi, wo)
    params = {"alpha_x": alpha, "ior": ior}
    assert max_relative_error(LOBES["coating"].eval(wi, wo, params), theirs) < TOLERANCE
    assert max_relative_error(LOBES["coating"].pdf(wi, wo, params), their_pdf) < TOLERANCE


def test_anisotropic_coating_matches_roughdielectric_reflection(directions: tuple[torch.Tensor, torch.Tensor]) -> None:
    wi, wo = directions
    bsdf = {"type": "roughdielectric", "distribution": "ggx", "alpha_u": 0.4, "alpha_v": 0.15, "int_ior": 1.6, "ext_ior": 1.0}
    theirs, _ = _mitsuba_eval_pdf(bsdf, wi, wo)
    ours = LOBES["coating"].eval(wi, wo, {"alpha_x": 0.4, "alpha_y": 0.15, "ior": 1.6})
    assert max_relative_error(ours, theirs) < TOLERANCE
