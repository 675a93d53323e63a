"""Thin-film interference against exact optics: the Airy reflectance of a film on a dielectric, computed with
complex amplitudes at normal incidence (where polarisation does not matter) and integrated over the visible
spectrum against the CIE 1931 colour matching functions, must give the colour the closed-form Fourier evaluation
gives; plus its limits (no film, total internal reflection) and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from neuralbake.material.fresnel import fresnel_dielectric
from neuralbake.material.thin_film import XYZ_TO_REC709, thin_film_reflectance

F64 = torch.float64
WAVELENGTHS = torch.arange(360.0, 830.5, 0.5, dtype=F64)


def _lobe(lam: torch.Tensor, centre: float, below: float, above: float) -> torch.Tensor:
    sigma = torch.where(lam < centre, below, above)
    return torch.exp(-0.5 * ((lam - centre) / sigma) ** 2)


def _cmf(lam: torch.Tensor) -> torch.Tensor:
    """CIE 1931 2-degree colour matching functions ``[L, 3]``, from Wyman, Sloan and Shirley's (2013) multi-lobe fit
    (an independent fit from the Gaussian one the implementation uses; they agree to about 1 %)."""
    x = 1.056 * _lobe(lam, 599.8, 37.9, 31.0) + 0.362 * _lobe(lam, 442.0, 16.0, 26.7) - 0.065 * _lobe(lam, 501.1, 20.4, 26.2)
    y = 0.821 * _lobe(lam, 568.8, 46.9, 40.5) + 0.286 * _lobe(lam, 530.9, 16.3, 31.1)
    z = 1.217 * _lobe(lam, 437.0, 11.8, 36.0) + 0.681 * _lobe(lam, 459.0, 26.0, 13.8)
    return torch.stack((x, y, z), -1)


def _airy_normal(n_film: float, n_base: float, d: float, lam: torch.Tensor) -> torch.Tensor:
    """Exact reflectance spectrum of air / film / base at normal incidence (complex amplitudes)."""
    r12 = (1.0 - n_film) / (1.0 + n_film)
    r23 = (n_film - n_base) / (n_film + n_base)
    delta = 4.0 * math.pi * n_film * d / lam
    e = torch.polar(torch.ones_like(delta), delta)
    r = (r12 + r23 * e) / (1.0 + r12 * r23 * e)
    return r.abs() ** 2


def _colour(spectrum: torch.Tensor, grey: float) -> torch.Tensor:
    """The implementation's colour convention: the flat part ``grey`` as is, the rest from XYZ to Rec.709."""
    cmf = _cmf(WAVELENGTHS)
    step = float(WAVELENGTHS[1] - WAVELENGTHS[0])
    xyz = ((spectrum - grey)[:, None] * cmf).sum(0) * step / (cmf[:, 1].sum() * step)
    return grey + torch.tensor(XYZ_TO_REC709, dtype=F64) @ xyz


@pytest.mark.parametrize(("n_film", "n_base", "thickness"), [(1.33, 1.5, 250.0), (1.6, 1.5, 400.0), (1.45, 2.0, 320.0), (2.0, 1.5, 150.0), (1.33, 1.8, 600.0)])
def test_matches_the_exact_airy_spectrum_at_normal_incidence(n_film: float, n_base: float, thickness: float) -> None:
    spectrum = _airy_normal(n_film, n_base, thickness, WAVELENGTHS)
    # the flat (DC) part of the Airy series: the spectrum's mean over a whole period of its phase
    phase = torch.linspace(0.0, 2.0 * math.pi, 4097, dtype=F64)[:-1]
    r12, r23 = (1 - n_film) / (1 + n_film), (n_film - n_base) / (n_film + n_base)
    e = torch.polar(torch.ones_like(phase), phase)
    grey = float((((r12 + r23 * e) / (1 + r12 * r23 * e)).abs() ** 2).mean())
    expected = _colour(spectrum, grey).clamp(min=0.0)  # colours outside Rec.709 clipped, as the implementation does
    f0 = ((n_base - 1.0) / (n_base + 1.0)) ** 2
    ours = thin_film_reflectance(torch.ones(1, dtype=F64), n_film, thickness, torch.full((3,), f0, dtype=F64))[0]
    assert float((ours - expected).abs().max()) < 0.01, (ours.tolist(), expected.tolist())
    # and the films are coloured: the check would not pass with a grey answer
    assert float(expected.max() - expected.min()) > 0.02


def test_no_film_is_the_base_and_grazing_inside_reflects_all() -> None:
    cos = torch.tensor([1.0, 0.7, 0.3], dtype=F64)
    f0 = torch.tensor([0.04, 0.2, 0.5], dtype=F64)
    bare = thin_film_reflectance(cos, 1.4, 0.0, f0)
    n_base = (1 + f0.sqrt()) / (1 - f0.sqrt())
    torch.testing.assert_close(bare, fresnel_dielectric(cos[:, None], n_base[None, :]), atol=1e-5, rtol=0)
    # a film of lower index than the medium above: total internal reflection at grazing angles
    total = thin_film_reflectance(torch.tensor([0.1], dtype=F64), 1.1, 300.0, f0, outside_ior=1.5)
    torch.testing.assert_close(total, torch.ones(1, 3, dtype=F64))


def test_gradients() -> None:
    gen = torch.Generator().manual_seed(0)
    cos = (torch.rand(5, generator=gen, dtype=F64) * 0.8 + 0.15).requires_grad_(True)
    ior = torch.full((5,), 1.4, dtype=F64, requires_grad=True)
    d = torch.full((5,), 310.0, dtype=F64, requires_grad=True)
    f0 = torch.tensor([0.05, 0.3, 0.6], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda c, n, t, f: thin_film_reflectance(c, n, t, f), (cos, ior, d, f0))
