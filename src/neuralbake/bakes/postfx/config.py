"""The AI render pass's settings (:class:`PostfxConfig`, one :class:`PassConfig` per composition pass)
and the parsing of its ``PATH:WEIGHT`` and ``CONDITION=DIR:SCALE`` specs, apart from the bake that runs
them (:mod:`neuralbake.bakes.postfx.chain`) so the footprint and the service read them without the chain.

A config without a ``model`` is an upscale-only pass: the render goes through the upscaler alone, and
the settings only diffusion reads are refused rather than ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import torch

from neuralbake.bakes.config import SeededConfig
from neuralbake.core.paths import InputPathOrFolder, LibraryFolder, PathField
from neuralbake.errors import ConfigError

__all__ = [
    "CONDITION_NAMES",
    "LibraryControlNet",
    "LibraryLora",
    "PassConfig",
    "PostfxConfig",
    "device_defaults",
    "parse_controlnet",
    "parse_weighted",
    "split_controlnet",
    "split_weighted",
]

CONDITION_NAMES = ("canny", "depth", "normal", "segmentation")
"""Conditions a ControlNet spec can name."""


@dataclass
class PassConfig:
    """One composition pass: its own prompt, LoRAs and strength over the pixels of some ids."""

    ids: list[int] = field(default_factory=list)
    """Indexes (in the ids pass: object or material index) whose pixels this pass covers."""
    prompt: str = ""
    """The pass's prompt (empty: the chain's)."""
    negative_prompt: str = ""
    """The pass's negative prompt (empty: the chain's)."""
    loras: list[LibraryLora] = field(default_factory=list)
    """The pass's LoRAs as PATH or PATH:WEIGHT (empty: the chain's)."""
    strength: float | None = None
    """The pass's img2img strength (unset: the chain's)."""


@dataclass
class PostfxConfig(SeededConfig):
    """Everything that determines an AI render pass (``device`` and ``seed``, which seeds the starting noise of every frame, are the shared settings)."""

    render: InputPathOrFolder = ""
    """The render (PNG, JPEG, OpenEXR), a .gltf/.glb scene neuralbake renders with its passes, or a folder of frames."""
    depth: InputPathOrFolder = ""
    """OpenEXR with the Z pass (a folder of them for frames)."""
    normal: InputPathOrFolder = ""
    """OpenEXR with the Normal pass (a folder of them for frames)."""
    ids: InputPathOrFolder = ""
    """OpenEXR with the object or material index pass (a folder of them for frames)."""
    motion: InputPathOrFolder = ""
    """Folder of OpenEXR files with the Vector pass (Blender: motion to the previous frame in pixels), one per frame."""
    model: LibraryFolder = ""
    """Diffusion model folder in the diffusers layout (SD 1.x/2.x, SDXL or Flux)."""
    controlnets: list[LibraryControlNet] = field(default_factory=list)
    """ControlNets as CONDITION=DIR or CONDITION=DIR:SCALE; CONDITION is canny, depth, normal or segmentation."""
    loras: list[LibraryLora] = field(default_factory=list)
    """LoRA files (.safetensors, diffusers or kohya layout) as PATH or PATH:WEIGHT."""
    prompt: str = ""
    """What the result shows (the subject and look)."""
    negative_prompt: str = ""
    """What it must not show (SD and SDXL)."""
    strength: float = 0.5
    """How far the result may move from the render: 0 keeps it, 1 ignores it (img2img)."""
    steps: int | None = None
    """Denoising steps of the schedule; img2img runs strength x steps of them (unset: 20 on a GPU, 8 on a CPU)."""
    guidance: float = 7.0
    """Classifier-free guidance scale (1: off)."""
    scheduler: Literal["default", "ddim", "euler", "euler-a", "dpm++", "unipc", "lcm"] = "default"
    """Sampler; `default` keeps the model's own."""
    size: int | None = None
    """Longest side the diffusion works at; larger renders are reduced to it (unset: 1024 on a GPU, 512 on a CPU)."""
    passes: list[PassConfig] = field(default_factory=list)
    """Composition passes (config file: [[passes]] tables with ids, prompt, loras, strength)."""
    feather: float = 2.0
    """Softness of the composition masks' edges, in pixels (Gaussian sigma)."""
    temporal: float = 0.5
    """Animation: share of the previous output (warped by the motion vectors if given) in the next frame's img2img start."""
    upscale: int = 1
    """Real-ESRGAN enlargement: 1 (off), 2, 3 or 4."""
    upscaler: Literal["x4plus", "x4plus-anime", "animevideo"] = "x4plus"
    """Real-ESRGAN network: x4plus (renders, photographs), x4plus-anime (flat art), animevideo (native 2x/3x/4x)."""
    upscale_tile: int = 256
    """Tile side of the upscaler (0: automatic)."""
    upscale_gpu: int | None = None
    """Vulkan GPU the upscaler runs on, -1 for the CPU (unset: GPU 0 when the chain runs on CUDA and Vulkan sees a GPU, else the CPU)."""
    canny_low: int = 100
    """Canny's lower hysteresis threshold."""
    canny_high: int = 200
    """Canny's upper hysteresis threshold."""
    world_to_view: list[float] = field(default_factory=list)
    """The camera's rotation as 9 numbers, row by row (right, up, towards the camera), when the normal pass is in world
    space (Blender's is); empty: the normals are already in view space."""
    scene_size: int = 512
    """Render side when the input is a glTF scene."""
    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    """Network precision (auto: fp16 on a GPU, bf16 for Flux, fp32 on a CPU)."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""
        if not self.render:
            raise ConfigError("no render given.", field="render", fix="pass the rendered image, a frames folder or a glTF scene.")
        if not self.model:
            self._check_upscale_only()
        for name, value, low, top in (("strength", self.strength, 0.0, 1.0), ("temporal", self.temporal, 0.0, 1.0), ("guidance", self.guidance, 0.0, 50.0),
                                      ("feather", self.feather, 0.0, 64.0)):
            if not math.isfinite(value) or not low <= value <= top:
                raise ConfigError(f"{name} must be in [{low:g}, {top:g}], got {value!r}.", field=name, fix=f"pass a value in [{low:g}, {top:g}].")
        for name, low, top in (("steps", 1, 1000), ("size", 64, 4096), ("scene_size", 16, 4096), ("canny_low", 0, 255), ("canny_high", 0, 255)):
            value = getattr(self, name)
            if value is not None and not low <= value <= top:
                raise ConfigError(f"{name} must be in [{low}, {top}], got {value!r}.", field=name, fix=f"pass a value in [{low}, {top}].")
        if self.upscale not in (1, 2, 3, 4):
            raise ConfigError(f"upscale must be 1, 2, 3 or 4, got {self.upscale!r}.", field="upscale", fix="pass 1 (off), 2 or 4.")
        if self.upscale_gpu is not None and self.upscale_gpu < -1:
            raise ConfigError(f"upscale_gpu must be -1 (the CPU) or a Vulkan GPU index, got {self.upscale_gpu}.", field="upscale_gpu", fix="pass -1 or 0.")
        if self.upscale_tile != 0 and self.upscale_tile < 32:
            raise ConfigError(f"upscale_tile must be 0 or at least 32, got {self.upscale_tile}.", field="upscale_tile", fix="pass 0 or e.g. 256.")
        for spec in self.controlnets:
            parse_controlnet(spec)
        for where, specs in [("loras", self.loras)] + [(f"passes[{i}].loras", p.loras) for i, p in enumerate(self.passes)]:
            for spec in specs:
                parse_weighted(spec, where)
        for i, p in enumerate(self.passes):
            if not p.ids:
                raise ConfigError("the pass names no ids.", field=f"passes[{i}].ids", fix="list the indexes it covers, e.g. ids = [2].")
            if p.strength is not None and not 0.0 <= p.strength <= 1.0:
                raise ConfigError(f"strength must be in [0, 1], got {p.strength!r}.", field=f"passes[{i}].strength", fix="pass a value in [0, 1].")
        if self.world_to_view and (len(self.world_to_view) != 9 or not all(math.isfinite(v) for v in self.world_to_view)):
            raise ConfigError(f"world_to_view must be 9 finite numbers, got {len(self.world_to_view)}.", field="world_to_view",
                              fix="pass the camera's 3x3 world-to-view rotation row by row, or leave it empty for view-space normals.")
        if self.passes and not self.ids and Path(self.render).suffix.lower() not in (".gltf", ".glb"):
            raise ConfigError("composition passes need the ids pass.", field="ids", fix="pass --ids with the object or material index pass.")

    def _check_upscale_only(self) -> None:
        """Without a model only the upscaler runs: a setting that only diffusion reads is a mistake, not a no-op."""
        needing = [name for name in ("prompt", "negative_prompt", "controlnets", "loras", "passes", "motion") if getattr(self, name)]
        if needing:
            raise ConfigError(f"{', '.join(needing)} {'needs' if len(needing) == 1 else 'need'} a diffusion model, and none is given.", field="model",
                              fix=f"pass --model DIR, a diffusers-layout model folder; or drop {'it' if len(needing) == 1 else 'them'} for an upscale-only pass "
                                  "(--upscale 2, 3 or 4).")
        if self.upscale == 1:
            raise ConfigError("no diffusion model given, and no upscale: there is nothing to do.", field="model",
                              fix="pass --model DIR, a diffusers-layout model folder (`neuralbake postfx make-model` writes a random one for trials), "
                                  "or --upscale 2, 3 or 4 for an upscale-only pass.")


def split_weighted(spec: str) -> tuple[str, str, str]:
    """``PATH`` or ``PATH:WEIGHT`` -> (``""``, path, ``":WEIGHT"`` or ``""``): the path and the text around it."""
    path, sep, tail = spec.rpartition(":")
    if sep and path and not tail.startswith(("/", "\\")):
        try:
            float(tail)
        except ValueError:
            return "", spec, ""
        return "", path, sep + tail
    return "", spec, ""


def split_controlnet(spec: str) -> tuple[str, str, str]:
    """``CONDITION=DIR[:SCALE]`` -> (``"CONDITION="``, folder, ``":SCALE"`` or ``""``)."""
    condition, sep, rest = spec.partition("=")
    if not sep:
        return "", spec, ""
    _, path, tail = split_weighted(rest)
    return condition + sep, path, tail


LibraryControlNet = Annotated[str, PathField(folder=True, library=True, split=split_controlnet)]
"""``CONDITION=DIR[:SCALE]``, DIR a ControlNet folder."""
LibraryLora = Annotated[str, PathField(library=True, split=split_weighted)]
"""``PATH[:WEIGHT]``, PATH a LoRA file."""


def parse_weighted(spec: str, field_name: str) -> tuple[str, float]:
    """``PATH`` or ``PATH:WEIGHT`` -> (path, weight); the weight defaults to 1."""
    _, path, tail = split_weighted(spec)
    weight = float(tail[1:]) if tail else 1.0
    if not math.isfinite(weight) or not -4.0 <= weight <= 4.0:
        raise ConfigError(f"the weight in {spec!r} must be a number in [-4, 4].", field=field_name, fix="write PATH:0.8.")
    if not path:
        raise ConfigError(f"{spec!r} names no file.", field=field_name, fix="write PATH or PATH:WEIGHT.")
    return path, weight


def parse_controlnet(spec: str) -> tuple[str, str, float]:
    """``CONDITION=DIR[:SCALE]`` -> (condition, folder, scale)."""
    condition, sep, rest = spec.partition("=")
    if not sep or condition not in CONDITION_NAMES:
        raise ConfigError(f"{spec!r} is not CONDITION=DIR with CONDITION one of {', '.join(CONDITION_NAMES)}.", field="controlnets",
                          fix="write e.g. depth=models/controlnet-depth:0.8.")
    path, scale = parse_weighted(rest, "controlnets")
    return condition, path, scale


def device_defaults(config: PostfxConfig, device: torch.device) -> dict[str, Any]:
    """Full size and schedule on a GPU; on a CPU, fewer steps and a smaller working size."""
    if device.type == "cuda":
        return {"steps": 20, "size": 1024}
    return {"steps": 8, "size": 512}
