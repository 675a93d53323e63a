"""Importance sampling of a neural material: a small head that gives each latent a proxy lobe.

The decoder evaluates ``f cos`` but cannot be sampled. As in Zeltner et al. 2024, a second tiny
network (:class:`SamplingHead`, latent -> 4 numbers) gives per texel the parameters of an analytic
proxy distribution: a GGX reflection lobe (roughness ``alpha``, about a normal tilted by ``tilt``
from the vertex normal, which is where a baked normal map moves the highlight) mixed with a cosine
lobe (weight ``1 - w``). Sampling picks a lobe, samples it (the GGX lobe by its visible normals,
about the tilted normal), and returns the mixture's density; a direction that ends below the
vertex hemisphere is an invalid sample (density 0), which keeps the estimator unbiased (the
density of the valid directions is the mixture's). :func:`fit_sampling_head` trains the head
after the bake on the neural material itself: it minimises the cross-entropy of the proxy
against ``f cos`` (its luminance) at random texels and view directions, with directions from a
defensive mixture of the cosine lobe and the current head.

Written here rather than taken from a library: the lobe is the project's own GGX code
(:mod:`neuralbake.material.microfacet`), and the head a :class:`~neuralbake.nn.mlp.MLP`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from neuralbake.io.neural_material_bundle import MAX_TILT, MAX_W, MIN_ALPHA
from neuralbake.material.frame import cosine_hemisphere_pdf, normalize, orthonormal_basis, square_to_cosine_hemisphere
from neuralbake.material.microfacet import ggx_reflection_pdf, ggx_reflection_sample
from neuralbake.nn.mlp import MLP, MLPConfig

__all__ = ["MAX_W", "SamplingHead", "fit_sampling_head", "proxy_pdf", "proxy_sample", "relative_variance", "view_directions"]



class SamplingHead(torch.nn.Module):
    """Latent ``[N, L]`` -> proxy lobe parameters: GGX weight ``w``, ``alpha``, tilted normal ``[N, 3]`` (vertex frame)."""

    def __init__(self, latent: int, hidden: int = 32) -> None:
        super().__init__()
        self.mlp = MLP(MLPConfig(inputs=latent, hidden=hidden, layers=1, outputs=4, hidden_activation="relu", output_activation="none"))

    def forward(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = self.mlp(latent.float())
        w = MAX_W * torch.sigmoid(y[:, 0])
        alpha = MIN_ALPHA + (1.0 - MIN_ALPHA) * torch.sigmoid(y[:, 1])
        tilt = MAX_TILT * torch.tanh(y[:, 2:4])
        normal = normalize(torch.cat([tilt, torch.ones_like(tilt[:, :1])], dim=1))
        return w, alpha, normal


def _to_lobe(v: torch.Tensor, t: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return torch.stack(((v * t).sum(-1), (v * b).sum(-1), (v * n).sum(-1)), dim=-1)


def proxy_pdf(w: torch.Tensor, alpha: torch.Tensor, normal: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
    """Solid-angle density ``[N]`` of :func:`proxy_sample` (vertex frame; 0 unless both directions are above it)."""
    t, b = orthonormal_basis(normal)
    specular = ggx_reflection_pdf(_to_lobe(wi, t, b, normal), _to_lobe(wo, t, b, normal), alpha, alpha)
    above = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).to(wi.dtype)
    return (w * specular + (1.0 - w) * cosine_hemisphere_pdf(wi)) * above


def proxy_sample(w: torch.Tensor, alpha: torch.Tensor, normal: torch.Tensor, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(wi [N, 3], pdf [N])``: ``u[:, 0]`` picks the GGX lobe (probability ``w``) or the cosine one and is reused rescaled."""
    pick = u[:, 0] < w
    u_pick, w64 = u[:, 0].double(), w.double()  # the rescaled number keeps its resolution
    u0 = torch.where(pick, u_pick / w64.clamp(min=1e-12), (u_pick - w64) / (1.0 - w64).clamp(min=1e-12)).clamp(0.0, 1.0 - 1e-7).to(u.dtype)
    uu = torch.stack((u0, u[:, 1]), dim=-1)
    t, b = orthonormal_basis(normal)
    wi_lobe, lobe_pdf = ggx_reflection_sample(_to_lobe(wo, t, b, normal), uu, alpha, alpha)
    specular = wi_lobe[:, 0:1] * t + wi_lobe[:, 1:2] * b + wi_lobe[:, 2:3] * normal
    wi = torch.nan_to_num(torch.where(pick[:, None], specular, square_to_cosine_hemisphere(uu)))
    # a GGX sample below its own lobe's hemisphere is invalid (density 0), even where the cosine lobe covers it
    valid = ~pick | (lobe_pdf > 0)
    return wi, torch.where(valid, proxy_pdf(w, alpha, normal, wi, wo), torch.zeros_like(lobe_pdf))


def _luminance(rgb: torch.Tensor) -> torch.Tensor:
    return rgb @ torch.tensor([0.2126, 0.7152, 0.0722], dtype=rgb.dtype, device=rgb.device)


def view_directions(n: int, uniform_fraction: float, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """View directions: ``uniform_fraction`` of them uniform over the hemisphere, the rest cosine-distributed."""
    u = torch.rand(n, 3, generator=generator, device=device)
    cosine = square_to_cosine_hemisphere(u[:, :2])
    z = u[:, 0:1]
    r = torch.sqrt(torch.clamp(1.0 - z * z, min=0.0))
    phi = 2.0 * math.pi * u[:, 1:2]
    uniform = torch.cat([r * torch.cos(phi), r * torch.sin(phi), z], dim=1)
    return torch.where(u[:, 2:3] < uniform_fraction, uniform, cosine)


def fit_sampling_head(
    neural: Any, draw_uv: Callable[[int, torch.Generator], torch.Tensor], *, steps: int, batch_size: int, seed: int = 0,
    learning_rate: float = 3e-3,
) -> tuple[SamplingHead, list[float]]:
    """Train a :class:`SamplingHead` on ``neural`` (a :class:`~neuralbake.bakes.neural_material.NeuralMaterial`).

    Each step: texels from ``draw_uv``, view directions half cosine and half uniform, light
    directions from the mixture ``q`` of the cosine lobe and the current head (detached); the loss
    is the self-normalised cross-entropy ``-sum(f/q log p) / sum(f/q)`` of the head's density ``p``
    against the luminance of ``f cos``. Returns the head and its loss per step.
    """
    device = neural.latents[0].device
    head = SamplingHead(neural.latents[0].shape[-1]).to(device)
    optimiser = torch.optim.Adam(head.parameters(), lr=learning_rate)
    generator = torch.Generator(device=device).manual_seed(seed)
    losses = []
    for _ in range(steps):
        uv = draw_uv(batch_size, generator)
        with torch.no_grad():
            latent = neural.latent_at(uv).float()
            wo = view_directions(batch_size, 0.5, generator, device)
            u = torch.rand(batch_size, 3, generator=generator, device=device)
            w, alpha, normal = head(latent)
            from_head, head_pdf = proxy_sample(w, alpha, normal, wo, u[:, 1:3])
            cosine = u[:, 0] < 0.5
            wi = torch.where(cosine[:, None], square_to_cosine_hemisphere(u[:, 1:3]), from_head)
            q = 0.5 * cosine_hemisphere_pdf(wi) + 0.5 * proxy_pdf(w, alpha, normal, wi, wo)
            f = _luminance(neural.evaluate(latent, wi, wo))
            # an invalid head sample (pdf 0) weighs nothing: q leaves its own density out
            weight = torch.where((q > 0) & (cosine | (head_pdf > 0)), f / q.clamp(min=1e-12), torch.zeros_like(f))
            weight = torch.nan_to_num(weight, posinf=0.0)
        p = proxy_pdf(*head(latent), wi, wo)
        loss = -(weight * torch.log(p + 1e-6)).sum() / weight.sum().clamp(min=1e-12)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return head.eval(), losses


def relative_variance(
    evaluate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    sample: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    wo: torch.Tensor,
    samples: int,
    generator: torch.Generator,
) -> float:
    """Mean over contexts (rows of ``wo``) of the relative variance ``var / mean^2`` of the
    one-sample estimator ``lum(f cos) / pdf`` of the directional albedo, ``samples`` draws each."""
    n = wo.shape[0]
    values = []
    for _ in range(samples):
        u = torch.rand(n, 2, generator=generator, device=wo.device)
        wi, pdf = sample(wo, u)
        f = _luminance(evaluate(wi, wo))
        values.append(torch.where(pdf > 0, f / pdf.clamp(min=1e-12), torch.zeros_like(f)))
    v = torch.stack(values)  # [samples, contexts]
    mean = v.mean(0)
    keep = mean > 1e-6
    return float((v.var(0)[keep] / mean[keep] ** 2).mean()) if bool(keep.any()) else float("nan")
