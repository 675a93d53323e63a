"""Display transforms for preview images: exposure, a filmic tone curve and the sRGB encoding.

The tone curve is Krzysztof Narkowicz's analytic fit of the ACES reference rendering transform,
``x (2.51 x + 0.03) / (x (2.43 x + 0.59) + 0.14)``, applied per channel to linear radiance scaled
by ``2^exposure``; it rolls highlights off smoothly (a white Lambert sphere under the default sky
keeps its shading) and is close enough to ACES for judging materials. :func:`tone_map_reinhard`
(``x / (1 + x)``) is the plain alternative.
"""

from __future__ import annotations

import torch

from neuralbake.material.texture import linear_to_srgb

__all__ = ["tone_map", "tone_map_aces_fitted", "tone_map_reinhard"]


def tone_map_aces_fitted(x: torch.Tensor) -> torch.Tensor:
    """Narkowicz's ACES fit of linear values ``x`` (any shape), clamped to ``[0, 1]``."""
    x = torch.clamp(x, min=0.0)
    return torch.clamp(x * (2.51 * x + 0.03) / (x * (2.43 * x + 0.59) + 0.14), 0.0, 1.0)


def tone_map_reinhard(x: torch.Tensor) -> torch.Tensor:
    """Reinhard ``x / (1 + x)`` of linear values ``x`` (any shape), in ``[0, 1)``."""
    x = torch.clamp(x, min=0.0)
    return x / (1.0 + x)


def tone_map(linear: torch.Tensor, *, exposure: float = 0.0, curve: str = "aces") -> torch.Tensor:
    """Display-ready sRGB-encoded values in ``[0, 1]``, same shape as ``linear`` (e.g. ``[H, W, 3]``).

    ``exposure`` in stops multiplies the radiance by ``2^exposure``; ``curve`` is ``"aces"``
    (:func:`tone_map_aces_fitted`) or ``"reinhard"``. NaNs become 0.
    """
    scaled = torch.nan_to_num(linear.float(), nan=0.0) * (2.0**exposure)
    if curve == "aces":
        mapped = tone_map_aces_fitted(scaled)
    elif curve == "reinhard":
        mapped = tone_map_reinhard(scaled)
    else:
        from neuralbake.errors import InputError

        raise InputError(f"unknown tone curve {curve!r}.", field="curve", fix="use 'aces' or 'reinhard'.")
    return torch.clamp(linear_to_srgb(mapped), 0.0, 1.0)
