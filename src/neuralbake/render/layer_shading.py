"""Shading G-buffer rows with a BSDF layer in the vertex tangent frame: a sun and the environment.

A *layer* is anything with ``eval(wi, wo)`` in a local frame (normal +z): a glTF BRDF, a layered
material, a neural material's decoded latents. The deferred renderer (:mod:`neuralbake.render.deferred`)
shades the glTF material it reads from the G-buffer; this shades any layer the same way (the
same power-heuristic estimator), with light and BSDF samples that depend on the pixel and the
seed only, so two layers' images differ by their materials, not by noise. The neural-material
bake's asset comparison renders its reference and its bake through :func:`shade_layer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from neuralbake.material.frame import cosine_hemisphere_pdf, normalize, square_to_cosine_hemisphere
from neuralbake.render.deferred import over_pdf, power_heuristic
from neuralbake.render.envmap import EnvironmentLight
from neuralbake.render.gbuffer import GBuffer, shading_frame
from neuralbake.render.scene import RenderScene

__all__ = ["SUN", "VertexFrame", "shade_layer", "vertex_frame"]

SUN = ((-0.45, 0.75, 0.5), 3.0)
"""The sun :func:`shade_layer` lights with: world direction towards it, irradiance."""


@dataclass(eq=False)
class VertexFrame:
    """The vertex tangent frame (world) of G-buffer rows, oriented to the viewer, and the face normal."""

    tangent: torch.Tensor
    bitangent: torch.Tensor
    normal: torch.Tensor
    geometric: torch.Tensor

    def local(self, w: torch.Tensor) -> torch.Tensor:
        return torch.stack(((w * self.tangent).sum(-1), (w * self.bitangent).sum(-1), (w * self.normal).sum(-1)), dim=-1)

    def world(self, w: torch.Tensor) -> torch.Tensor:
        return w[:, 0:1] * self.tangent + w[:, 1:2] * self.bitangent + w[:, 2:3] * self.normal

    def rows(self, rows: torch.Tensor) -> VertexFrame:
        return VertexFrame(self.tangent[rows], self.bitangent[rows], self.normal[rows], self.geometric[rows])


def vertex_frame(g: GBuffer) -> VertexFrame:
    """The vertex tangent frame of every G-buffer row: tangent, bitangent ``w n x t`` (the
    handedness of mirrored uv included, as the normal map's tangent space has it), normal."""
    t, _, n, geo = shading_frame(g, None)
    handed = torch.where(g.tangent[:, 3:4] < 0.0, -1.0, 1.0).to(n.dtype)
    return VertexFrame(t, torch.cross(n, t, dim=-1) * handed, n, geo)


def shade_layer(
    rs: RenderScene,
    g: GBuffer,
    rows: torch.Tensor,
    frame: VertexFrame,
    layer: Any,
    occlusion: torch.Tensor,
    emissive: torch.Tensor,
    environment: EnvironmentLight,
    spp: int,
    seed: int = 0,
    shadows: bool = True,
) -> torch.Tensor:
    """Radiance ``[len(rows), 3]`` of G-buffer rows ``rows`` shaded with ``layer`` (vertex frame):
    emission, the :data:`SUN` (with a shadow ray if ``shadows``: Warp's BVH), and ``environment`` by ``spp`` light samples and
    ``spp`` cosine samples combined by the power heuristic, scaled by ``occlusion``.

    The samples depend on the pixel and ``seed`` only (a scrambled Sobol sequence shifted per
    pixel, as in the deferred renderer), and the BSDF samples are cosine-distributed whatever the
    layer, so two layers rendered with the same arguments see the same light and sample directions:
    their images differ by the materials, not by noise.
    """
    view = frame.local(g.view[rows])
    position, geo = g.position[rows], frame.geometric
    origin = position + geo * (1e-4 * rs.extent)
    radiance = emissive.clone()
    direction, irradiance = SUN
    light = normalize(torch.tensor(direction, dtype=view.dtype, device=view.device).reshape(1, 3)).expand_as(view)
    lit = (light * geo).sum(-1) > 0.0
    if shadows and rows.numel():
        lit = lit & ~rs.caster.occluded(origin, light)
    radiance = radiance + layer.eval(frame.local(light), view) * irradiance * lit.to(view.dtype)[:, None]
    sobol = torch.quasirandom.SobolEngine(4, scramble=True, seed=seed).draw(spp).to(torch.float64)
    shift = torch.rand(g.width * g.height, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)[g.pixel[rows].cpu()]
    total = torch.zeros_like(radiance)
    env_dtype = environment.pmf.dtype
    for k in range(spp):
        u = torch.remainder(sobol[k] + shift, 1.0).to(device=view.device, dtype=env_dtype)
        for strategy in ("light", "bsdf"):
            if strategy == "light":
                wi_world, p_light = environment.sample(u[:, 0:2])
                wi_world, p_light = wi_world.to(view.dtype), p_light.to(view.dtype)
                wi = frame.local(wi_world)
                p_bsdf = cosine_hemisphere_pdf(wi) * (wi[:, 2] > 0)
                weight, pdf = power_heuristic(p_light, p_bsdf), p_light
            else:
                wi = square_to_cosine_hemisphere(u[:, 2:4].to(view.dtype))
                p_bsdf = cosine_hemisphere_pdf(wi)
                wi_world = frame.world(wi)
                p_light = environment.pdf(wi_world.to(env_dtype)).to(view.dtype)
                weight, pdf = power_heuristic(p_bsdf, p_light), p_bsdf
            above = ((wi_world * geo).sum(-1) > 0.0).to(view.dtype)
            value = layer.eval(wi, view) * environment.eval(wi_world.to(env_dtype)).to(view.dtype)
            total = total + over_pdf(value, pdf) * (weight * above)[:, None]
    return radiance + total * (occlusion[:, None] / spp)
