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
  (:mod:`neuralbake.postfx.models`). Settings and their parsing: :mod:`neuralbake.bakes.postfx.config`;
  the memory estimate: :mod:`neuralbake.bakes.postfx.footprint`.
- **Composition** (:mod:`neuralbake.postfx.compose`): the base pass covers the frame; each entry of
  ``passes`` (a config file's ``[[passes]]``) is run with its own prompt / LoRAs / strength and laid
  over the pixels of its ids, feathered.
- **Upscaler** (:mod:`neuralbake.postfx.upscale`): Real-ESRGAN x2 / x4, tiled. Without a ``model`` the
  pass is upscale-only: no conditions, no diffusion, the render goes through the upscaler alone.
- **Animation**: every frame with the same seed (same starting noise); from the second frame on the
  img2img start is the render blended with the previous output (``temporal``), warped by the motion
  vectors (:mod:`neuralbake.postfx.motion`) when a ``motion`` folder is given. The report's temporal figure is the mean frame-to-frame
  difference of the output against that of the input renders.

Outputs: ``result.png`` (one frame) or ``frames/NNNN.png``, ``conditions/`` (the first frame's
conditions), ``comparison.png`` (render | conditions | result) and ``report.json`` with the model,
ControlNets, LoRAs, timings per stage and seconds per frame. Finished frames are checkpointed, so
``--resume`` continues a stopped sequence at the first missing frame.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from neuralbake.bakes.postfx.config import PostfxConfig, device_defaults, parse_controlnet, parse_weighted
from neuralbake.bakes.postfx.footprint import postfx_footprint
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.errors import InputError
from neuralbake.io.files import atomic_path
from neuralbake.io.images import load_image, resize_image, save_png
from neuralbake.postfx.compose import compose, pass_mask
from neuralbake.postfx.conditions import (
    PASS_FIXES,
    RenderPasses,
    canny_condition,
    depth_condition,
    id_masks,
    load_render,
    normal_condition,
    read_exr_passes,
    scene_passes,
    segmentation_condition,
)
from neuralbake.postfx.models import inspect_model, load_pipeline
from neuralbake.postfx.motion import read_motion, warp
from neuralbake.postfx.upscale import upscale, vulkan_devices
from neuralbake.render.pictures import panel_grid

__all__ = ["FRAMES_FILE", "POSTFX", "Chain"]

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".exr")

FRAMES_FILE = "frames.pt"
"""The chain's checkpoint: how many frames finished, and a fingerprint of the settings they were made with."""


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


def _read_frame(frame: _Frame, config: PostfxConfig) -> RenderPasses:
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


# -- the chain -------------------------------------------------------------------------------


def _resize(image: np.ndarray, width: int, height: int, *, nearest: bool = False) -> np.ndarray:
    """:func:`~neuralbake.io.images.resize_image` for 2-D maps too (the ids pass); ``nearest`` keeps ids and segmentation colours exact."""
    if image.ndim == 2:
        return resize_image(image[..., None], width, height, nearest=nearest)[..., 0]
    return resize_image(image, width, height, nearest=nearest)


def _working_size(width: int, height: int, longest: int, multiple: int) -> tuple[int, int]:
    scale = min(1.0, longest / max(width, height))
    return (max(multiple, round(width * scale / multiple) * multiple), max(multiple, round(height * scale / multiple) * multiple))


def _pil(image: np.ndarray) -> Image.Image:
    return Image.fromarray((np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8))


def _conditions(passes: RenderPasses, wanted: list[str], config: PostfxConfig, frame: _Frame) -> dict[str, np.ndarray]:
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
    return 0 if vulkan_devices() > 0 else -1


def _fingerprint(config: PostfxConfig) -> str:
    """What the frames depend on: every setting but the device (a frame made on one machine stands)."""
    data = dataclasses.asdict(config)
    for name in ("device", "upscale_gpu"):
        data.pop(name, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _diffuse_frame(chain: Chain, passes: RenderPasses, conditions: dict[str, np.ndarray], init: np.ndarray, frame: _Frame, *, first: bool,
                   note: Any, timings: dict[str, float]) -> np.ndarray:
    """One frame through diffusion and composition, at the render's size: ``init`` is the img2img start."""
    config = chain.config
    height, width = passes.image.shape[:2]
    work_w, work_h = _working_size(width, height, config.size, chain.multiple)
    t = time.perf_counter()
    controls = [_resize(conditions[name], work_w, work_h, nearest=name == "segmentation") for name, _, _ in chain.controls]
    init_small = _resize(init, work_w, work_h)
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
            if missing and first:
                note(f"postfx: pass {k} names ids {missing} that no pixel of the first frame has")
            image = chain.diffuse(init_small, controls, prompt=p.prompt or config.prompt, negative=p.negative_prompt or config.negative_prompt,
                                  loras=p.loras or config.loras, strength=config.strength if p.strength is None else p.strength)
            layers.append((image, pass_mask(small_ids, p.ids)))
    timings["diffusion"] += time.perf_counter() - t
    t = time.perf_counter()
    result = compose(base, layers, radius=config.feather * work_w / width) if layers else base
    result = _resize(result, width, height)
    timings["composition"] += time.perf_counter() - t
    return result


def _body(run: BakeRun) -> BakeOutcome:
    config: PostfxConfig = run.config
    started = time.perf_counter()
    frames = _frames(config)
    chain = Chain.load(config, run.device, run.note) if config.model else None  # no model: an upscale-only pass
    if chain is None:
        run.note(f"postfx: no model given, so the pass only upscales ({config.upscale}x, {config.upscaler})")
    wanted = [name for name, _, _ in chain.controls] if chain is not None else []
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
    resumed = processed = diffused = 0
    with run.task("postfx frames", len(frames), unit="frame") as advance:
        for index, frame in enumerate(frames):
            passes = _read_frame(frame, config)
            height, width = passes.image.shape[:2]
            done = done_dir / f"{index:05d}.png"
            if run.resume and done.is_file():
                result, _ = load_image(done)
                resumed += 1
            else:
                t = time.perf_counter()
                conditions = _conditions(passes, wanted, config, frame)
                if index == 0:
                    first = {"conditions": conditions, "passes": passes}
                timings["conditions"] += time.perf_counter() - t
                if chain is None:
                    result = passes.image
                else:
                    init = passes.image
                    if previous is not None and config.temporal > 0:
                        prev = _resize(previous, width, height)
                        if frame.motion is not None:
                            prev = warp(prev, read_motion(frame.motion, (height, width)))
                        init = (1.0 - config.temporal) * init + config.temporal * prev
                    result = _diffuse_frame(chain, passes, conditions, init, frame, first=index == 0, note=run.note, timings=timings)
                    diffused += 1
                t = time.perf_counter()
                result = upscale(result, config.upscale, network=config.upscaler, tile=config.upscale_tile, gpu=upscale_gpu)
                timings["upscale"] += time.perf_counter() - t
                processed += 1
                result = np.round(np.clip(result, 0.0, 1.0) * 255.0) / 255.0  # as saved: a resumed sequence continues from the same values
                save_png(done, result)
                with atomic_path(record) as tmp:
                    torch.save({"fingerprint": fingerprint, "frames": index + 1}, tmp)
            if index == 0 and not first:
                first = {"conditions": _conditions(passes, wanted, config, frame), "passes": passes}
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
    metrics: dict[str, Any] = {"frames": len(frames), "seconds_per_frame": chain_seconds / processed if processed else None}
    fields: dict[str, Any] = {
        "mode": "diffusion" if chain is not None else "upscale only",
        "model": str(chain.model) if chain is not None else None,
        "family": chain.family if chain is not None else None,
        "pipeline": type(chain.pipe).__name__ if chain is not None else None,
        "precision": chain.precision if chain is not None else None,
        "controlnets": [{"condition": c, "model": p, "scale": s} for c, p, s in chain.controls] if chain is not None else [],
        "loras": [{"file": p, "weight": w} for p, w in (parse_weighted(s, "loras") for s in config.loras)],
        "passes": len(config.passes),
        "denoising_steps_run": int(config.steps * config.strength) if chain is not None else 0,
        "working_size": list(_working_size(first_size[0], first_size[1], config.size, chain.multiple)) if chain is not None else None,
        "output_size": [first_size[0] * config.upscale, first_size[1] * config.upscale],
        "upscale": config.upscale,
        "upscaler_device": None if config.upscale == 1 else ("cpu" if upscale_gpu < 0 else f"vulkan:{upscale_gpu}"),
        "timings_seconds": {"load": chain.load_seconds if chain is not None else 0.0, **timings},
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
            "blend": config.temporal if chain is not None else 0.0,
            "motion_vectors": bool(config.motion),
        }
    return BakeOutcome(metrics, fields, curve_title=None)


POSTFX: Bake[PostfxConfig] = Bake("postfx", PostfxConfig, _body, device_defaults, title="postfx", footprint=postfx_footprint)
"""The AI render pass on the one run path."""
