"""Tone maps: the fitted parametric curves invert exactly, and every curve and its learnable
inverse pass gradcheck in float64."""

from __future__ import annotations

import torch

from neuralbake.render.tonemap import (
    InverseToneMap,
    inverse_tone_map_first_order,
    inverse_tone_map_second_order,
    tone_map,
    tone_map_first_order,
    tone_map_second_order,
)


def test_inverse_tone_maps_invert_the_forward_curves() -> None:
    h = torch.linspace(0.0, 8.0, 50, dtype=torch.float64)
    beta, gamma = torch.tensor(0.9, dtype=torch.float64), torch.tensor(0.12, dtype=torch.float64)
    torch.testing.assert_close(inverse_tone_map_first_order(tone_map_first_order(h, beta, gamma), beta, gamma), h)
    a, b, c, d = (torch.tensor(v / 2.51, dtype=torch.float64) for v in (0.03, 2.43, 0.59, 0.14))  # ACES (Narkowicz)
    cl = tone_map_second_order(h, a, b, c, d)
    torch.testing.assert_close(inverse_tone_map_second_order(cl, a, b, c, d), h)
    # the seed's closed-form ACES inverse is the special case
    x = torch.linspace(0.0, 0.95, 20, dtype=torch.float64)
    aces_inverse = (0.0062 - 0.1213 * x - 0.0021 * torch.sqrt(9 + 13702 * x - 10127 * x * x)) / (x - 1.03292)
    exact = (0.03 - 0.59 * x - torch.sqrt(0.0009 + 1.3702 * x - 1.0127 * x * x)) / (2.0 * (2.43 * x - 2.51))
    torch.testing.assert_close(inverse_tone_map_second_order(x, a, b, c, d), exact)
    torch.testing.assert_close(exact, aces_inverse, atol=1e-3, rtol=3e-2)  # the slide rounds its constants


def test_inverse_tone_map_gradcheck() -> None:
    cl = torch.linspace(0.02, 0.97, 6, dtype=torch.float64).requires_grad_()
    p1 = tuple(torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (0.9, 0.2))
    assert torch.autograd.gradcheck(inverse_tone_map_first_order, (cl, *p1))
    p2 = tuple(torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (0.05, 0.9, 0.3, 0.06))
    assert torch.autograd.gradcheck(inverse_tone_map_second_order, (cl, *p2))
    for order in (1, 2):
        tm = InverseToneMap(order)
        assert torch.autograd.gradcheck(lambda raw, c: _with_raw(tm, raw, c), (tm.raw.detach().clone().requires_grad_(), cl))
        codes = torch.linspace(0.0, 1.0, 11, dtype=torch.float64)
        torch.testing.assert_close(tm.encode(tm(codes[:-1])), codes[:-1], atol=1e-9, rtol=1e-9)


def _with_raw(tm: InverseToneMap, raw: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    saved = tm.raw
    try:
        del tm.raw
        tm.raw = raw  # plain tensor attribute so gradcheck can perturb it
        return tm(c)
    finally:
        del tm.raw
        tm.raw = saved


def test_tone_map_keeps_float64_and_promotes_half_and_zeroes_nan() -> None:
    hdr = torch.tensor([0.0, 0.5, float("nan"), 3.0], dtype=torch.float64)
    out = tone_map(hdr, operator="reinhard")
    assert out.dtype == torch.float64 and float(out[2]) == 0.0
    assert tone_map(hdr.half(), operator="aces").dtype == torch.float32
    torch.testing.assert_close(tone_map(hdr, exposure=1.0), tone_map(hdr * 2.0))
