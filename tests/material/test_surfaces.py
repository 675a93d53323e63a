"""The Standard Surface / OpenPBR building blocks beside the lobes: the sheen layered by albedo
scaling (:mod:`neuralbake.material.surfaces`, with :func:`~neuralbake.material.sheen.sheen_albedo`),
Gulbrandsen's metal mapping (:func:`~neuralbake.material.fresnel.artistic_ior`) and MaterialX's
roughness to GGX alphas (:func:`~neuralbake.material.microfacet.roughness_anisotropy`)."""

from __future__ import annotations

import math

import torch

from neuralbake.material import fresnel_conductor, layer
from neuralbake.material.fresnel import artistic_ior
from neuralbake.material.microfacet import roughness_anisotropy
from neuralbake.material.sheen import sheen_albedo
from neuralbake.material.surfaces import SheenLayer

from ._support import hemisphere_directions


def test_artistic_ior_round_trip() -> None:
    g = torch.Generator().manual_seed(6)
    r = torch.rand(64, 3, generator=g, dtype=torch.float64) * 0.99
    edge = torch.rand(64, 3, generator=g, dtype=torch.float64)
    n, k = artistic_ior(r, edge)
    assert (n > 0.0).all() and (k >= 0.0).all()
    f0 = fresnel_conductor(torch.ones(64, 1, dtype=torch.float64), n, k)
    assert torch.allclose(f0, r, atol=1e-9)
    # Closed form at normal incidence too.
    assert torch.allclose(((n - 1) ** 2 + k**2) / ((n + 1) ** 2 + k**2), r, atol=1e-12)


def test_roughness_anisotropy_matches_materialx() -> None:
    r = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    a = torch.tensor([0.0, 0.75, 0.5], dtype=torch.float64)
    ax, ay = roughness_anisotropy(r, a)
    assert torch.allclose(ax[:2], torch.tensor([0.25, 0.5], dtype=torch.float64))
    assert torch.allclose(ay[:2], torch.tensor([0.25, 0.125], dtype=torch.float64))
    assert (ax[2:] > 0.0).all() and (ay[2:] > 0.0).all()


def test_sheen_layer_scales_base_and_samples_its_own_pdf() -> None:
    g = torch.Generator().manual_seed(8)
    n = 20000
    dtype = torch.float64
    base = layer("lambert", {"albedo": torch.tensor([0.9, 0.9, 0.9], dtype=dtype)})
    weight, roughness = torch.ones(n, dtype=dtype), torch.full((n,), 0.6, dtype=dtype)
    colour = torch.tensor([[1.0, 1.0, 1.0]], dtype=dtype).expand(n, 3)
    wi, wo = hemisphere_directions(64, generator=g, dtype=dtype), hemisphere_directions(64, generator=g, dtype=dtype)
    off = SheenLayer(base, torch.zeros(64, dtype=dtype), colour[:64], roughness[:64])
    assert torch.allclose(off.eval(wi, wo), base.eval(wi, wo))
    sheen = SheenLayer(base, weight, colour, roughness)
    albedo = sheen_albedo(torch.linspace(0.0, 1.0, 9, dtype=dtype), torch.full((9,), 0.6, dtype=dtype))
    assert (albedo > 0.0).all() and (albedo <= 1.0).all()
    for cos_o in (0.9, 0.3):
        wo = torch.tensor([[math.sqrt(1.0 - cos_o**2), 0.0, cos_o]], dtype=dtype).expand(n, 3)
        sampled, pdf = sheen.sample(wo, torch.rand(n, 2, generator=g, dtype=dtype))
        assert torch.allclose(pdf, sheen.pdf(sampled, wo))
        importance = (sheen.eval(sampled, wo) / pdf[:, None]).mean(dim=0)
        uniform = hemisphere_directions(n, generator=g, dtype=dtype)  # cos >= 0.05: uniform on that cap, density 1 / (2 pi 0.95)
        reference = (sheen.eval(uniform, wo) * (2.0 * math.pi * 0.95)).mean(dim=0)
        assert torch.allclose(importance, reference, rtol=0.05, atol=0.02), (importance, reference)
        assert (importance <= 1.0).all()
