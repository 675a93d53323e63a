"""Local shading frame helpers shared by every BSDF lobe: direction checks, parameter
broadcasting, trigonometry in the frame, and cosine-weighted hemisphere sampling.

Directions live in the local shading frame (normal = +z, tangent = +x, bitangent = +y) as
``[N, 3]`` float32 or float64 tensors. Material parameters arrive in many shapes (a constant, one
value per RGB channel, one per sample or texel); :func:`as_colour` and :func:`as_scalar` turn them
into ``[N, 3]`` and ``[N]`` tensors in the directions' dtype and device, keeping the autograd graph,
so every lobe can treat them alike. Square roots go through :func:`safe_sqrt` because autograd
turns ``sqrt(0)`` into an infinite gradient, and ``0 * inf`` poisons the masked-out lanes.
"""

from __future__ import annotations

import math

import torch

from neuralbake.errors import InputError

__all__ = [
    "as_colour",
    "as_scalar",
    "check_direction_pair",
    "check_directions",
    "check_uniforms",
    "cos_theta",
    "cosine_hemisphere_pdf",
    "dot",
    "half_vector",
    "normalize",
    "orthonormal_basis",
    "reflect",
    "safe_sqrt",
    "square_to_cosine_hemisphere",
    "upper_pair",
]


def check_directions(name: str, v: torch.Tensor) -> torch.Tensor:
    """Check that ``v`` is a ``[N, 3]`` float32/float64 tensor of directions and return it.

    ``name`` is the argument's name, used in the error message.
    """
    if not isinstance(v, torch.Tensor):
        raise InputError(f"expected a torch.Tensor of directions, got {type(v).__name__}.", field=name, fix="pass a [N, 3] tensor.")
    if v.dim() != 2 or v.shape[-1] != 3:
        raise InputError(
            f"directions must have shape [N, 3], got {tuple(v.shape)}.", field=name, fix="reshape to [N, 3] (one direction per row)."
        )
    if v.dtype not in (torch.float32, torch.float64):
        raise InputError(f"directions must be float32 or float64, got {v.dtype}.", field=name, fix="convert with .float() or .double().")
    return v


def check_direction_pair(wi: torch.Tensor, wo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Check ``wi`` and ``wo`` with :func:`check_directions` and that they match in N, dtype, device."""
    wi, wo = check_directions("wi", wi), check_directions("wo", wo)
    if wi.shape != wo.shape or wi.dtype != wo.dtype or wi.device != wo.device:
        raise InputError(
            f"wi is {tuple(wi.shape)} {wi.dtype} on {wi.device} but wo is {tuple(wo.shape)} {wo.dtype} on {wo.device}.",
            field="wo",
            fix="pass one wo per wi, in the same dtype and on the same device.",
        )
    return wi, wo


def check_uniforms(u: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Check that ``u`` is ``[N, 2]`` (N of ``like``) and return it in ``like``'s dtype/device."""
    if not isinstance(u, torch.Tensor) or u.dim() != 2 or u.shape != (like.shape[0], 2):
        shape = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
        raise InputError(
            f"uniform samples must have shape [N, 2] = [{like.shape[0]}, 2], got {shape}.",
            field="u",
            fix="draw torch.rand(N, 2) with N = len(wo).",
        )
    return u.to(dtype=like.dtype, device=like.device)


def _as_tensor(name: str, value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        # .to() is a no-op (same object, same graph) when dtype and device already match.
        return value.to(dtype=like.dtype, device=like.device)
    try:
        return torch.as_tensor(value, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError) as exc:
        raise InputError(f"cannot make a tensor of {value!r} ({exc}).", field=name, fix="pass a float or a tensor.") from None


def as_colour(name: str, value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    """Broadcast an RGB parameter to ``[N, 3]`` in ``like``'s dtype/device (``like``: ``[N, 3]``).

    Accepted shapes: ``[]``, ``[1]``, ``[3]``, ``[N, 1]``, ``[N, 3]``.
    """
    t = _as_tensor(name, value, like)
    n = like.shape[0]
    if t.dim() > 2 or (t.dim() >= 1 and t.shape[-1] not in (1, 3)) or (t.dim() == 2 and t.shape[0] not in (1, n)):
        raise InputError(
            f"an RGB parameter of shape {tuple(t.shape)} does not broadcast to [N, 3] with N = {n}.",
            field=name,
            fix="pass a float or a tensor of shape [3], [N, 1] or [N, 3].",
        )
    return t.expand(n, 3) if t.dim() else t.reshape(1, 1).expand(n, 3)


def as_scalar(name: str, value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    """Broadcast a one-channel parameter to ``[N]`` in ``like``'s dtype/device (``like``: ``[N, 3]``).

    Accepted shapes: ``[]``, ``[1]``, ``[N]``, ``[N, 1]``.
    """
    t = _as_tensor(name, value, like)
    n = like.shape[0]
    if t.dim() == 2 and t.shape[-1] == 1:
        t = t[:, 0]
    if t.dim() > 1 or (t.dim() == 1 and t.shape[0] not in (1, n)):
        raise InputError(
            f"a one-channel parameter of shape {tuple(t.shape)} does not broadcast to [N] with N = {n}.",
            field=name,
            fix="pass a float or a tensor of shape [N] or [N, 1].",
        )
    return t.expand(n)


def safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(max(x, tiny))``: same values, but a finite gradient at and below zero."""
    return torch.sqrt(torch.clamp(x, min=torch.finfo(x.dtype).tiny))


def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product of ``[N, 3]`` tensors, shape ``[N]``."""
    return (a * b).sum(dim=-1)


def normalize(v: torch.Tensor) -> torch.Tensor:
    """Unit vectors along the rows of ``v`` (``[N, 3]``); zero rows stay finite (near zero)."""
    return v * torch.rsqrt(torch.clamp((v * v).sum(dim=-1, keepdim=True), min=torch.finfo(v.dtype).tiny))


def orthonormal_basis(n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two unit tangents ``(t, b)`` completing unit normals ``n`` ``[N, 3]`` to a right-handed frame.

    Duff et al., "Building an Orthonormal Basis, Revisited" (JCGT 6(1), 2017): branch-free,
    continuous except across ``n.z = 0``'s sign flip, differentiable in ``n``. For an isotropic
    lobe any frame around ``n`` gives the same value, so this is the frame of a normal-mapped texel.
    """
    x, y, z = n.unbind(-1)
    sign = torch.copysign(torch.ones_like(z), z)
    a = -1.0 / (sign + z)
    b = x * y * a
    t = torch.stack((1.0 + sign * x * x * a, sign * b, -sign * x), dim=-1)
    bt = torch.stack((b, sign + y * y * a, -y), dim=-1)
    return t, bt


def cos_theta(v: torch.Tensor) -> torch.Tensor:
    """Cosine to the normal (+z) of ``[N, 3]`` directions, shape ``[N]``."""
    return v[:, 2]


def half_vector(wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
    """Reflection half vector ``normalize(wi + wo)``, ``[N, 3]``."""
    return normalize(wi + wo)


def reflect(w: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Mirror ``w`` (pointing away from the surface) about the unit normal ``m``: ``2 (w.m) m - w``."""
    return 2.0 * dot(w, m)[:, None] * m - w


def square_to_cosine_hemisphere(u: torch.Tensor) -> torch.Tensor:
    """Map ``[N, 2]`` uniforms to cosine-distributed directions on the upper hemisphere, ``[N, 3]``.

    Polar mapping (radius ``sqrt(u0)``, angle ``2 pi u1``) lifted to the hemisphere (Malley's
    method); the density is :func:`cosine_hemisphere_pdf`.
    """
    r = safe_sqrt(u[:, 0])
    phi = (2.0 * math.pi) * u[:, 1]
    z = safe_sqrt(1.0 - u[:, 0])
    return torch.stack((r * torch.cos(phi), r * torch.sin(phi), z), dim=-1)


def cosine_hemisphere_pdf(w: torch.Tensor) -> torch.Tensor:
    """Solid-angle density ``max(cos theta, 0) / pi`` of :func:`square_to_cosine_hemisphere`, ``[N]``."""
    return torch.clamp(cos_theta(w), min=0.0) / math.pi


def upper_pair(wi: torch.Tensor, wo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(valid [N], wi, wo)`` with the pairs not both above the surface replaced by the normal.

    The masked lanes are zeroed afterwards anyway; evaluating them on harmless directions keeps
    their (discarded) gradients finite, where ``wi = -wo`` would give ``0 * inf = nan``.
    """
    valid = (cos_theta(wi) > 0.0) & (cos_theta(wo) > 0.0)
    up = torch.tensor([0.0, 0.0, 1.0], dtype=wi.dtype, device=wi.device)
    keep = valid[:, None]
    return valid, torch.where(keep, wi, up), torch.where(keep, wo, up)
