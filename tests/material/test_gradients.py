"""Autograd checks (float64, tiny inputs): analytic gradients of every lobe's ``eval`` with respect
to its parameters match central finite differences, and so do those of a reparameterised sample."""

from __future__ import annotations

import torch
from torch.autograd import gradcheck

from neuralbake.material import coating_eval, conductor_eval, conductor_sample, gltf_eval, lambert_eval, sheen_eval

from ._support import hemisphere_directions

N = 3
WI = hemisphere_directions(N, seed=21, min_cos=0.15)
WO = hemisphere_directions(N, seed=22, min_cos=0.15)


def _param(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).reshape(N, -1).squeeze(-1).clone().requires_grad_(True)


def test_lambert_gradcheck() -> None:
    albedo = _param(0.2, 0.5, 0.8, 0.3, 0.4, 0.1, 0.9, 0.7, 0.6)
    assert gradcheck(lambda a: lambert_eval(WI, WO, albedo=a), (albedo,))


def test_conductor_gradcheck() -> None:
    eta = _param(0.2, 0.9, 1.1, 0.3, 0.4, 1.4, 2.9, 2.9, 2.6)
    k = _param(3.9, 2.5, 2.1, 4.0, 2.4, 1.6, 3.1, 2.9, 2.8)
    alpha_x = _param(0.2, 0.4, 0.7)
    alpha_y = _param(0.3, 0.15, 0.7)
    assert gradcheck(lambda e, kk, ax, ay: conductor_eval(WI, WO, eta=e, k=kk, alpha_x=ax, alpha_y=ay), (eta, k, alpha_x, alpha_y))


def test_coating_gradcheck() -> None:
    alpha = _param(0.2, 0.35, 0.6)
    ior = _param(1.3, 1.5, 1.8)
    assert gradcheck(lambda a, n: coating_eval(WI, WO, alpha_x=a, ior=n), (alpha, ior))


def test_sheen_gradcheck() -> None:
    color = _param(0.9, 0.8, 0.7, 0.2, 0.3, 0.4, 1.0, 1.0, 1.0)
    roughness = _param(0.3, 0.6, 0.9)
    assert gradcheck(lambda c, r: sheen_eval(WI, WO, color=c, roughness=r), (color, roughness))


def test_gltf_gradcheck() -> None:
    base = _param(0.9, 0.6, 0.3, 0.1, 0.5, 0.9, 0.95, 0.64, 0.54)
    metallic = _param(0.0, 0.4, 1.0)
    roughness = _param(0.3, 0.6, 0.9)
    assert gradcheck(lambda b, m, r: gltf_eval(WI, WO, base_color=b, metallic=m, roughness=r), (base, metallic, roughness))
    f0 = _param(0.04, 0.1, 0.2)
    assert gradcheck(lambda b, f: gltf_eval(WI, WO, base_color=b, metallic=0.0, roughness=0.5, f0=f), (base, f0))  # KHR_materials_ior's reflectance


def test_eval_gradcheck_wrt_directions() -> None:
    wi = WI.clone().requires_grad_(True)
    wo = WO.clone().requires_grad_(True)
    assert gradcheck(lambda a, b: conductor_eval(a, b, eta=1.2, k=3.0, alpha_x=0.3, alpha_y=0.5), (wi, wo))


def test_visible_normal_sample_is_differentiable_in_roughness() -> None:
    u = torch.tensor([[0.2, 0.7], [0.6, 0.1], [0.9, 0.45]], dtype=torch.float64)
    alpha_x = _param(0.2, 0.4, 0.7)
    alpha_y = _param(0.3, 0.15, 0.7)
    assert gradcheck(lambda ax, ay: conductor_sample(WO, u, alpha_x=ax, alpha_y=ay), (alpha_x, alpha_y))
