"""Shared test support for the material lobes: parameter cases, direction sets, Monte Carlo
directional albedo and the chi-square test of a sampler against its pdf."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from neuralbake.material import LOBES, conductor_ior

Sampler = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Density = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def lobe_cases(dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu") -> list[tuple[str, str, dict]]:
    """``(case id, lobe name, params)`` covering every lobe, isotropic and anisotropic GGX."""

    def t(values: object) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    cu_eta, cu_k = conductor_ior("Cu", dtype=dtype, device=device)
    au_eta, au_k = conductor_ior("Au", dtype=dtype, device=device)
    fe_eta, fe_k = conductor_ior("Fe", dtype=dtype, device=device)
    return [
        ("lambert", "lambert", {"albedo": t([0.8, 0.5, 0.2])}),
        ("conductor-cu", "conductor", {"eta": cu_eta, "k": cu_k, "alpha_x": 0.3}),
        ("conductor-au-aniso", "conductor", {"eta": au_eta, "k": au_k, "alpha_x": 0.2, "alpha_y": 0.5}),
        ("conductor-fe-rough", "conductor", {"eta": fe_eta, "k": fe_k, "alpha_x": 0.7}),
        ("coating", "coating", {"alpha_x": 0.25, "ior": 1.5}),
        ("coating-aniso", "coating", {"alpha_x": 0.4, "alpha_y": 0.15, "ior": 1.6}),
        ("sheen", "sheen", {"color": t([0.9, 0.8, 0.7]), "roughness": 0.5}),
        ("sheen-rough", "sheen", {"color": 1.0, "roughness": 1.0}),
        ("gltf-dielectric", "gltf", {"base_color": t([0.9, 0.6, 0.3]), "metallic": 0.0, "roughness": 0.5}),
        ("gltf-metal", "gltf", {"base_color": t([0.95, 0.64, 0.54]), "metallic": 1.0, "roughness": 0.4}),
        ("gltf-mixed", "gltf", {"base_color": t([0.5, 0.7, 0.9]), "metallic": 0.5, "roughness": 0.7}),
        ("gltf-sheen", "gltf", {"base_color": t([0.2, 0.2, 0.5]), "metallic": 0.0, "roughness": 0.8, "sheen_color": t([0.9, 0.7, 0.6]), "sheen_roughness": 0.5}),
        ("gltf-clearcoat", "gltf", {"base_color": t([0.6, 0.1, 0.1]), "metallic": 0.3, "roughness": 0.6, "clearcoat": 1.0, "clearcoat_roughness": 0.45}),
    ]


def hemisphere_directions(
    n: int, seed: int = 0, dtype: torch.dtype = torch.float64, min_cos: float = 0.05, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``n`` unit directions spread over the upper hemisphere with ``cos theta >= min_cos``, ``[n, 3]``.

    Uniform in ``cos theta`` (so uniform in solid angle on that cap); drawn from ``generator`` when
    given (successive calls continue its stream), else from a fresh one seeded with ``seed``.
    """
    g = generator if generator is not None else torch.Generator().manual_seed(seed)
    u = torch.rand(n, 2, generator=g, dtype=torch.float64)
    z = min_cos + (1.0 - min_cos) * u[:, 0]
    r = torch.sqrt(1.0 - z * z)
    phi = 2.0 * math.pi * u[:, 1]
    return torch.stack((r * torch.cos(phi), r * torch.sin(phi), z), dim=-1).to(dtype)


def direction(cos_theta: float, phi: float = 0.3, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """One unit direction ``[1, 3]`` at the given polar cosine and azimuth."""
    s = math.sqrt(max(0.0, 1.0 - cos_theta * cos_theta))
    return torch.tensor([[s * math.cos(phi), s * math.sin(phi), cos_theta]], dtype=dtype)


def directional_albedo(lobe: str, params: dict, wo: torch.Tensor, n: int = 4096, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance-sampled ``E(wo) = mean(eval / pdf)`` per RGB channel and its standard error, ``[3]`` each."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 2, generator=g, dtype=wo.dtype)
    wo_n = wo.expand(n, 3)
    wi, pdf = LOBES[lobe].sample(wo_n, u, params)
    value = LOBES[lobe].eval(wi, wo_n, params)
    ok = (pdf > 0.0)[:, None]
    weight = torch.where(ok, value / torch.where(ok, pdf[:, None], torch.ones_like(value)), torch.zeros_like(value))
    return weight.mean(dim=0), weight.std(dim=0) / math.sqrt(n)


def chi2_sampler_pvalue(
    sample: Sampler,
    pdf: Density,
    wo: torch.Tensor,
    n_samples: int = 200_000,
    n_cos: int = 10,
    n_phi: int = 20,
    seed: int = 0,
    nodes: int = 6,
    *,
    sphere: bool = False,
) -> float:
    """p-value of Pearson's chi-square test of ``sample`` (given ``wo`` ``[1, 3]``) against ``pdf``.

    Valid samples (``pdf > 0``) are binned in ``(cos theta, phi)`` cells of the upper hemisphere
    (``sphere``: of the whole sphere);
    the expected count of a cell is ``n_samples`` times the integral of ``pdf`` over it
    (Gauss-Legendre, ``nodes`` x ``nodes`` per cell, in the measure ``d cos(theta) d phi``, which
    is solid angle). Cells expecting fewer than 5 samples are pooled into one bin, as in Mitsuba's
    chi-square tests. Invalid samples have zero density, so the expectations sum to the valid
    fraction and the test checks that fraction too.
    """
    from scipy.stats import chi2

    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n_samples, 2, generator=g, dtype=torch.float64)
    wi, p = sample(wo.expand(n_samples, 3), u)
    wi = wi[p > 0.0]
    low_cos = -1.0 if sphere else 0.0  # sphere: cells over both hemispheres (transmission)
    span = 1.0 - low_cos
    cos = torch.clamp(wi[:, 2], low_cos, 1.0)
    phi = torch.remainder(torch.atan2(wi[:, 1], wi[:, 0]), 2.0 * math.pi)
    i_cos = torch.clamp(((cos - low_cos) / span * n_cos).long(), max=n_cos - 1)
    i_phi = torch.clamp((phi / (2.0 * math.pi) * n_phi).long(), max=n_phi - 1)
    observed = torch.bincount(i_cos * n_phi + i_phi, minlength=n_cos * n_phi).double().numpy()

    x, w = np.polynomial.legendre.leggauss(nodes)
    t = torch.tensor((x + 1.0) / 2.0)
    wt = torch.tensor(w / 2.0)
    cell_c = torch.arange(n_cos, dtype=torch.float64)
    cell_p = torch.arange(n_phi, dtype=torch.float64)
    # Node coordinates [n_cos, n_phi, nodes, nodes].
    c = (low_cos + span * (cell_c[:, None] + t[None, :]) / n_cos)[:, None, :, None].expand(n_cos, n_phi, nodes, nodes)
    f = ((cell_p[:, None] + t[None, :]) * (2.0 * math.pi / n_phi))[None, :, None, :].expand(n_cos, n_phi, nodes, nodes)
    s = torch.sqrt(torch.clamp(1.0 - c * c, min=0.0))
    dirs = torch.stack((s * torch.cos(f), s * torch.sin(f), c), dim=-1).reshape(-1, 3)
    density = pdf(dirs, wo.expand(dirs.shape[0], 3)).reshape(n_cos, n_phi, nodes, nodes)
    weights = (wt[:, None] * wt[None, :]) * ((span / n_cos) * (2.0 * math.pi / n_phi))
    expected = (n_samples * (density * weights).sum(dim=(-1, -2))).reshape(-1).numpy()

    low = expected < 5.0
    obs = list(observed[~low])
    exp = list(expected[~low])
    if expected[low].sum() == 0.0 and observed[low].sum() > 0.0:
        return 0.0  # samples where the pdf says none can land
    if low.any() and expected[low].sum() > 0.0:
        obs.append(observed[low].sum())
        exp.append(expected[low].sum())
    obs_a, exp_a = np.asarray(obs), np.asarray(exp)
    stat = float(((obs_a - exp_a) ** 2 / exp_a).sum())
    return float(chi2.sf(stat, len(exp_a) - 1))
