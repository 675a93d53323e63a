"""Tone mapping, one module for display and for fitting: exposure, the tone curves, the sRGB
encoding, and the parametric curves (and their inverses) that the LOD fit learns.

The default curve is Krzysztof Narkowicz's analytic fit of the ACES reference rendering transform,
``x (2.51 x + 0.03) / (x (2.43 x + 0.59) + 0.14)``; it rolls highlights off smoothly (a white
Lambert sphere under the default sky keeps its shading) and is close enough to ACES for judging
materials. :func:`tone_map_reinhard` (``x / (1 + x)``) is the plain alternative and
:func:`tone_map_modified_reinhard` (``x (1 + x / w^2) / (1 + x)``) adds a white point ``w``. All
curves work per channel, keep the input's dtype and device, and carry gradients to the radiance,
the exposure and ``w``, so a loss can be taken on tone-mapped images and
``torch.autograd.gradcheck`` can check them in float64. :func:`tone_map` chooses a curve by name
(``operator=``) and is what previews, comparisons and fits call. The first- and second-order
curves at the end (:class:`InverseToneMap`) are the ones the fit bake stores LDR codes with.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from neuralbake.errors import ConfigError, InputError
from neuralbake.material.texture import linear_to_srgb

__all__ = [
    "TONE_MAP_OPERATORS",
    "InverseToneMap",
    "inverse_tone_map_first_order",
    "inverse_tone_map_second_order",
    "tone_map",
    "tone_map_aces_fitted",
    "tone_map_first_order",
    "tone_map_modified_reinhard",
    "tone_map_reinhard",
    "tone_map_second_order",
]

TONE_MAP_OPERATORS = ("aces", "reinhard", "modified_reinhard", "linear")
"""Names accepted by :func:`tone_map`'s ``operator``; ``linear`` only clamps to ``[0, 1]``."""


# -- display curves -----------------------------------------------------------------------------


def tone_map_aces_fitted(x: torch.Tensor) -> torch.Tensor:
    """Narkowicz's ACES fit of linear values ``x`` (any shape), clamped to ``[0, 1]``."""
    x = torch.clamp(x, min=0.0)
    return torch.clamp(x * (2.51 * x + 0.03) / (x * (2.43 * x + 0.59) + 0.14), 0.0, 1.0)


def tone_map_reinhard(x: torch.Tensor) -> torch.Tensor:
    """Reinhard ``x / (1 + x)`` of linear values ``x`` (any shape), in ``[0, 1)``."""
    x = torch.clamp(x, min=0.0)
    return x / (1.0 + x)


def tone_map_modified_reinhard(x: torch.Tensor, white: torch.Tensor | float = 4.0) -> torch.Tensor:
    """Reinhard's curve with a white point: ``x (1 + x / w^2) / (1 + x)``, clamped to ``[0, 1]``.

    Radiance ``w`` (and above) maps to 1; as ``w`` grows the curve tends to plain Reinhard.
    ``white``: a float or a tensor broadcastable to ``x`` (gradients flow to it below the clamp).
    """
    w = torch.as_tensor(white, dtype=x.dtype, device=x.device)
    x = torch.clamp(x, min=0.0)
    return torch.clamp(x * (1.0 + x / (w * w)) / (1.0 + x), 0.0, 1.0)


def tone_map(
    hdr: torch.Tensor,
    *,
    operator: str = "aces",
    exposure: float | torch.Tensor = 0.0,
    white: float | torch.Tensor = 4.0,
    encode_srgb: bool = True,
) -> torch.Tensor:
    """Display values in ``[0, 1]`` of linear radiance ``hdr`` (any shape, e.g. ``[H, W, 3]``).

    Parameters
    ----------
    hdr : torch.Tensor
        Linear radiance. float32 and float64 are kept; other dtypes (half, integer) are computed
        and returned as float32. NaNs become 0.
    operator : str
        One of :data:`TONE_MAP_OPERATORS`.
    exposure : float or torch.Tensor
        Stops: ``hdr`` is scaled by ``2^exposure`` first (a tensor carries a gradient).
    white : float or torch.Tensor
        The modified Reinhard white point.
    encode_srgb : bool
        Apply the sRGB transfer function last (off: compare in linear display space).

    Returns
    -------
    torch.Tensor
        Same shape as ``hdr``; differentiable in ``hdr``, ``exposure`` and ``white``.
    """
    if operator not in TONE_MAP_OPERATORS:
        raise InputError(f"unknown tone-map operator {operator!r}.", field="operator", fix=f"use one of {', '.join(TONE_MAP_OPERATORS)}.")
    if hdr.dtype not in (torch.float32, torch.float64):
        hdr = hdr.float()
    hdr = torch.nan_to_num(hdr, nan=0.0)
    if isinstance(exposure, torch.Tensor):
        x = hdr * torch.pow(torch.as_tensor(2.0, dtype=hdr.dtype, device=hdr.device), exposure.to(hdr.dtype))
    else:
        x = hdr * (2.0**exposure)
    if operator == "aces":
        mapped = tone_map_aces_fitted(x)
    elif operator == "reinhard":
        mapped = tone_map_reinhard(x)
    elif operator == "modified_reinhard":
        mapped = tone_map_modified_reinhard(x, white)
    else:
        mapped = torch.clamp(x, 0.0, 1.0)
    return torch.clamp(linear_to_srgb(mapped), 0.0, 1.0) if encode_srgb else mapped


# -- fitted parametric curves (the LOD fit's stored LDR codes) ---------------------------------


def _softplus_inverse(y: float) -> float:
    return y + math.log(-math.expm1(-y))


def inverse_tone_map_first_order(c: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """The seed's first-order inverse tone map ``cH = cL / (beta + alpha cL)``, written with
    ``gamma = alpha + beta`` so the denominator ``beta (1 - cL) + gamma cL`` stays positive on
    [0, 1] for ``beta, gamma > 0``. ``beta = 1, gamma -> 0`` is inverse Reinhard ``cL / (1 - cL)``;
    ``gamma = 1 / cH_max`` bounds the HDR range. Differentiable in all inputs."""
    return c / (beta * (1.0 - c) + gamma * c)


def tone_map_first_order(h: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """Forward of :func:`inverse_tone_map_first_order`: ``cL = beta cH / (1 + (beta - gamma) cH)``
    (the seed's ``cH / (a cH + b)`` with ``a = (beta - gamma) / beta``, ``b = 1 / beta``)."""
    return beta * h / (1.0 + (beta - gamma) * h)


def tone_map_second_order(h: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The seed's second-order tone map ``cL = (cH^2 + a cH) / (b cH^2 + c cH + d)`` (ACES's fit is
    ``a = 0.01195, b = 0.968, c = 0.235, d = 0.0558``); increasing for ``c >= a b``."""
    return (h * h + a * h) / (b * h * h + c * h + d)


def inverse_tone_map_second_order(cl: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`tone_map_second_order`: the positive root of
    ``(1 - b cL) cH^2 + (a - c cL) cH - d cL = 0`` (needs ``b cL < 1``, ``a, d > 0``).

    The two algebraically equal root formulas are blended by the sign of ``a - c cL`` so neither
    cancels catastrophically; the branch not taken is fed safe values so its gradient is finite.
    """
    qa = 1.0 - b * cl
    qb = a - c * cl
    root = torch.sqrt(qb * qb + 4.0 * qa * d * cl)
    positive = qb >= 0
    stable_den = torch.where(positive, qb + root, torch.ones_like(root))
    stable = 2.0 * d * cl / stable_den
    standard = (root - qb) / (2.0 * qa)
    return torch.where(positive, stable, standard)


class InverseToneMap(torch.nn.Module):
    """Learnable inverse tone map (first or second order) on raw, unconstrained parameters:
    softplus keeps ``beta, gamma, a, d > 0`` and ``c - a b > 0`` (monotone), a sigmoid ``b < 1``."""

    def __init__(self, order: int, hdr_max: float = 4.0) -> None:
        super().__init__()
        self.order = order
        if order == 1:
            init = [_softplus_inverse(1.0), _softplus_inverse(1.0 / max(hdr_max, 1.0))]
        elif order == 2:
            a, b, c, d = 0.03 / 2.51, 2.43 / 2.51, 0.59 / 2.51, 0.14 / 2.51  # ACES (Narkowicz) normalised: the seed's special case
            init = [_softplus_inverse(a), math.log(b / (1.0 - b)), _softplus_inverse(c - a * b), _softplus_inverse(d)]
        else:
            raise ConfigError(f"tone map order must be 1 or 2, got {order!r}.", field="tonemap_order", fix="pass 1 or 2.")
        self.raw = torch.nn.Parameter(torch.tensor(init, dtype=torch.float64))

    def set_hdr_max(self, hdr_max: float) -> None:
        """First order only: restart the curve's HDR range at ``hdr_max`` (``gamma = 1 / hdr_max``), in place."""
        if self.order != 1:
            raise ConfigError(
                f"set_hdr_max needs the first-order curve, this one is order {self.order}.", field="tonemap_order", fix="use order 1."
            )
        with torch.no_grad():
            self.raw[1] = _softplus_inverse(1.0 / hdr_max)

    def parameters_named(self) -> dict[str, float]:
        """The curve's parameters in the seed's notation (floats)."""
        with torch.no_grad():
            p = self.constrained()
        if self.order == 1:
            beta, gamma = (float(v) for v in p)
            return {"form": "cH = cL / (beta + alpha cL)", "alpha": gamma - beta, "beta": beta, "hdr_max": 1.0 / gamma}
        a, b, c, d = (float(v) for v in p)
        return {"form": "cL = (cH^2 + a cH) / (b cH^2 + c cH + d), inverted", "a": a, "b": b, "c": c, "d": d}

    def constrained(self) -> tuple[torch.Tensor, ...]:
        """The constrained parameters: ``(beta, gamma)`` or ``(a, b, c, d)``."""
        r = self.raw
        if self.order == 1:
            return F.softplus(r[0]), F.softplus(r[1])
        a, b = F.softplus(r[0]), torch.sigmoid(r[1])
        return a, b, a * b + F.softplus(r[2]), F.softplus(r[3])

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """HDR radiance of LDR codes in [0, 1] (any shape)."""
        p = [v.to(codes.dtype) for v in self.constrained()]
        c = torch.clamp(codes, 0.0, 1.0)
        return inverse_tone_map_first_order(c, *p) if self.order == 1 else inverse_tone_map_second_order(c, *p)

    def encode(self, hdr: torch.Tensor) -> torch.Tensor:
        """LDR codes of HDR radiance (the forward curve), clamped to [0, 1]."""
        p = [v.to(hdr.dtype) for v in self.constrained()]
        h = torch.clamp(hdr, min=0.0)
        out = tone_map_first_order(h, *p) if self.order == 1 else tone_map_second_order(h, *p)
        return torch.clamp(out, 0.0, 1.0)
