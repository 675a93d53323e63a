"""The quantisers: exact stored codes, straight-through gradients that are the identity, a soft
quantiser that passes gradcheck in float64, and the storage formats' round trips."""

from __future__ import annotations

import torch

from neuralbake.nn.quantize import (
    codes_to_latents,
    dequantize_latents_affine_u8,
    fake_quantize_int8,
    fake_quantize_latents,
    latent_codes,
    quantize_hard,
    quantize_int8,
    quantize_latents_affine_u8,
    quantize_soft,
    quantize_ste,
)


def test_quantizers_are_deterministic_and_store_exact_codes() -> None:
    x = torch.rand(257, generator=torch.Generator().manual_seed(1))
    for fn in (lambda t: quantize_ste(t, 8), lambda t: quantize_soft(t, 8, 20.0)):
        assert torch.equal(fn(x), fn(x.clone()))
    hard = quantize_hard(x, 8)
    codes = hard * 255.0
    assert torch.equal(codes, torch.round(codes)) and bool((codes >= 0).all() and (codes <= 255).all())
    assert torch.equal(quantize_ste(x, 8), hard)  # STE forward is the hard rounding
    at_codes = torch.arange(256, dtype=torch.float64) / 255.0
    torch.testing.assert_close(quantize_soft(at_codes, 8, 5.0), at_codes)  # exact at the codes
    away = (torch.frac(x.double() * 255.0) - 0.5).abs() > 0.05  # not at a step's midpoint
    sharp = quantize_soft(x.double(), 8, 400.0)
    assert (sharp - hard.double())[away].abs().max() < 1e-6  # sharp -> hard rounding


def test_ste_gradient_is_identity_and_soft_quantizer_gradcheck() -> None:
    x = torch.rand(9, dtype=torch.float64, requires_grad=True)
    quantize_ste(x, 8).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    # keep the points away from code midpoints/boundaries where the finite differences straddle a floor()
    y = ((torch.arange(7, dtype=torch.float64) * 31 + 10 + torch.linspace(0.2, 0.8, 7)) / 255.0).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: quantize_soft(t, 8, 3.0), (y,), eps=1e-7, atol=1e-5)


def test_fake_quantize_latents_round_matches_the_stored_codes_with_identity_gradient() -> None:
    latents = (torch.rand(40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 2.4 - 1.2).requires_grad_()
    out = fake_quantize_latents(latents, 4, "round")
    torch.testing.assert_close(out.detach().float(), codes_to_latents(latent_codes(latents, 4), 4))
    out.sum().backward()
    inside = latents.detach().abs() < 1.0  # the clamp stops the gradient outside [-1, 1]
    torch.testing.assert_close(latents.grad, inside.to(torch.float64))


def test_int8_weights_store_what_the_fake_quantizer_computes() -> None:
    weight = torch.randn(6, 5, generator=torch.Generator().manual_seed(3), requires_grad=True)
    codes, scale = quantize_int8(weight)
    assert codes.dtype == torch.int8 and int(codes.abs().max()) == 127
    torch.testing.assert_close(fake_quantize_int8(weight).detach(), codes.float() * scale, rtol=0, atol=0)
    fake_quantize_int8(weight).sum().backward()
    torch.testing.assert_close(weight.grad, torch.ones_like(weight))


def test_affine_u8_latents_round_trip_within_half_a_step() -> None:
    latent = torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(4)) * torch.tensor([0.1, 1.0, 10.0])
    codes, scale, offset = quantize_latents_affine_u8(latent)
    assert codes.dtype == torch.uint8 and scale.shape == offset.shape == (3,)
    assert bool((codes.amin(dim=(0, 1)) == 0).all() and (codes.amax(dim=(0, 1)) == 255).all())
    error = (dequantize_latents_affine_u8(codes, scale, offset) - latent).abs()
    assert bool((error <= scale * 0.5 + 1e-6).all())
