"""The AI render pass (seed 004) as a bake on the one run path: render -> conditions -> diffusion
(ControlNets for structure, LoRAs for style, the prompt for the subject) -> composition by masks
-> upscaler, for one frame or a frame sequence.

- **Input**: a render (PNG, JPEG or OpenEXR) with optional Z / normal / index passes (OpenEXR, as
  Blender writes them), a glTF scene neuralbake renders with its own passes, or a folder of frames
  (and folders of passes, matched in name order) for an animation.
- **Conditions** (:mod:`neuralbake.postfx.conditions`): one per ControlNet, named by the ControlNet
  spec ``canny=DIR``, ``depth=DIR:0.8``, ``normal=DIR``, ``segmentation=DIR``.
- **Diffusion** (diffusers): img2img from the render at ``strength``, with every ControlNet, the
  LoRAs of the pass at their weights, a fixed seed. Models come from local folders only
  (:mod:`neuralbake.postfx.models`).
- **Composition** (:mod:`neuralbake.postfx.compose`): the base pass covers the frame; each entry of
  ``passes`` (a config file's ``[[passes]]``) is run with its own prompt / LoRAs / strength and laid
  over the pixels of its ids, feathered.
- **Upscaler** (:mod:`neuralbake.postfx.upscale`): Real-ESRGAN x2 / x4, tiled.
- **Animation**: every frame with the same seed (same starting noise); from the second frame on the
  img2img start is the render blended with the previous output (``temporal``), warped by the motion
  vectors when a ``motion`` folder is given. The report's temporal figure is the mean frame-to-frame
  difference of the output against that of the input renders.

Outputs: ``result.png`` (one frame) or ``frames/NNNN.png``, ``conditions/`` (the first frame's
conditions), ``comparison.png`` (render | conditions | result) and ``report.json`` with the model,
ControlNets, LoRAs, timings per stage and seconds per frame. Finished frames are checkpointed, so
``--resume`` continues a stopped sequence at the first missing frame.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch

from neuralbake.bakes.footprint import MIB, PROCESS_BYTES, dominant_field, footprint
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, Footprint
from neuralbake.core.paths import InputPathOrFolder, LibraryFolder, PathField
from neuralbake.errors import ConfigError, InputError

__all__ = [
    "CONDITION_NAMES",
    "POSTFX",
    "SD15",
    "TINY",
    "DiffusionSize",
    "PassConfig",
    "PostfxConfig",
    "parse_controlnet",
    "parse_weighted",
    "postfx_footprint",
]

CONDITION_NAMES = ("canny", "depth", "normal", "segmentation")
"""Conditions a ControlNet spec can name."""

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".exr")

FRAMES_FILE = "frames.pt"
"""The chain's checkpoint: how many frames finished, and a fingerprint of the settings they were made with."""


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
class PostfxConfig:
    """Everything that determines an AI render pass."""

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
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""
    seed: int = 0
    """Seeds the starting noise (the same for every frame)."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""
        if not self.render:
            raise ConfigError("no render given.", field="render", fix="pass the rendered image, a frames folder or a glTF scene.")
        if not self.model:
            raise ConfigError("no diffusion model given.", field="model",
                              fix="pass --model DIR, a diffusers-layout model folder (`neuralbake postfx make-model` writes a random one for trials).")
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


# -- inputs ----------------------------------------------------------------------------------


@dataclass
class _Frame:
    name: str
    render: Path
    depth: Path | None = None
    normal: Path | None = None
    ids: Path | None = None
    motion: Path | None = None


def _listing(folder: Path, field_name: str) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in _IMAGE_SUFFIXES)
    if not files:
        raise InputError("the folder holds no frames (PNG, JPEG or OpenEXR).", path=folder, field=field_name, fix="render the frames into it.")
    return files


def _frames(config: PostfxConfig) -> list[_Frame]:
    render = Path(config.render)
    if not render.exists():
        raise InputError("the render does not exist.", path=render, field="render", fix="pass the rendered image, a folder of frames or a glTF scene.")
    passes = {name: getattr(config, name) for name in ("depth", "normal", "ids", "motion")}
    if render.is_dir():
        renders = _listing(render, "render")
        columns: dict[str, list[Path]] = {}
        for name, value in passes.items():
            if not value:
                continue
            folder = Path(value)
            if not folder.is_dir():
                raise InputError("the render is a folder of frames, so this pass must be a folder of per-frame files.", path=folder, field=name,
                                 fix="pass the folder the pass's frames were written to.")
            files = _listing(folder, name)
            if len(files) != len(renders):
                raise InputError(f"holds {len(files)} frames but the render folder holds {len(renders)}.", path=folder, field=name,
                                 fix="render the pass for every frame (they are matched in name order).")
            columns[name] = files
        return [_Frame(r.stem, r, **{k: v[i] for k, v in columns.items()}) for i, r in enumerate(renders)]
    if config.motion:
        raise InputError("motion vectors need a frame sequence.", path=Path(config.motion), field="motion", fix="pass a folder of frames as the render, or drop --motion.")
    given = {k: Path(v) for k, v in passes.items() if v and k != "motion"}
    for name, path in given.items():
        if not path.is_file():
            raise InputError(f"the {name} pass file does not exist.", path=path, field=name, fix="pass the OpenEXR the pass was saved to.")
    return [_Frame(render.stem, render, **given)]


def _read_frame(frame: _Frame, config: PostfxConfig) -> Any:
    from neuralbake.postfx.conditions import load_render, read_exr_passes, scene_passes

    if frame.render.suffix.lower() in (".gltf", ".glb"):
        if any(getattr(config, k) for k in ("depth", "normal", "ids")):
            raise InputError("a glTF scene brings its own passes.", path=frame.render, field="render", fix="drop --depth / --normal / --ids, or pass a rendered image.")
        return scene_passes(frame.render, config.scene_size)
    image = load_render(frame.render)
    rotation = np.asarray(config.world_to_view, dtype=np.float32).reshape(3, 3) if config.world_to_view else None
    passes = read_exr_passes(depth=frame.depth, normal=frame.normal, ids=frame.ids, world_to_view=rotation)
    passes.image = image
    for name in ("depth", "normal", "ids"):
        value = getattr(passes, name)
        if value is not None and value.shape[:2] != image.shape[:2]:
            raise InputError(f"the {name} pass is {value.shape[1]}x{value.shape[0]} but the render is {image.shape[1]}x{image.shape[0]}.",
                             path=getattr(frame, name), field=name, fix="render the passes in the same render as the image.")
    return passes


def _motion(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """``[H, W, 2]`` pixel offsets (x right, y down) from each pixel to where it was in the previous frame."""
    from neuralbake.postfx.conditions import pick_channels, read_exr_channels

    found = pick_channels(read_exr_channels(path, field="motion"), [["Vector.X", "Vector.Y"], ["X", "Y"], ["R", "G"]])
    if found is None:
        raise InputError("the file has no motion channels (Vector.X/Y, X/Y or R/G).", path=path, field="motion",
                         fix="render with the Vector pass on (Blender: View Layer Properties > Passes > Data > Vector; motion blur off).")
    vector = np.nan_to_num(np.stack(found, -1).astype(np.float32))
    if vector.shape[:2] != shape:
        raise InputError(f"the motion pass is {vector.shape[1]}x{vector.shape[0]} but the render is {shape[1]}x{shape[0]}.", path=path, field="motion",
                         fix="render the Vector pass with the frame.")
    # Blender's pixel y runs up; image rows run down.
    vector[..., 1] = -vector[..., 1]
    return vector


def warp(image: np.ndarray, motion: np.ndarray) -> np.ndarray:
    """The previous frame's ``image`` moved to this frame: each pixel takes the previous frame's
    colour at ``pixel + motion`` (bilinear; edges clamped)."""
    import cv2

    height, width = image.shape[:2]
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    return cv2.remap(image.astype(np.float32), xs + motion[..., 0], ys + motion[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


# -- the chain -------------------------------------------------------------------------------


def _resize(image: np.ndarray, width: int, height: int, *, nearest: bool = False) -> np.ndarray:
    import cv2

    if image.shape[1] == width and image.shape[0] == height:
        return image
    if nearest:
        mode = cv2.INTER_NEAREST
    else:
        mode = cv2.INTER_AREA if width < image.shape[1] else cv2.INTER_CUBIC
    return np.clip(cv2.resize(image, (width, height), interpolation=mode), 0.0, 1.0) if not nearest else cv2.resize(image, (width, height), interpolation=mode)


def _working_size(width: int, height: int, longest: int, multiple: int) -> tuple[int, int]:
    scale = min(1.0, longest / max(width, height))
    return (max(multiple, round(width * scale / multiple) * multiple), max(multiple, round(height * scale / multiple) * multiple))


def _pil(image: np.ndarray) -> Any:
    from PIL import Image

    return Image.fromarray((np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8))


def _conditions(passes: Any, wanted: list[str], config: PostfxConfig, frame: _Frame) -> dict[str, np.ndarray]:
    from neuralbake.postfx.conditions import PASS_FIXES, canny_condition, depth_condition, normal_condition, segmentation_condition

    made: dict[str, np.ndarray] = {}
    for name in wanted:
        if name in made:
            continue
        source = {"depth": "depth", "normal": "normal", "segmentation": "ids"}.get(name)
        if source is not None and getattr(passes, source) is None:
            raise InputError(f"a {name} ControlNet is given but the frame has no {source} pass.", path=frame.render, field=source,
                             fix=f"pass --{source} with the pass file: {PASS_FIXES[source]}")
        if name == "canny":
            made[name] = canny_condition(passes.image, low=config.canny_low, high=config.canny_high)
        elif name == "depth":
            made[name] = depth_condition(passes.depth)
        elif name == "normal":
            made[name] = normal_condition(passes.normal, passes.world_to_view)
        else:
            made[name] = segmentation_condition(passes.ids)
    return made


def _check_file(path: str, field_name: str, what: str) -> Path:
    file = Path(path)
    if not file.is_file():
        raise InputError(f"the {what} file does not exist.", path=file, field=field_name, fix=f"pass the path of the {what} (.safetensors).")
    return file


class Chain:
    """A loaded pipeline with its ControlNets and LoRA adapters, called once per frame and pass."""

    def __init__(self, pipe: Any, family: str, controls: list[tuple[str, str, float]], config: PostfxConfig, *, adapters: dict[str, str] | None = None,
                 precision: str = "fp32", load_seconds: float = 0.0) -> None:
        self.pipe = pipe
        self.family = family
        self.controls = controls
        """``(condition, ControlNet folder, scale)`` in the pipeline's ControlNet order."""
        self.config = config
        self.adapters = adapters or {}
        """LoRA file -> adapter name in the pipeline."""
        self.precision = precision
        self.load_seconds = load_seconds
        self.model: Path | None = None
        """The model folder (``None`` for a pipeline built in memory)."""
        vae_factor = 2 ** (len(pipe.vae.config.block_out_channels) - 1)
        depth = len(pipe.unet.config.block_out_channels) - 1 if hasattr(pipe, "unet") else 1
        self.multiple = vae_factor * 2**depth
        """Sides the working image is rounded to (the VAE's and the UNet's downsampling)."""

    @classmethod
    def load(cls, config: PostfxConfig, device: torch.device, note: Any = None) -> Chain:
        """Check and load ``config``'s model, ControlNets and LoRAs from their folders."""
        from neuralbake.postfx.models import inspect_model, load_pipeline

        info = inspect_model(config.model)
        controls = [parse_controlnet(spec) for spec in config.controlnets]
        for _, path, _ in controls:
            if not Path(path).is_dir():
                raise InputError("the ControlNet folder does not exist.", path=Path(path), field="controlnets",
                                 fix="pass a ControlNet folder in the diffusers layout (config.json + weights).")
        precision = config.precision
        if precision == "auto":
            precision = "fp32" if device.type != "cuda" else ("bf16" if info.family == "flux" else "fp16")
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        started = time.perf_counter()
        pipe = load_pipeline(info, [Path(p) for _, p, _ in controls], device=device, dtype=dtype, scheduler=config.scheduler)
        adapters: dict[str, str] = {}
        for spec in [*config.loras, *(spec for p in config.passes for spec in p.loras)]:
            path, _ = parse_weighted(spec, "loras")
            if path in adapters:
                continue
            file = _check_file(path, "loras", "LoRA")
            name = f"lora_{len(adapters)}"
            try:
                pipe.load_lora_weights(str(file), adapter_name=name)
            except (ValueError, KeyError, RuntimeError, OSError) as exc:
                raise InputError(f"the LoRA does not fit this model ({str(exc).splitlines()[0][:300]}).", path=file, field="loras",
                                 fix=f"pass a LoRA trained for a {info.family} model (.safetensors in the diffusers or kohya layout).") from exc
            adapters[path] = name
        chain = cls(pipe, info.family, controls, config, adapters=adapters, precision=precision, load_seconds=time.perf_counter() - started)
        chain.model = info.path
        if note is not None:
            note(f"postfx: {info.family} model {info.path.name} ({precision}), {len(controls)} ControlNet(s), {len(adapters)} LoRA(s), "
                 f"loaded in {chain.load_seconds:.1f} s")
        return chain

    def diffuse(self, init: np.ndarray, controls: list[np.ndarray], *, prompt: str, negative: str, loras: list[str], strength: float) -> np.ndarray:
        config = self.config
        if self.adapters:
            weighted = [parse_weighted(spec, "loras") for spec in loras]
            if weighted:
                self.pipe.enable_lora()
                self.pipe.set_adapters([self.adapters[p] for p, _ in weighted], adapter_weights=[w for _, w in weighted])
            else:
                self.pipe.disable_lora()
        kwargs: dict[str, Any] = {"prompt": prompt, "image": _pil(init), "strength": strength, "num_inference_steps": config.steps, "guidance_scale": config.guidance,
                                      "generator": torch.Generator("cpu").manual_seed(config.seed), "output_type": "np"}
        if negative and self.family != "flux":
            kwargs["negative_prompt"] = negative
        if controls:
            images = [_pil(c) for c in controls]
            scales = [s for _, _, s in self.controls]
            kwargs["control_image"] = images[0] if len(images) == 1 else images
            kwargs["controlnet_conditioning_scale"] = scales[0] if len(scales) == 1 else scales
        if strength <= 0.0:
            return init
        with torch.inference_mode():
            result = self.pipe(**kwargs).images[0]
        return np.asarray(result, dtype=np.float32)


def _upscale_gpu(config: PostfxConfig, device: torch.device) -> int:
    if config.upscale_gpu is not None:
        return config.upscale_gpu
    if config.upscale == 1 or device.type != "cuda":
        return -1
    from neuralbake.postfx.upscale import vulkan_devices

    return 0 if vulkan_devices() > 0 else -1


def _fingerprint(config: PostfxConfig) -> str:
    """What the frames depend on: every setting but the device (a frame made on one machine stands)."""
    import dataclasses
    import hashlib
    import json

    data = dataclasses.asdict(config)
    for name in ("device", "upscale_gpu"):
        data.pop(name, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _body(run: BakeRun) -> BakeOutcome:
    from neuralbake.io.files import atomic_path
    from neuralbake.io.images import load_image, save_png
    from neuralbake.postfx.compose import compose, pass_mask
    from neuralbake.postfx.conditions import id_masks
    from neuralbake.postfx.upscale import upscale
    from neuralbake.render.pictures import panel_grid

    config: PostfxConfig = run.config
    started = time.perf_counter()
    frames = _frames(config)
    chain = Chain.load(config, run.device, run.note)
    out = run.stage
    done_dir = run.checkpoints / "frames"
    fingerprint = _fingerprint(config)
    record = run.checkpoints / FRAMES_FILE
    if run.resume and record.is_file():
        saved = torch.load(record, weights_only=True)
        if saved.get("fingerprint") != fingerprint:
            run.note("postfx: the settings changed since the stopped run; its frames are not reused")
            shutil.rmtree(done_dir, ignore_errors=True)
    elif not run.resume:
        shutil.rmtree(done_dir, ignore_errors=True)
    done_dir.mkdir(parents=True, exist_ok=True)
    upscale_gpu = _upscale_gpu(config, run.device)
    timings = {"conditions": 0.0, "diffusion": 0.0, "composition": 0.0, "upscale": 0.0}
    sequence = len(frames) > 1
    if sequence:
        (out / "frames").mkdir(exist_ok=True)
    previous: np.ndarray | None = None
    # the temporal figure from running sums: a long sequence is never held in memory
    shown: np.ndarray | None = None  # the first frame's result at the render's size, for comparison.png
    last_in: np.ndarray | None = None
    last_out: np.ndarray | None = None
    change_in_sum = change_out_sum = 0.0
    first_size: tuple[int, int] = (0, 0)
    first: dict[str, Any] = {}
    resumed = 0
    diffused = 0
    with run.task("postfx frames", len(frames), unit="frame") as advance:
        for index, frame in enumerate(frames):
            passes = _read_frame(frame, config)
            height, width = passes.image.shape[:2]
            work_w, work_h = _working_size(width, height, config.size, chain.multiple)
            done = done_dir / f"{index:05d}.png"
            if run.resume and done.is_file():
                result, _ = load_image(done)
                resumed += 1
            else:
                t = time.perf_counter()
                conditions = _conditions(passes, [name for name, _, _ in chain.controls], config, frame)
                if index == 0:
                    first = {"conditions": conditions, "passes": passes}
                controls = [_resize(conditions[name], work_w, work_h, nearest=name == "segmentation") for name, _, _ in chain.controls]
                timings["conditions"] += time.perf_counter() - t
                init = passes.image
                if previous is not None and config.temporal > 0:
                    prev = _resize(previous, width, height)
                    if frame.motion is not None:
                        prev = warp(prev, _motion(frame.motion, (height, width)))
                    init = (1.0 - config.temporal) * init + config.temporal * prev
                init_small = _resize(init, work_w, work_h)
                t = time.perf_counter()
                base = chain.diffuse(init_small, controls, prompt=config.prompt, negative=config.negative_prompt, loras=config.loras, strength=config.strength)
                layers = []
                if config.passes:
                    ids = passes.ids
                    if ids is None:
                        raise InputError("composition passes need the ids pass.", path=frame.render, field="ids", fix="pass --ids with the index pass.")
                    known = set(id_masks(ids))
                    small_ids = _resize(ids.astype(np.float32), work_w, work_h, nearest=True).round().astype(np.int32)
                    for k, p in enumerate(config.passes):
                        missing = sorted(set(p.ids) - known)
                        if missing and index == 0:
                            run.note(f"postfx: pass {k} names ids {missing} that no pixel of the first frame has")
                        image = chain.diffuse(init_small, controls, prompt=p.prompt or config.prompt, negative=p.negative_prompt or config.negative_prompt,
                                              loras=p.loras or config.loras, strength=config.strength if p.strength is None else p.strength)
                        layers.append((image, pass_mask(small_ids, p.ids)))
                diffused += 1
                timings["diffusion"] += time.perf_counter() - t
                t = time.perf_counter()
                result = compose(base, layers, radius=config.feather * work_w / width) if layers else base
                result = _resize(result, width, height)
                timings["composition"] += time.perf_counter() - t
                t = time.perf_counter()
                result = upscale(result, config.upscale, network=config.upscaler, tile=config.upscale_tile, gpu=upscale_gpu)
                timings["upscale"] += time.perf_counter() - t
                result = np.round(np.clip(result, 0.0, 1.0) * 255.0) / 255.0  # as saved: a resumed sequence continues from the same values
                save_png(done, result)
                with atomic_path(record) as tmp:
                    torch.save({"fingerprint": fingerprint, "frames": index + 1}, tmp)
            if index == 0 and not first:
                first = {"conditions": _conditions(passes, [name for name, _, _ in chain.controls], config, frame), "passes": passes}
            save_png(out / "frames" / f"{frame.name}.png" if sequence else out / "result.png", result)
            previous = result
            at_render_size = _resize(result, width, height) if config.upscale > 1 else result
            if last_in is not None:
                change_in_sum += float(np.abs(passes.image - last_in).mean())
                change_out_sum += float(np.abs(at_render_size - last_out).mean())
            last_in, last_out = passes.image, at_render_size
            if shown is None:
                shown, first_size = at_render_size, (width, height)
            advance(1)

    (out / "conditions").mkdir(exist_ok=True)
    for name, image in first["conditions"].items():
        save_png(out / "conditions" / f"{name}.png", image)
    panels = [first["passes"].image, *first["conditions"].values(), shown]
    save_png(out / "comparison.png", panel_grid([panels]))
    seconds = time.perf_counter() - started
    chain_seconds = sum(timings.values())
    metrics: dict[str, Any] = {"frames": len(frames), "seconds_per_frame": chain_seconds / diffused if diffused else None}
    fields: dict[str, Any] = {
        "model": str(chain.model),
        "family": chain.family,
        "pipeline": type(chain.pipe).__name__,
        "precision": chain.precision,
        "controlnets": [{"condition": c, "model": p, "scale": s} for c, p, s in chain.controls],
        "loras": [{"file": p, "weight": w} for p, w in (parse_weighted(s, "loras") for s in config.loras)],
        "passes": len(config.passes),
        "denoising_steps_run": int(config.steps * config.strength),
        "working_size": list(_working_size(first_size[0], first_size[1], config.size, chain.multiple)),
        "output_size": [first_size[0] * config.upscale, first_size[1] * config.upscale],
        "upscale": config.upscale,
        "upscaler_device": None if config.upscale == 1 else ("cpu" if upscale_gpu < 0 else f"vulkan:{upscale_gpu}"),
        "timings_seconds": {"load": chain.load_seconds, **timings},
        "seconds_per_frame_definition": "conditions + diffusion (every pass) + composition + upscale per frame run here; not the model load, "
                                        "reading the inputs or rendering a glTF scene",
        "frames_diffused": diffused,
        "frames_resumed": resumed,
        "seconds": seconds,
        "outputs": ["frames/" if sequence else "result.png", "conditions/", "comparison.png"],
    }
    if sequence:
        change_in, change_out = change_in_sum / (len(frames) - 1), change_out_sum / (len(frames) - 1)
        metrics["temporal_ratio"] = change_out / change_in if change_in > 0 else None
        fields["temporal"] = {
            "input_frame_change": change_in,
            "output_frame_change": change_out,
            "definition": "mean absolute frame-to-frame difference of the output (at the render's size) against that of the input renders; "
                          "1 = the output flickers no more than the render moves",
            "blend": config.temporal,
            "motion_vectors": bool(config.motion),
        }
    return BakeOutcome(metrics, fields, curve_title=None)


# -- footprint --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffusionSize:
    """What a footprint assumes of a diffusion model it does not read: its weights and its activations."""

    name: str
    parameters: int
    """Parameters of the pipeline: UNet (or transformer), text encoder(s) and VAE."""
    controlnet_parameters: int
    """Parameters of one ControlNet for it."""
    inference_values: int
    """Values a UNet evaluation holds at its peak per latent pixel (no autograd; attention by PyTorch's
    fused scaled-dot-product kernels, which keep no attention matrix): the skip connections and a block's
    temporaries."""
    training_values: int
    """Values a UNet evaluation keeps per latent pixel for its backward pass (every resnet's and
    transformer's inputs, norms, projections and feed-forward activations)."""
    vae_values: int
    """Values the VAE's encoder or decoder holds at its peak per image pixel (its top blocks run at full resolution)."""
    lora_parameters_per_rank: int
    """LoRA parameters per unit of rank on the attention projections (:data:`neuralbake.postfx.lora.LORA_TARGETS`)."""


SD15 = DiffusionSize("SD 1.5", parameters=1_066_000_000, controlnet_parameters=361_000_000, inference_values=6_000, training_values=100_000,
                     vae_values=800, lora_parameters_per_rank=199_000)
"""Stable Diffusion 1.5's shapes (860 M UNet, 123 M text encoder, 84 M VAE; an SD 1.5 ControlNet 361 M),
the model the footprints assume: the smallest family the chain runs. An SDXL folder is about 3x its
weights, a Flux one 11x; a service that offers those should size ``--job-memory`` for them. The
activation figures count the UNet's layers (320-1280 channels over four levels) and the VAE's
(128-512 channels, its last blocks at full resolution)."""
TINY = DiffusionSize("tiny random", parameters=116_451, controlnet_parameters=27_932, inference_values=150, training_values=2_500,
                     vae_values=50, lora_parameters_per_rank=688)
"""The tiny random model of ``neuralbake postfx make-model`` (tests, ``bench/footprints.py``): the same
arithmetic with its parameter counts, its activations scaled by its channels (8-16 against 320)."""

CHAIN_BASE_BYTES = PROCESS_BYTES + 384 * MIB
"""The process's base with diffusers, transformers, OpenCV and the upscaler's ncnn loaded."""
IMAGE_COPIES = 12
"""Float32 RGB copies of a frame the chain holds: the render and its passes, the conditions and their
resized copies, the img2img start, the result, its resized and rounded copies, the comparison panels."""
ESRGAN_BYTES_PER_TILE_PIXEL = 64 * 4 * 42
"""Real-ESRGAN x4plus on a tile, per input pixel: its 64-channel features (a dense block's concatenated
ones) in float32, and the 4x upsampled tail (16x the pixels)."""


def _network_bytes(precision: str, device: torch.device) -> int:
    if precision == "auto":
        return 2 if device.type == "cuda" else 4
    return 4 if precision == "fp32" else 2


def postfx_memory(config: PostfxConfig, device: torch.device, model: DiffusionSize = SD15) -> dict[str, float]:
    """Bytes by the setting that drives them: the model's and the ControlNets' weights (``model``,
    ``controlnets``; assumed, see :data:`SD15`), a denoising step's and the VAE's activations at the working
    size, with classifier-free guidance doubling the batch, and a frame's images (``size``; the render is
    taken at the working size: a larger render's own copies are left to the image reader, which checks its
    decoded size), the composition passes' results (``passes``) and the upscaler's tiles and output
    (``upscale``, ``upscale_tile``)."""
    values = _network_bytes(config.precision, device)
    side = config.size or 0
    pixels = side * side
    latent = pixels / 64
    batch = 2 if config.guidance > 1.0 else 1
    nets = len(config.controlnets)
    unet = batch * latent * model.inference_values * (1 + 0.5 * nets) * values  # a ControlNet is the UNet's encoder half
    tile = config.upscale_tile or 400
    return {
        "model": model.parameters * values,
        "controlnets": nets * model.controlnet_parameters * values,
        "size": unet + pixels * model.vae_values * values + pixels * 3 * 4 * IMAGE_COPIES,
        "passes": len(config.passes) * pixels * 4 * 4 * 2,
        "upscale": (pixels * config.upscale**2 * 3 * 5) if config.upscale > 1 else 0,
        "upscale_tile": (tile * tile * ESRGAN_BYTES_PER_TILE_PIXEL) if config.upscale > 1 else 0,
    }


def postfx_steps(config: PostfxConfig) -> int:
    """Denoising steps of a frame: ``strength`` x ``steps`` for the base pass and each composition pass
    (a frame sequence runs them per frame; its length is known only once its folder is read)."""
    return math.ceil((config.steps or 0) * config.strength) * (1 + len(config.passes))


def postfx_footprint(config: PostfxConfig, device: torch.device) -> Footprint:
    """Peak memory of the render pass (:func:`postfx_memory` on top of its base) and its denoising steps."""
    terms = postfx_memory(config, device)
    total = lambda c, d: sum(postfx_memory(c, d).values())  # noqa: E731
    knobs = {"size": 1024 if device.type == "cuda" else 512, "upscale": 1, "upscale_tile": 256, "precision": "auto"}
    field = dominant_field(total, config, device, knobs, fallback=max(terms, key=lambda k: terms[k]))
    return footprint(terms, steps=postfx_steps(config), steps_field="steps", base=CHAIN_BASE_BYTES, field=field)


POSTFX: Bake[PostfxConfig] = Bake("postfx", PostfxConfig, _body, device_defaults, title="postfx", footprint=postfx_footprint)
"""The AI render pass on the one run path."""
