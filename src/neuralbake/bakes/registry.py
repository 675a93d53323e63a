"""Every bake neuralbake has, in one table: the command line and the asset service are made from it.

A :class:`Registered` entry names a bake's job kind, the words of its command, its help, which
config fields are positional arguments (its inputs), the option renames a user types, and the
summary line printed when it is done. :mod:`neuralbake.cli` generates one command per entry;
:mod:`neuralbake.service` accepts exactly the entries' kinds as jobs. A bake that is not listed
here exists for neither (``tests/bakes/test_registry.py`` finds every :class:`~neuralbake.bakes.run.Bake`
in the package and checks it is listed, has a command and a job kind).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuralbake.bakes import summaries
from neuralbake.bakes.fit import FIT
from neuralbake.bakes.lod import LOD
from neuralbake.bakes.material_pack import MATERIAL_PACK
from neuralbake.bakes.mipmap import MIPMAP
from neuralbake.bakes.mipmap.config import check_map_paths
from neuralbake.bakes.neural_material import NEURAL_MATERIAL
from neuralbake.bakes.neural_texture import NEURAL_TEXTURE
from neuralbake.bakes.ntc import NTC
from neuralbake.bakes.postfx.chain import POSTFX
from neuralbake.bakes.postfx.lora import LORA_TRAIN
from neuralbake.bakes.run import Bake
from neuralbake.bakes.simplify import SIMPLIFY
from neuralbake.bakes.skin import SKIN
from neuralbake.errors import ConfigError

__all__ = ["BAKES", "Arg", "Registered", "registered", "service_kinds"]


@dataclass(frozen=True)
class Arg:
    """A config field given as a positional argument on the command line (a bake's main input)."""

    field: str
    """Dotted config field it sets."""
    help: str
    """Help text."""
    many: bool = False
    """Takes one or more values (the field is a list)."""
    optional: bool = False
    """May be left out (the field keeps its default)."""
    metavar: str | None = None
    """Name shown in usage (default: the field name in capitals)."""


@dataclass(frozen=True)
class Registered:
    """One bake as users reach it: ``neuralbake <command...>`` and job kind ``kind``."""

    kind: str
    """Job kind on the asset service (``neuralbake submit KIND``), unique."""
    command: tuple[str, ...]
    """Words of the command: ``("fit",)`` or ``("material", "pack")`` (a subcommand of a group)."""
    bake: Bake[Any]
    """The bake itself."""
    help: str
    """One-paragraph help of the command."""
    summary: Callable[[dict[str, Any], Path], str]
    """``(report, out) -> str``: the closing line."""
    arguments: tuple[Arg, ...] = ()
    """Config fields taken as positional arguments, in order."""
    rename: Mapping[str, str] = field(default_factory=dict)
    """Dotted field -> option name, where the field's own name would read badly as a flag."""
    skip: tuple[str, ...] = ()
    """Fields without an option (set by a config file only, or fixed for this command)."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Dotted field -> a sentence added to its option's help."""
    out_help: str = "Output folder for the bundle, pictures and report."
    """Help of ``--out``."""
    service: bool = True
    """The asset service may run it as a job."""
    stage_field: str | None = None
    """A chain's per-stage settings field (``stage_options``, annotated with
    :class:`~neuralbake.core.paths.StageConfigs`) that ``--set STAGE.FIELD=VALUE`` fills on the command line."""
    check_arguments: Callable[[Mapping[str, str]], None] | None = None
    """``({argument field: value as typed}) -> None``, raising a ConfigError: a check of the positional
    arguments made before the command line parses them in full, so that a wrong kind of input is named
    even where it leaves an argument missing (``mipmap ASSET.glb``)."""


_ASSET = Arg("asset", "The PBR asset (.gltf or .glb).", metavar="ASSET")

BAKES: dict[str, Registered] = {
    entry.kind: entry
    for entry in (
        Registered(
            "texture", ("texture", "bake"), NEURAL_TEXTURE,
            "Train a neural texture from IMAGE and write network, preview, loss curve and report to --out.",
            summaries.texture_summary,
            arguments=(Arg("image", "Reference image (PNG, JPEG, TGA, BMP, TIFF; 8/16-bit; grey, RGB or RGBA)."),),
            rename={"texture_size": "size", "network.hidden_activation": "activation"},
            skip=("network.outputs", "network.coordinates"),
            notes={"kernels": "Here auto takes the fused Triton training step on a CUDA GPU when the network fits it and trains in fp16 or bf16."},
        ),
        Registered(
            "material", ("material", "bake"), NEURAL_MATERIAL,
            "Bake a layered material, or a glTF asset's material, into a latent texture + decoder MLP (a neural material).",
            summaries.material_summary,
            arguments=(Arg("material", "A neuralbake material (.json), a MaterialX document (.mtlx) or a glTF asset (.gltf, .glb)."),),
            rename={"texture_size": "size", "material_name": "material"},
            notes={"train.steps": "Left out: 30,000 on a GPU, 2,000 on a CPU.", "train.precision": "fp32 by default, as in the paper.",
                   "kernels": "They decode the comparison renders and the throughput figure (fp32, latent fetch included) and train the "
                              "encoder and decoder. Here auto takes PyTorch (fused fp16 training measured 1.0-1.5x the CUDA-graph step "
                              "on an H100; in fp32 the Triton kernels compile for minutes)."},
            out_help="Output folder for the latent texture, decoder bundle, comparison and report.",
        ),
        Registered(
            "material-pack", ("material", "pack"), MATERIAL_PACK,
            "Bake and pack materials into one shader: a material-id switch, one weight buffer (shared layers once), one latent buffer.",
            summaries.material_pack_summary,
            arguments=(Arg("materials", "Materials (.json, .mtlx; baked here), glTF scenes (.gltf, .glb: each lit material of their meshes) "
                           "or baked neural material folders; material ids follow this order.", many=True),),
            rename={"latent_format": "latents", "bake.texture_size": "size", "bake.train.precision": "train-precision"},
            skip=("bake.material", "bake.material_name", "bake.shared_decoder"),
            notes={"bake.train.steps": "Left out: 30,000 on a GPU, 2,000 on a CPU.", "bake.verdict": "Off in a pack unless given."},
            out_help="Output folder: materials/<name>/ bakes, shader/ (Slang, HLSL, buffers, manifest), pack.json.",
        ),
        Registered(
            "ntc", ("ntc", "compress"), NTC,
            "Compress a texture set to texture.ntc at one or several bit rates.",
            summaries.ntc_summary,
            arguments=(Arg("sources", "Texture images (PATH or NAME=PATH; a group named normal keeps X and Y) or one .gltf file.", many=True, metavar="SOURCES"),),
            rename={"texture_size": "size"},
            notes={"train.steps": "Steps of the main (noise-quantised) phase.",
                   "kernels": "On a GPU auto trains with the step compiled into fused Triton kernels (TorchInductor; 1.9x faster on an H200) and decodes the report's levels with PyTorch (the fp32 decode kernels compile for minutes); triton runs both on kernels, torch neither."},
            out_help="Output folder (one rate), or parent of bpp_<X>/ folders (several rates).",
        ),
        Registered(
            "mipmap", ("mipmap",), MIPMAP,
            "Learn mip levels whose shading matches the downsampled full-resolution shading; compare with box and Toksvig.",
            summaries.mipmap_summary,
            arguments=(
                Arg("base_color", "Base colour map (sRGB), square, power-of-two side.", metavar="BASE_COLOR"),
                Arg("normal", "Tangent-space normal map (OpenGL +y, as glTF), same size as the base colour.", metavar="NORMAL"),
                Arg("roughness_map", "Optional roughness map: grey, or a glTF metallicRoughness map (G = roughness, B = metallic).",
                    optional=True, metavar="ROUGHNESS"),
            ),
            rename={"texture_size": "size", "directions_per_step": "directions"},
            notes={"train.precision": "Must be fp32 here."},
            check_arguments=check_map_paths,
            out_help="Output folder for the mip chain, comparison image and report.",
        ),
        Registered(
            "fit", ("fit",), FIT,
            "Fit the view-dependent PBR look of a glTF into an unlit LOD (texture in uv1, vertex colours, or luma + chroma).",
            summaries.fit_summary,
            arguments=(_ASSET,),
            rename={"texture_size": "size", "held_out_views": "held-out", "train.learning_rate": "lr"},
            skip=("train.steps", "train.log_every", "train.eval_every"),  # one log and one evaluation per epoch
            notes={"train.learning_rate": "Of the stored values (in [0, 1])."},
            out_help="Output folder for lod.gltf, the triptych and report.json.",
        ),
        Registered(
            "simplify", ("simplify",), SIMPLIFY,
            "Decimate a glTF (QEM, uv seams kept) and fit the coarse shape to renders of the original (large steps).",
            summaries.simplify_summary,
            arguments=(Arg("asset", "The glTF asset (.gltf or .glb).", metavar="ASSET"),),
            rename={"held_out_views": "held-out", "learning_rate": "lr"},
            out_help="Output folder for lod.glb, the triptych and report.json.",
        ),
        Registered(
            "skin", ("skin",), SKIN,
            "Skin a LOD like its original: weights transferred from the closest surface, then fitted over the original's animation.",
            summaries.skin_summary,
            arguments=(Arg("lod", "The LOD to skin (.gltf or .glb).", metavar="LOD"),),
            rename={"learning_rate": "lr"},
            out_help="Output folder for the skinned lod.glb, frames.png and report.json.",
        ),
        Registered(
            "lod", ("lod",), LOD,
            "Make a finished LOD of a PBR glTF: simplify, skin (when skinned and animated) and fit its look into an unlit texture or vertex colours.",
            summaries.lod_summary,
            arguments=(_ASSET,),
            rename={"texture_size": "size"},
            skip=("stage_options",),
            stage_field="stage_options",
            out_help="Output folder for lod.glb, the stages' pictures and report.json.",
        ),
        Registered(
            "postfx", ("postfx", "run"), POSTFX,
            "Run the AI render pass: conditions from the render's passes, diffusion with ControlNets and LoRAs, composition by masks, upscaler.",
            summaries.postfx_summary,
            arguments=(Arg("render", "The render (PNG, JPEG, OpenEXR), a folder of frames, or a .gltf/.glb scene neuralbake renders.", metavar="RENDER"),),
            rename={"controlnets": "controlnet", "loras": "lora", "negative_prompt": "negative"},
            skip=("passes",),
            notes={"passes": "config file only"},
            out_help="Output folder for result.png (or frames/), conditions/, comparison.png and report.json.",
        ),
        Registered(
            "postfx-lora", ("postfx", "lora"), LORA_TRAIN,
            "Train a style LoRA (peft) for a diffusion model on a folder of images, resumable; use it with `postfx --lora`.",
            summaries.postfx_lora_summary,
            arguments=(Arg("images", "Folder of training images (PNG or JPEG); IMAGE.txt beside an image is its caption.", metavar="IMAGES"),),
            rename={"learning_rate": "lr"},
            out_help="Output folder for lora.safetensors, samples.png and report.json.",
        ),
    )
}
"""Every bake, by job kind, in the order the command line lists them."""


def service_kinds() -> tuple[str, ...]:
    """The job kinds the asset service runs."""
    return tuple(kind for kind, entry in BAKES.items() if entry.service)


def registered(kind: str) -> Registered:
    """The entry of job kind ``kind``; a :class:`~neuralbake.errors.ConfigError` naming the kinds if unknown."""
    entry = BAKES.get(kind) if isinstance(kind, str) else None
    if entry is None or not entry.service:
        raise ConfigError(f"unknown job kind {str(kind)[:40]!r}.", field="kind", fix=f"use one of {', '.join(service_kinds())}.")
    return entry
