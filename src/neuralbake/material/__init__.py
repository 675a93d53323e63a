"""Differentiable BSDF lobes for layered materials (the antique-copper family: metal base, patina,
varnish, dust), written as small batched PyTorch ops that run on any device in float32 or float64.

Conventions shared by every lobe:

* Directions are unit vectors in the local shading frame: normal = +z, tangent = +x (the axis of
  ``alpha_x``), bitangent = +y; tensors of shape ``[N, 3]``. ``wi`` is the light direction and
  ``wo`` the view direction, both pointing away from the surface. (Mitsuba's ``si.wi`` is our
  ``wo`` and its ``wo`` is our ``wi``.)
* ``eval(wi, wo, params) -> [N, 3]`` is the RGB cosine-weighted BSDF ``f(wi, wo) * cos(theta_i)``.
  All lobes are reflection-only: the value is 0 when either direction is below the surface.
* ``sample(wo, u, params) -> (wi [N, 3], pdf [N])`` turns uniforms ``u`` ``[N, 2]`` into light
  directions; ``pdf(wi, wo, params) -> [N]`` is the solid-angle density of ``wi`` given ``wo``
  for that sampler, and equals the ``pdf`` that ``sample`` returns. A sample with ``pdf == 0``
  (below the surface, or ``wo`` below it) is invalid and must get weight 0.
* Parameters are tensors (or floats) broadcastable to ``[N, 3]`` (RGB ones) or ``[N]``
  (one-channel ones), so they can vary per sample or per texel; gradients flow to all of them.

Lobes (see :data:`LOBES`): ``lambert`` (albedo); ``conductor`` (anisotropic GGX, exact complex
Fresnel, separable Smith, as Mitsuba 3's ``roughconductor``; presets in :data:`CONDUCTOR_IOR`);
``coating`` (GGX with dielectric Fresnel, the reflection of a varnish); ``sheen`` (glTF
KHR_materials_sheen "Charlie"); ``gltf`` (the glTF 2.0 Appendix B metal/rough BRDF).

Layers (:mod:`~neuralbake.material.layering`): :func:`layer` binds a lobe to its parameters,
:func:`coat` puts an absorbing rough dielectric coat over a layer (albedo scaling from a table of
the coat's directional albedo, Beer-Lambert absorption), :func:`mix` blends two layers by a mask.
Nodes for masks and colours: :mod:`~neuralbake.material.texture` (bilinear textures, sRGB, normal
maps, height to normal), :mod:`~neuralbake.material.noise` (value, Perlin, Worley, fBm) and
:mod:`~neuralbake.material.nodes` (ramp, lerp, math, up-facing).

MaterialX: :func:`compile_materialx` turns a standard_surface / open_pbr_surface document (with
its node graphs) into a :class:`CompiledMaterial`, a differentiable function from shading points
to a layer tree (:mod:`~neuralbake.material.mtlx_compiler`, :mod:`~neuralbake.material.mtlx_nodes`,
:mod:`~neuralbake.material.mtlx_shaders`); the Standard Surface and OpenPBR closures themselves are
:mod:`~neuralbake.material.surfaces`.
"""

from neuralbake.material.frame import square_to_cosine_hemisphere
from neuralbake.material.fresnel import CONDUCTOR_IOR, artistic_ior, conductor_ior, fresnel_conductor, fresnel_dielectric, fresnel_schlick
from neuralbake.material.gltf import gltf_eval, gltf_pdf, gltf_sample
from neuralbake.material.graph import MaterialGraph, compile_material
from neuralbake.material.layering import (
    CoatLayer,
    Layer,
    LobeLayer,
    MixLayer,
    coat,
    coat_albedo,
    coat_albedo_table,
    coat_transmittance,
    layer,
    mix,
)
from neuralbake.material.loader import load_material
from neuralbake.material.lobes import (
    LOBES,
    Lobe,
    coating_eval,
    coating_pdf,
    coating_sample,
    conductor_eval,
    conductor_pdf,
    conductor_sample,
    lambert_eval,
    lambert_pdf,
    lambert_sample,
)
from neuralbake.material.microfacet import (
    ggx_d,
    ggx_g1,
    ggx_reflection,
    ggx_reflection_pdf,
    ggx_reflection_sample,
    ggx_sample_visible_normal,
    smith_g_height_correlated,
    smith_g_separable,
)
from neuralbake.material.mtlx_compiler import CompiledMaterial, compile_materialx
from neuralbake.material.nodes import MATH_NODES, clamp, invert, lerp, math_node, power, ramp, remap, smoothstep, up_facing
from neuralbake.material.noise import fbm, perlin_noise, value_noise, worley_noise
from neuralbake.material.sheen import sheen_eval, sheen_pdf, sheen_sample
from neuralbake.material.surfaces import SheenLayer
from neuralbake.material.texture import (
    WRAP_MODES,
    decode_normal_map,
    height_to_normal,
    linear_to_srgb,
    load_texture,
    sample_texture,
    srgb_to_linear,
)

__all__ = [
    "CONDUCTOR_IOR",
    "LOBES",
    "MATH_NODES",
    "WRAP_MODES",
    "CoatLayer",
    "CompiledMaterial",
    "Layer",
    "Lobe",
    "LobeLayer",
    "MaterialGraph",
    "MixLayer",
    "SheenLayer",
    "artistic_ior",
    "clamp",
    "coat",
    "coat_albedo",
    "coat_albedo_table",
    "coat_transmittance",
    "coating_eval",
    "coating_pdf",
    "coating_sample",
    "compile_material",
    "compile_materialx",
    "conductor_eval",
    "conductor_ior",
    "conductor_pdf",
    "conductor_sample",
    "decode_normal_map",
    "fbm",
    "fresnel_conductor",
    "fresnel_dielectric",
    "fresnel_schlick",
    "ggx_d",
    "ggx_g1",
    "ggx_reflection",
    "ggx_reflection_pdf",
    "ggx_reflection_sample",
    "ggx_sample_visible_normal",
    "gltf_eval",
    "gltf_pdf",
    "gltf_sample",
    "height_to_normal",
    "invert",
    "lambert_eval",
    "lambert_pdf",
    "lambert_sample",
    "layer",
    "lerp",
    "linear_to_srgb",
    "load_material",
    "load_texture",
    "math_node",
    "mix",
    "perlin_noise",
    "power",
    "ramp",
    "remap",
    "sample_texture",
    "sheen_eval",
    "sheen_pdf",
    "sheen_sample",
    "smith_g_height_correlated",
    "smith_g_separable",
    "smoothstep",
    "square_to_cosine_hemisphere",
    "srgb_to_linear",
    "up_facing",
    "value_noise",
    "worley_noise",
]
