"""Learned mipmaps: mip levels of a PBR texture set optimised so that *shading the mip* matches
*the mip of the shading*.

Box-filtered mips work for base colour but not for normals: averaging a bump's slopes makes the
surface flat and shiny, so a highlight that the full-resolution bumps break up into a wide, dim
glint becomes a small, bright one far away (the specular aliasing the NVIDIA neural-shading
primer's mipmap example, seed 001, opens with). This bake optimises each level's texels so that
shading them with the glTF metal/rough BRDF (:func:`neuralbake.material.gltf.gltf_eval`) under a
light ``wi`` and a view ``wo`` gives the box average, over the level's ``2^k x 2^k`` footprint, of
the full-resolution shading under the same ``wi`` and ``wo``; averaged over random directions.

Shading. Maps are tangent-space (OpenGL ``+y``, as glTF). A texel with normal ``n`` is shaded in
an orthonormal frame around ``n`` (:func:`neuralbake.material.frame.orthonormal_basis`, Duff et
al., JCGT 6(1), 2017; the BRDF is isotropic, so any frame around ``n`` gives the same value): the
radiance is ``light_intensity * f(wi, wo) (n . wi)`` with both directions above the geometric
surface. Errors are measured on Reinhard-tone-mapped radiance ``x / (1 + x)`` (per channel), so
that the rare, very bright GGX peaks of a shiny surface do not drown every other texel; the
reports also give the RMSE of linear radiance.

Directions. ``wo`` is cosine-distributed over the hemisphere; ``wi`` is, with probability
``specular_fraction``, the mirror of ``wo`` about a visible GGX normal of alpha 0.2 (so the
highlights, where box filtering fails, are sampled often), else cosine-distributed. Training draws
fresh pairs each step, shared by every texel of every level (the texels are independent
parameters, so sharing costs no variance and lets one full-resolution shading serve all levels).
The report uses a fixed held-out set drawn with a different seed.

Learned texels, per level: base colour ``sigmoid(a)`` (linear RGB), normal
``normalize(s_x, s_y, 1)`` from two slopes (always above the surface), perceptual roughness
``sigmoid(r)``, and metallic ``sigmoid(m)`` when a metallic map was given (else the constant).
The slopes are learned as offsets from the initial ones in units of the initial GGX alpha,
``s = s_0 + alpha_0 * d``: shading depends on a tilt through ``tilt / alpha``, and Adam steps every
parameter by about ``lr`` whatever its gradient's size, so raw slopes let one rare gradient spike of
a mirror-like texel (alpha ~ 1e-3, whose sharp highlight 16 random directions a step seldom hit)
tilt it by ~10 lr = 0.2, far past its lobe: its highlight left the mirror direction for good (the
narrow lobe has no tail to pull it back) and the texel shaded black where the reference is bright.
They start from Toksvig's maps (``init = "toksvig"``, the default) or the box-filtered ones
(``init = "box"``) and are optimised with Adam by the shared :class:`~neuralbake.nn.trainer.Trainer`.
Toksvig is the default start because it converges faster: on a 32^2 synthetic bump map, 300
steps from Toksvig reach a mean 27.2 dB over the levels, from box 24.5 dB (600 steps: 25.0 dB).

Classes. A mean over random directions hides a loss at the mirror directions, where metal is seen: a level's
footprint of narrow and wide GGX lobes has a sharper peak and wider flanks than any one lobe, and the unweighted
loss gave the peak up (a metal set with per-texel roughness lost 8-9 dB to box filtering there). So a quarter of
each step's pairs are exact mirror pairs, the loss weighs each (class, level) by a weight steered every 20 steps
towards 0.9x box filtering's error on pairs of its own (:func:`~.bake.update_class_weights`, kept in the
checkpoint), and :func:`~.bake.guard_levels` blends a level that would still lose a class back towards box
filtering's, by the largest share that does not.

Baselines. ``box``: box-filtered maps (base colour averaged in linear light, normals averaged and
renormalised, perceptual roughness and metallic averaged). ``toksvig``: as box, with the roughness
widened by the normal variance Toksvig estimates from the averaged normal's length
(M. Toksvig, "Mipmapping Normal Maps", NVIDIA technical brief 2004 / JGT 10(3), 2005):
``sigma^2 = (1 - |n|) / |n|``, added to the GGX ``alpha^2``: ``alpha'^2 = alpha^2 + sigma^2``.
``toksvig_phong``: Toksvig's own formula on a Phong exponent, ``s' = s |n| / (|n| + s (1 - |n|))``,
with the Beckmann/Phong mapping ``s = 2 / alpha^2 - 2`` (Walter et al., EGSR 2007) there and back;
for large ``s`` it is ``alpha'^2 ~ alpha^2 + 2 sigma^2``.

Outputs in ``--out``: ``mips/{base_color,normal,roughness[,metallic]}_L{k}.png`` (the learned
chain, level 0 = the input; base colour sRGB-encoded, normals as ``0.5 n + 0.5``),
``comparison.png`` (one row per level; three blocks, an exact mirror pair, an off-mirror pair and a grazing pair,
each reference = box-averaged full-resolution shading | box | Toksvig | learned, panels enlarged with
nearest sampling, each block exposed so its reference's 99th percentile sits at radiance 2 before Reinhard),
``report.json`` (per-level PSNR/RMSE of every method on the held-out directions, including the learned chain
re-read from its 8-bit PNGs; ``per_class``: per level on mirror, off-mirror and grazing pairs, see
:data:`~.shading.CLASSES`; ``learned_loses``: the worst class, level and baseline where learned loses, or null),
``config.json``, ``loss.png``,
``events.jsonl`` and ``bake.json`` (a sha256 per file); the checkpoint for ``--resume`` lives in
``.neuralbake/``. The bake runs through the one runner (:mod:`neuralbake.bakes.run`).

Modules: :mod:`~.config` (settings, limits, device defaults), :mod:`~.maps` (the texture set,
box and Toksvig chains), :mod:`~.shading` (texel shading, directions, errors), :mod:`~.model`
(the learned texels and the reference sampler), :mod:`~.outputs` (PNGs, comparison, report
tables), :mod:`~.bake` (the body and :data:`MIPMAP`).
"""

from neuralbake.bakes.mipmap.bake import CLASS_TARGET, MIPMAP, bake_mipmap, update_class_weights
from neuralbake.bakes.mipmap.config import CPU_TEXTURE_SIZE, MAX_SIZE, SLOPE_PARAMETERISATION, MipmapConfig, estimated_bake_bytes
from neuralbake.bakes.mipmap.maps import MaterialMaps, box_mip_chain, load_material_maps, renormalised, toksvig_chain, toksvig_roughness
from neuralbake.bakes.mipmap.model import LearnedMipChain, LearnedMipLevel, MipReferenceSampler
from neuralbake.bakes.mipmap.outputs import METHODS, decode_8bit, encode_chain_8bit
from neuralbake.bakes.mipmap.shading import (
    CLASSES,
    class_of,
    class_weighted_loss,
    grazing_directions,
    level_errors,
    level_slices,
    mirror_directions,
    reference_chain,
    sample_directions,
    shade_chain,
    shade_maps,
    shade_texels,
    tone_mapped_loss,
)

__all__ = [
    "CLASSES",
    "CLASS_TARGET",
    "CPU_TEXTURE_SIZE",
    "MAX_SIZE",
    "METHODS",
    "MIPMAP",
    "SLOPE_PARAMETERISATION",
    "LearnedMipChain",
    "LearnedMipLevel",
    "MaterialMaps",
    "MipReferenceSampler",
    "MipmapConfig",
    "bake_mipmap",
    "class_of",
    "class_weighted_loss",
    "box_mip_chain",
    "decode_8bit",
    "encode_chain_8bit",
    "estimated_bake_bytes",
    "grazing_directions",
    "level_errors",
    "level_slices",
    "load_material_maps",
    "mirror_directions",
    "reference_chain",
    "renormalised",
    "sample_directions",
    "shade_chain",
    "shade_maps",
    "shade_texels",
    "toksvig_chain",
    "toksvig_roughness",
    "tone_mapped_loss",
    "update_class_weights",
]
