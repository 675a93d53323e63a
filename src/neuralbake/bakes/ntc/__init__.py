"""Neural texture compression (NTC): a whole material texture set as quantised latent grids + a tiny decoder.

Up to 16 channels (e.g. base colour RGB, normal XY, occlusion / roughness / metallic, emissive RGB)
are compressed together, in the spirit of RTX Neural Texture Compression (Vaidyanathan et al. 2023,
"Random-Access Neural Compression of Material Textures"). The code is our own:

- **mip groups**: mip levels go in pairs (0-1, 2-3, ...). Each pair has a *high-resolution* latent
  grid (one cell per ``high_div x high_div`` texels of the pair's finer level) and a
  *low-resolution* one (``2 * high_div``), both with ``features`` channels.
- **sampling** a texel (level, x, y): its UV ``((x + 0.5) / W_l, (y + 0.5) / H_l)`` is placed on the
  pair's grids; the four surrounding high-resolution cells are *concatenated* (the decoder learns
  its own interpolation), the low-resolution grid is sampled bilinearly, the position of the texel
  inside its high-resolution cell is frequency-encoded (``neuralbake.nn.encoding``), and the
  level within the pair (0 or 1) is appended.
- **decoder**: one MLP for every level (default ``inputs -> 64 -> 48 -> 32 -> channels``, the
  RTXNTC-sized network), leaky-ReLU hidden layers, linear output clamped to [0, 1] on decode.
- **quantisation-aware training**: latents live in [-1, 1] and are stored with ``bits`` bits
  (2-8) on a uniform grid of ``2^bits`` values. Training runs in two phases with the shared
  trainer: first with uniform noise of one quantisation step added to every fetched latent, then
  (``finetune_steps``) with hard rounding and a straight-through gradient. Weights are trained
  with int8 fake quantisation (per-layer symmetric scale ``max|w| / 127``, straight-through) from
  the first step, i.e. QAT, so the stored int8 weights are exactly the ones trained. Biases are
  stored as float32 (they are 1-2 % of the weights' bytes; int32 biases would need an activation
  scale we do not otherwise have).
- **rate control**: ``--bpp`` picks the richest entry of :data:`LATENT_SHAPES` whose *whole file*
  (header, packed latents of every mip group, int8 weights, scales and biases) fits the budget.
  The size is computed exactly before training from the same code that writes the file.
- **container** ``texture.ntc``: bit-packed latent codes + int8 decoder (:mod:`.container`);
  ``manifest.json`` beside it holds its size and sha256, ``bake.json`` every file's.
- **bits per pixel** are ``8 * file bytes / (width * height of mip 0)``; the file holds the whole
  mip chain, and the BCn baselines are counted the same way (every mip level, 4x4-block padded
  tails included).

Decoding (:func:`decode_texels`, :func:`decode_texel`, :func:`decode_all_levels`) reads only the
container: no trainer, no model object. Block-compression baselines come from
:mod:`neuralbake.io.bcn` (etcpak + texture2ddecoder).

Hand-written parts and why: the grid sampling is a few gathers (``grid_sample`` cannot concatenate
the four corner cells, and one code path is shared by training and decoding so one-texel and
full decodes agree); the bit packing is NumPy's ``packbits``; the container is a small fixed
layout because no library stores "bit-packed latents + int8 MLP" and the byte count must be
exactly what is stored.

Modules: :mod:`.texture_set` (loading, checks, mip chains), :mod:`.layout` (rate control),
:mod:`.model` (grid sampling, decoder, trainable model, texel sampler), :mod:`.container` (the
file), :mod:`.decode` (decoding, quality, ``decompress``), :mod:`.baselines` (BCn),
:mod:`.config`, :mod:`.bake` (the run on :mod:`neuralbake.bakes.run`), :mod:`.rd` (the
rate-distortion record), :mod:`.transcode` (``ntc transcode``: the set decoded and BC-encoded
into DDS files, as an engine without fast inference would at load time), :mod:`.export` (``ntc
export``: Slang + HLSL decoding the set where it is sampled, :mod:`neuralbake.export.ntc`).
Filtered sampling of decoded texels (bilinear, trilinear, stochastic; repeat wrap):
:func:`sample_filtered`, :func:`sample_stochastic` in :mod:`.decode`.
"""

from __future__ import annotations

from neuralbake.bakes.ntc.bake import NTC, compress_rate_distortion, compress_texture_set
from neuralbake.bakes.ntc.baselines import bc_baselines
from neuralbake.bakes.ntc.config import CPU_TEXTURE_SIZE, NTCConfig, device_defaults, load_config_texture_set
from neuralbake.bakes.ntc.container import CONTAINER_NAME, MANIFEST_NAME, NTCContainer, open_container, pack_container, read_container
from neuralbake.bakes.ntc.decode import (
    decode_all_levels,
    decode_texel,
    decode_texels,
    decompress,
    sample_filtered,
    sample_stochastic,
    set_quality,
)
from neuralbake.bakes.ntc.layout import (
    BPP_RANGE,
    LATENT_SHAPES,
    MAX_HIDDEN_LAYERS,
    MAX_HIDDEN_WIDTH,
    MAX_PE_FREQUENCIES,
    LatentShape,
    NTCLayout,
    check_bpp,
    choose_layout,
)
from neuralbake.bakes.ntc.model import GridTables, NTCModel, TexelSampler, decoder_forward, sample_features
from neuralbake.bakes.ntc.rd import plot_rate_distortion, rate_distortion_summary
from neuralbake.bakes.ntc.texture_set import MAX_CHANNELS, ChannelGroup, TextureSet, check_texture_set, load_gltf_material, load_texture_set

__all__ = [
    "BPP_RANGE",
    "CONTAINER_NAME",
    "CPU_TEXTURE_SIZE",
    "LATENT_SHAPES",
    "MANIFEST_NAME",
    "MAX_CHANNELS",
    "MAX_HIDDEN_LAYERS",
    "MAX_HIDDEN_WIDTH",
    "MAX_PE_FREQUENCIES",
    "NTC",
    "ChannelGroup",
    "GridTables",
    "LatentShape",
    "NTCConfig",
    "NTCContainer",
    "NTCLayout",
    "NTCModel",
    "TexelSampler",
    "TextureSet",
    "bc_baselines",
    "check_bpp",
    "check_texture_set",
    "choose_layout",
    "compress_rate_distortion",
    "compress_texture_set",
    "decode_all_levels",
    "decode_texel",
    "decode_texels",
    "decoder_forward",
    "decompress",
    "device_defaults",
    "load_config_texture_set",
    "load_gltf_material",
    "load_texture_set",
    "open_container",
    "pack_container",
    "plot_rate_distortion",
    "rate_distortion_summary",
    "read_container",
    "sample_features",
    "sample_filtered",
    "sample_stochastic",
    "set_quality",
]
