"""What the bake learns and what it learns from: :class:`LearnedMipChain`, the texels of every
level (see the package docstring for their parameterisation), and :class:`MipReferenceSampler`,
random direction pairs with the box-averaged full-resolution shading as targets."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from neuralbake.bakes.mipmap.config import MipmapConfig
from neuralbake.bakes.mipmap.maps import MaterialMaps
from neuralbake.bakes.mipmap.shading import CLASSES, SHADING_CHUNK, class_of, mirror_pairs, reference_chain, sample_directions, shade_chain, shade_maps
from neuralbake.material.frame import normalize
from neuralbake.nn.trainer import Batch

__all__ = ["LearnedMipChain", "LearnedMipLevel", "MipReferenceSampler"]

_MIN_SLOPE_SCALE = 1e-4
"""Smallest unit of a learned slope offset (GGX's smallest alpha, ``MIN_ALPHA``)."""

_LOGIT_EPS = 1e-4
"""Values are clamped to [eps, 1 - eps] before the logit, so a 0 or 1 texel starts finite."""


def _logit(x: torch.Tensor) -> torch.Tensor:
    return torch.logit(torch.clamp(x, _LOGIT_EPS, 1.0 - _LOGIT_EPS))


class LearnedMipLevel(torch.nn.Module):
    """The trainable texels of one mip level (see the module docstring for the parameterisation).

    ``base_logit`` ``[S, S, 3]``, ``slope`` ``[2, S, S]`` (the offset from the initial slopes
    ``slope_origin`` in units of ``slope_scale``, the initial GGX alpha; channel first, so that its
    gradient, a slice of the normal's, is contiguous: the trainer's fused Adam silently mis-steps
    parameters whose gradient has other strides), ``roughness_logit`` ``[S, S, 1]`` and, when
    learned, ``metallic_logit`` ``[S, S, 1]``.
    """

    def __init__(self, init: MaterialMaps, *, learn_metallic: bool) -> None:
        super().__init__()
        n = init.normal
        slope = n[..., :2] / torch.clamp(n[..., 2:3], min=1e-3)
        # The learned slope is an offset from the initial one in units of the initial GGX alpha
        # (the lobe's width in slope units), so that one Adam step, about lr in size whatever the
        # gradient's magnitude, tilts a mirror-like texel by a fraction of its lobe, not past it.
        self.register_buffer("slope_origin", slope.permute(2, 0, 1).contiguous())
        alpha = torch.clamp(init.roughness, min=0.0) ** 2
        self.register_buffer("slope_scale", torch.clamp(alpha, min=_MIN_SLOPE_SCALE).permute(2, 0, 1).contiguous())
        self.base_logit = torch.nn.Parameter(_logit(init.base_color).contiguous())
        self.slope = torch.nn.Parameter(torch.zeros_like(self.slope_origin))
        self.roughness_logit = torch.nn.Parameter(_logit(init.roughness).contiguous())
        if learn_metallic:
            self.metallic_logit = torch.nn.Parameter(_logit(init.metallic).contiguous())
        else:
            self.register_buffer("metallic_value", init.metallic.clone())

    def maps(self) -> MaterialMaps:
        """The level's maps (unit normals), differentiable in the parameters."""
        slope = self.slope_origin + self.slope_scale * self.slope
        normal = torch.cat((slope, torch.ones_like(slope[:1])), dim=0).permute(1, 2, 0)
        normal = normalize(normal.reshape(-1, 3)).reshape(normal.shape)
        metallic = torch.sigmoid(self.metallic_logit) if hasattr(self, "metallic_logit") else self.metallic_value
        return MaterialMaps(torch.sigmoid(self.base_logit), normal, torch.sigmoid(self.roughness_logit), metallic)


class LearnedMipChain(torch.nn.Module):
    """Levels ``1..L`` of learned texels; ``forward(directions [D, 6]) -> shading [D, sum S_k^2 * 3]``."""

    def __init__(self, init_chain: Sequence[MaterialMaps], *, light_intensity: float, learn_metallic: bool) -> None:
        super().__init__()
        self.levels = torch.nn.ModuleList([LearnedMipLevel(level, learn_metallic=learn_metallic) for level in init_chain])
        self.light_intensity = light_intensity
        # the loss's weight per (direction class, level), raised where the chain shades a class worse than box
        # filtering does (:func:`~.bake.update_class_weights`); a buffer, so a checkpoint keeps it
        self.register_buffer("class_weights", torch.ones(len(CLASSES), len(init_chain)))

    def chain(self) -> list[MaterialMaps]:
        """Every level's maps."""
        return [level.maps() for level in self.levels]

    def forward(self, directions: torch.Tensor) -> torch.Tensor:
        return shade_chain(self.chain(), directions[:, :3], directions[:, 3:], light_intensity=self.light_intensity)


class MipReferenceSampler:
    """Batches for the trainer: random direction pairs and the box-averaged full-resolution shading."""

    capturable = False
    """Kept out of CUDA-graph capture: the reference shading of a large map is chunked and allocates per step."""

    def __init__(self, maps: MaterialMaps, levels: int, config: MipmapConfig) -> None:
        self.maps = maps
        self.levels = levels
        self.batch_size = config.directions_per_step
        self.light_intensity = config.light_intensity
        self.specular_fraction = config.specular_fraction

    def targets(self, directions: torch.Tensor) -> torch.Tensor:
        """Reference shading ``[D, sum S_k^2 * 3]`` for the pairs ``directions`` ``[D, 6]``."""
        parts = []
        with torch.no_grad():
            # One direction group at a time, so the full-resolution shading never holds all of them.
            per_group = max(1, SHADING_CHUNK // (self.maps.side**2))
            for group in directions.split(per_group):
                full = shade_maps(self.maps, group[:, :3], group[:, 3:], light_intensity=self.light_intensity)
                parts.append(reference_chain(full, self.levels))
        return torch.cat(parts)

    def sample(self, generator: torch.Generator) -> Batch:
        """Random pairs with a quarter of exact mirror pairs among them (a highlight's peak, which random pairs seldom
        hit exactly); the targets carry each pair's class (:func:`~.shading.class_of`) as their last column."""
        device = self.maps.base_color.device
        exact = self.batch_size // 4
        directions = torch.cat((
            sample_directions(self.batch_size - exact, generator, device, specular_fraction=self.specular_fraction),
            mirror_pairs(exact, generator, device),
        ))
        targets = self.targets(directions)
        return Batch(inputs=directions, targets=torch.cat((targets, class_of(directions)[:, None].to(targets.dtype)), dim=1))
