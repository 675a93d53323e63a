"""The neural texture bake: an image learned by a frequency-encoded MLP (RTX Neural Shaders "simple training").

The network maps a UV coordinate to the image's colour at that coordinate, optionally through a
UV transform (identity, flip = swap u and v, zoom = the centre half of the image), exactly like the
RTXNS sample: each step draws random UVs (32 x 32 by default), looks up the reference texel
(nearest, as the sample's ``inputTexture[uv]`` load does) and minimises the L2 error. UV (0, 0) is
the top-left corner of the image (row 0), u grows to the right, v downwards; a texel's centre sits
at ``((x + 0.5) / width, (y + 0.5) / height)``.

Outputs in ``--out``: ``network.safetensors`` + ``network.json`` (+ packed fp16/fp32 device
layouts), ``output.png`` (the network rendered at the reference size), ``preview.png``
(reference | network | error x10 around mid-grey), ``loss.png``, ``report.json``,
``config.json``, ``events.jsonl`` and ``bake.json`` (a sha256 per file); the checkpoint for
``--resume`` lives in ``.neuralbake/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console

from neuralbake.bakes.config import KernelsConfig
from neuralbake.bakes.footprint import (
    PROCESS_BYTES,
    TRAINED_PARAMETER_BYTES,
    dominant_field,
    footprint,
    mlp_parameters,
    mlp_training_bytes,
    precision_bytes,
)
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, Footprint
from neuralbake.core.device import resolve_device
from neuralbake.core.events import progress_task
from neuralbake.core.metrics import psnr
from neuralbake.core.paths import InputPath
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.files import prepare_output_dir
from neuralbake.io.images import ImageInfo, load_image, resize_image, save_png
from neuralbake.io.limits import MAX_IMAGE_PIXELS, TooManyPixelsError, check_memory
from neuralbake.kernels import KERNEL_MODES, resolve_kernels, try_kernels, unsupported_reason
from neuralbake.nn.half_run import HalfRun
from neuralbake.nn.mlp import MAX_LAYERS, CoordinateNetwork, CoordinateNetworkConfig
from neuralbake.nn.precision import compute_dtype
from neuralbake.nn.serialize import MAX_FREQUENCIES, load_coordinate_network, save_coordinate_network
from neuralbake.nn.trainer import Batch, TexelDraws, TrainerConfig, TrainResult, cast_model
from neuralbake.render.pictures import preview_strip

__all__ = [
    "TRANSFORMS",
    "ImageSampler",
    "NeuralTextureConfig",
    "bake_neural_texture",
    "render_network",
    "render_saved_network",
    "texel_lookup",
    "transform_uv",
    "uv_grid",
]

TRANSFORMS = TexelDraws.TRANSFORMS  # also the transform codes of the training kernel's own draws
MAX_RENDER_SIDE = 16384

MAX_BAKE_PIXELS = 4096 * 4096
"""Most texels a bake trains on and evaluates (a 4K texture): the network's 13.5 k parameters hold
far less than that, and every evaluation renders every texel, so a larger reference only costs
minutes (a 12000 x 12000 image ran past 400 s before its first step). Larger images are refused
before they are decoded, with the fix: ``--size`` resamples them first."""


CPU_STEPS, CPU_LR = 3000, 0.01
"""Steps and peak learning rate on a CPU: the RTX Neural Shaders sample's scale of run, a minute or two on 2 cores
(grace_hopper_256.png, 2026-11-29: 24.13 dB on the wsd schedule against 23.42 on cosine, and 23.16 at a rate of
0.005); the report says it stopped while still improving (the same bake at 1,500 steps is 1.8 dB lower)."""
GPU_STEPS, GPU_LR = 1_000_000, 0.005
"""Steps and peak learning rate on a GPU. On an H200 (2026-11-29, grace_hopper_256.png, fused kernels, wsd schedule with
half the run decaying) a million steps take 24 s of training for 32.27 dB (cosine at 0.01, the default until then:
31.40 dB, and 31.81 dB at 4,000,000 steps); the run of half the steps reaches 31.91 dB, so doubling bought 0.36 dB and
the report says converged (:data:`~neuralbake.nn.convergence.DOUBLING_GAIN`); 2,000,000 steps buy 0.25 dB more. At a
rate of 0.01 the stable stretch is noisier and ends lower (31.12 dB), at 0.003 it learns slower (32.16 dB)."""


def _default_train() -> TrainerConfig:
    # steps and rate None: the device's (device_defaults). Evaluations spaced by the run's length (200 a run, at least 250
    # steps apart) and checkpoints by time (every checkpoint_seconds): a million steps evaluated every 250 and
    # checkpointed every 500 spent over 300 s around 24 s of training on an H200. The wsd schedule's half-length twin
    # (a quarter more steps) says whether doubling the run would still pay (neuralbake.nn.half_run).
    return TrainerConfig(steps=None, learning_rate=None, schedule="wsd", decay_fraction=0.5, eval_every=None, checkpoint_every=0)


def device_defaults(config: NeuralTextureConfig, device: torch.device) -> dict[str, Any]:
    """Steps and peak learning rate for ``device``: :data:`GPU_STEPS` and :data:`GPU_LR` on a GPU, :data:`CPU_STEPS` and
    :data:`CPU_LR` elsewhere."""
    gpu = device.type == "cuda"
    return {"train.steps": GPU_STEPS if gpu else CPU_STEPS, "train.learning_rate": GPU_LR if gpu else CPU_LR}


@dataclass
class NeuralTextureConfig(KernelsConfig):
    """Everything that determines a neural texture bake."""

    image: InputPath = ""
    """Path of the reference image (PNG, JPEG, TGA, BMP, TIFF; 8 or 16 bits; grey, RGB or RGBA)."""
    texture_size: tuple[int, int] | None = None
    """Resample the reference to WxH (at most 4096x4096) before training; None keeps its own size."""
    transform: Literal["identity", "flip", "zoom"] = "identity"
    """UV transform the network learns: identity, flip (swap u and v) or zoom (the centre half)."""
    batch_size: int = 1024
    """Random UV samples per step (the RTXNS sample uses 32 x 32)."""
    network: CoordinateNetworkConfig = field(default_factory=CoordinateNetworkConfig)
    """The network: frequencies, hidden width, hidden layers, activations (outputs follow the image)."""
    train: TrainerConfig = field(default_factory=_default_train)  # this bake's training defaults

    def validate(self) -> None:
        """Raise ConfigError on settings no bake can use (before any file is touched)."""
        if self.kernels not in KERNEL_MODES:
            raise ConfigError(f"unknown kernels {self.kernels!r}.", field="kernels", fix="use auto, triton or torch.")
        if not self.image:
            raise ConfigError("no reference image given.", field="image", fix="pass the path of an image.")
        if self.transform not in TRANSFORMS:
            raise ConfigError(f"unknown transform {self.transform!r}.", field="transform", fix=f"use one of {', '.join(TRANSFORMS)}.")
        if self.batch_size < 1:
            raise ConfigError(f"must be >= 1, got {self.batch_size}.", field="batch_size", fix="use e.g. 1024.")
        if self.texture_size is not None:
            _check_size(self.texture_size, "texture_size")
            width, height = self.texture_size
            if width * height > MAX_BAKE_PIXELS:
                raise ConfigError(
                    f"{width}x{height} is {width * height:,} texels; the bake trains on at most {MAX_BAKE_PIXELS:,} (4096x4096).",
                    field="texture_size",
                    fix="bake at 4096x4096 or less, then render any size with `neuralbake texture infer --size`.",
                )
        for name in ("frequencies", "hidden", "coordinates"):
            if getattr(self.network, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self.network, name)}.", field=f"network.{name}", fix=f"set {name} to 1 or more.")
        if not 0 <= self.network.layers <= MAX_LAYERS:
            raise ConfigError(f"must be in [0, {MAX_LAYERS}], got {self.network.layers}.", field="network.layers", fix=f"set layers to 0 to {MAX_LAYERS}.")
        if self.network.frequencies > MAX_FREQUENCIES:
            raise ConfigError(f"at most {MAX_FREQUENCIES} frequency octaves are meaningful in float32, got {self.network.frequencies}.",
                              field="network.frequencies", fix="use 3 (the sample's) to 10.")
        if self.network.coordinates != 2:
            raise ConfigError("a texture has 2 coordinates (u, v).", field="network.coordinates", fix="leave it at 2.")
        try:
            self.network.mlp_config().validate()
        except ValueError as exc:
            raise ConfigError(str(exc), field="network", fix="see `neuralbake texture bake --help` for valid values.") from exc
        # steps and the rate left out (None) are the device's to choose; the runner fills them before the bake starts
        train = self.train
        dataclasses.replace(train, steps=1 if train.steps is None else train.steps, learning_rate=1.0 if train.learning_rate is None else train.learning_rate).validate()


def _check_size(size: tuple[int, int], name: str) -> None:
    width, height = size
    if not (1 <= width <= MAX_RENDER_SIDE and 1 <= height <= MAX_RENDER_SIDE):
        raise ConfigError(f"{width}x{height} is out of range.", field=name, fix=f"use 1 to {MAX_RENDER_SIDE} pixels per side.")


# -- sampling ---------------------------------------------------------------------------------


def transform_uv(uv: torch.Tensor, transform: str) -> torch.Tensor:
    """Map network UVs to the reference image's UVs: identity, flip (swap u, v) or zoom (centre half)."""
    if transform == "identity":
        return uv
    if transform == "flip":
        return uv.flip(-1)
    if transform == "zoom":
        return uv * 0.5 + 0.25
    raise ValueError(f"unknown transform {transform!r}")


def texel_lookup(image: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """Nearest-texel fetch: ``image`` ``[H, W, C]``, ``uv`` ``[N, 2]`` in [0, 1] -> ``[N, C]``."""
    height, width = image.shape[:2]
    x = (uv[:, 0] * width).long().clamp_(0, width - 1)
    y = (uv[:, 1] * height).long().clamp_(0, height - 1)
    return image[y, x]


def uv_grid(width: int, height: int, device: torch.device | str = "cpu", *, rows: range | None = None) -> torch.Tensor:
    """Texel-centre UVs of a ``width x height`` image, row-major, shape ``[height * width, 2]``
    (only the rows in ``rows``, if given: ``[len(rows) * width, 2]``)."""
    u = (torch.arange(width, device=device, dtype=torch.float32) + 0.5) / width
    rows = rows if rows is not None else range(height)
    v = (torch.arange(rows.start, rows.stop, device=device, dtype=torch.float32) + 0.5) / height
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    return torch.stack((uu, vv), dim=-1).reshape(-1, 2)


class ImageSampler:
    """Random-UV batches from a reference image (on the training device)."""

    capturable = True
    """Sampling is pure device work (no host sync), so the trainer may capture it in a CUDA graph."""

    def __init__(self, image: torch.Tensor, transform: str, batch_size: int) -> None:
        self.image = image
        self.transform = transform
        self.batch_size = batch_size

    def sample(self, generator: torch.Generator) -> Batch:
        uv = torch.rand(self.batch_size, 2, generator=generator, device=self.image.device)
        return Batch(inputs=uv, targets=texel_lookup(self.image, transform_uv(uv, self.transform)))

    def texel_draws(self) -> TexelDraws | None:
        """What :meth:`sample` draws, for a fused training step that draws it in its kernel (None from a subclass that
        draws otherwise: one that overrides :meth:`sample`)."""
        if type(self).sample is not ImageSampler.sample:
            return None
        return TexelDraws(image=self.image, transform=self.transform, batch_size=self.batch_size)

    def reference(self, width: int, height: int) -> torch.Tensor:
        """The transformed reference at texel centres of a ``width x height`` grid, ``[H, W, C]``."""
        uv = uv_grid(width, height, self.image.device)
        return texel_lookup(self.image, transform_uv(uv, self.transform)).reshape(height, width, -1)


def render_network(
    network: torch.nn.Module,
    width: int,
    height: int,
    *,
    chunk: int = 1 << 16,
    progress: Callable[[int], None] | None = None,
    kernels: str = "torch",
) -> torch.Tensor:
    """Evaluate a coordinate network at texel centres: ``[height, width, outputs]`` float32.

    Rows are evaluated ``chunk`` texels at a time into one preallocated output; ``progress`` (if
    given) is called with the texels finished after each chunk. ``kernels="triton"`` runs the
    fused Triton MLP (encoding included) in the network's dtype instead of PyTorch.
    """
    param = next(network.parameters())
    evaluate: Callable[[torch.Tensor], torch.Tensor] = network
    if kernels == "triton":
        from neuralbake.kernels.packing import PackedMLP, mlp_forward  # imports Triton

        packed = PackedMLP.from_mlp(network.mlp)
        evaluate = lambda uv: mlp_forward(packed, uv, frequencies=network.config.frequencies)
    rows_per_chunk = max(1, chunk // width)
    out: torch.Tensor | None = None
    with torch.no_grad():
        for top in range(0, height, rows_per_chunk):
            rows = min(rows_per_chunk, height - top)
            part = evaluate(uv_grid(width, height, param.device, rows=range(top, top + rows))).float()
            if out is None:
                out = torch.empty(height * width, part.shape[1], dtype=torch.float32, device=param.device)
            out[top * width : (top + rows) * width] = part
            if progress is not None:
                progress(rows * width)
    assert out is not None
    return out.reshape(height, width, -1)


def mse_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error, the RTXNS sample's L2 loss."""
    return F.mse_loss(prediction, target)


# -- the bake ---------------------------------------------------------------------------------


def _load_reference(config: NeuralTextureConfig) -> tuple[np.ndarray, ImageInfo, str]:
    try:
        image, info = load_image(config.image, max_pixels=MAX_BAKE_PIXELS if config.texture_size is None else MAX_IMAGE_PIXELS)
    except TooManyPixelsError as exc:
        if exc.limit != MAX_BAKE_PIXELS:  # over the loader's own limit: --size cannot help
            raise
        raise InputError(
            f"the image is {exc.width}x{exc.height} = {exc.width * exc.height:,} pixels; the neural texture bake trains on at most "
            f"{MAX_BAKE_PIXELS:,} (4096x4096).",
            path=exc.path,
            field="image",
            fix="pass --size WxH (e.g. --size 2048x2048) to resample it first, or downscale the image.",
        ) from exc
    digest = hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest()[:16]
    if config.texture_size is not None:
        image = resize_image(image, *config.texture_size)
    return image, info, digest


def _bake_body(run: BakeRun) -> BakeOutcome:
    config: NeuralTextureConfig = run.config
    image, info, digest = _load_reference(config)
    height, width, channels = image.shape
    config.network.outputs = channels
    network = CoordinateNetwork(config.network).to(run.device)
    reference_image = torch.from_numpy(np.ascontiguousarray(image)).to(run.device)
    sampler = ImageSampler(reference_image, config.transform, config.batch_size)
    target = sampler.reference(width, height)

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        output = render_network(model, width, height)
        run.preview_image("preview", lambda: preview_strip(target.cpu().numpy(), output.cpu().numpy()))  # when watched
        return {"psnr_db": psnr(output, target)}

    compatibility = {
        "image_sha256": digest,
        "size": [width, height],
        "transform": config.transform,
        "batch_size": config.batch_size,
        "network": asdict(config.network),
    }
    dtype = compute_dtype(config.train.precision)
    built: dict[str, Any] = {}

    def trial() -> None:
        from neuralbake.kernels.training import FusedForwardBackward  # imports Triton

        fused = built["fused"] = FusedForwardBackward(network, "mse", dtype=dtype)
        # the whole fused step once (its four kernels, the run's loss-scale mode, the batch drawn in the kernel where it
        # can be) on copies: what the trainer will run
        draws = built["draws"] = fused.draws_from(sampler)
        # (a sampled batch only where the kernel will not draw; its own generator: training's draws stay as they are)
        trial_batch = None if draws is not None else sampler.sample(torch.Generator(device=run.device).manual_seed(0))
        fused.rehearse(trial_batch, config.train.loss_scale, draws, config.train.seed)

    kernels = run.kernels("train", config.kernels, fused_training_reason(config.network), dtype=dtype, trial=trial)
    fused = built.get("fused") if kernels == "triton" else None
    draws = built.get("draws") if fused is not None else None
    result = run.train(network, sampler, mse_loss, config.train, evaluate=evaluate, compatibility=compatibility, forward_backward=fused)
    outcome = _write_outputs(run.stage, config, network, result, image, target, info)
    # which path ran the forward/backward, and whether the optimizer step (unscale, Adam, loss scale) and the batches'
    # draws ran in the kernels too
    outcome.fields["kernels"] = {
        "train": kernels,
        "optimizer_step": "triton" if fused is not None and fused.updated else "torch",
        "batches": "triton" if fused is not None and fused.updated and draws is not None else "torch",
        # the training kernel the last step ran: gluon (kernels.gluon_train, Hopper) or triton
        "train_kernel": fused.buffers.kernel if fused is not None else "torch",
    }
    return outcome


def fused_training_reason(network: CoordinateNetworkConfig) -> str | None:
    """Why the fused training kernel cannot train this coordinate network (None: it can)."""
    mlp = network.mlp_config()
    return unsupported_reason(mlp.widths(), [mlp.hidden_activation, mlp.output_activation], training=True)


# -- footprint --------------------------------------------------------------------------------

ASSUMED_TEXELS = 2048 * 2048
"""Texels assumed when ``texture_size`` is unset (the image's own size, read only when the bake runs):
a 2K texture. A larger image (up to :data:`MAX_BAKE_PIXELS`) is checked by the image loader, which
compares its decoded size with the memory available before decoding it."""
IMAGE_COPIES = 6
"""Float32 copies of the reference the bake holds: the decoded image, its resampled copy, the
tensor on the device, the transformed target, the network's render and its PNG/preview arrays."""
EVAL_CHUNK = 1 << 16
"""Texels :func:`render_network` evaluates at once (no autograd: two layers live at a time)."""
SAMPLE_BYTES = 64
"""Per batch sample beside the network: uv, the drawn texel indices, the targets and the loss terms."""


def _widths(config: NeuralTextureConfig) -> list[int]:
    mlp = config.network.mlp_config()
    return [mlp.inputs, *[mlp.hidden] * mlp.layers, 4]  # outputs follow the image: at most 4 channels


def estimated_memory(config: NeuralTextureConfig, device: torch.device) -> dict[str, float]:
    """Bytes by the setting that drives them: the network's trained parameters (``network.hidden``),
    one step's activations (``batch_size``) and the reference with its renders (``texture_size``)."""
    widths = _widths(config)
    compute = precision_bytes(config.train.precision)
    texels = config.texture_size[0] * config.texture_size[1] if config.texture_size is not None else ASSUMED_TEXELS
    evaluation = min(texels, EVAL_CHUNK) * 2 * max(widths) * 4
    return {
        "network.hidden": mlp_parameters(widths) * (TRAINED_PARAMETER_BYTES + compute),
        "batch_size": mlp_training_bytes(config.batch_size, widths, compute) + config.batch_size * SAMPLE_BYTES,
        "texture_size": texels * 4 * 4 * IMAGE_COPIES + evaluation,
    }


def neural_texture_footprint(config: NeuralTextureConfig, device: torch.device) -> Footprint:
    """Peak memory of a neural texture bake (:func:`estimated_memory` on top of the process's base) and
    its steps (``train.steps``)."""
    terms = estimated_memory(config, device)
    total = lambda c, d: sum(estimated_memory(c, d).values())  # noqa: E731
    knobs = {"batch_size": 1024, "network.hidden": 64, "network.layers": 4, "network.frequencies": 3, "texture_size": None}
    field = dominant_field(total, config, device, knobs, fallback=max(terms, key=lambda k: terms[k]))
    steps = config.train.steps or 0  # and a wsd run's half-length twin
    return footprint(terms, steps=steps + HalfRun(dataclasses.replace(config.train, steps=steps)).extra_steps, steps_field="train.steps",
                     base=PROCESS_BYTES, field=field)


NEURAL_TEXTURE = Bake("neural_texture", NeuralTextureConfig, _bake_body, device_defaults=device_defaults, title="neural texture",
                      footprint=neural_texture_footprint)
"""The neural texture bake, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def bake_neural_texture(config: NeuralTextureConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Train a neural texture and write its bundle, pictures and report to ``out_dir``.

    Runs through :func:`neuralbake.bakes.run.run_bake` (validation, lock, staging, checkpoints,
    manifest). Returns the report as a dict. Raises
    :class:`~neuralbake.nn.trainer.TrainingInterrupted` when stopped with Ctrl-C or SIGTERM (a
    checkpoint is saved; ``resume=True`` continues it).
    """
    return NEURAL_TEXTURE.run(config, out_dir, **options)


def _write_outputs(
    out: Path,
    config: NeuralTextureConfig,
    network: CoordinateNetwork,
    result: TrainResult,
    image: np.ndarray,
    target: torch.Tensor,
    info: ImageInfo,
) -> BakeOutcome:
    height, width, channels = image.shape
    output = render_network(network, width, height)
    psnr_fp32 = psnr(output, target)
    low = compute_dtype(config.train.precision)
    psnr_low = psnr(render_network(cast_model(network, low), width, height), target) if low != torch.float32 else psnr_fp32

    manifest_path = save_coordinate_network(
        out,
        network,
        training_precision=config.train.precision,
        extra={"texture": {"width": width, "height": height, "channels": channels, "transform": config.transform, "uv_origin": "top-left"}},
    )
    output_np = output.cpu().numpy()
    save_png(out / "output.png", output_np)
    save_png(out / "preview.png", preview_strip(target.cpu().numpy(), output_np))

    bundle_bytes = sum(p.stat().st_size for p in out.glob("network.*"))
    curve = [[e["train_seconds"], e["psnr_db"]] for e in result.history if e.get("event") == "eval"]
    metrics = {"psnr_db": psnr_fp32, f"psnr_{config.train.precision}_db": psnr_low, "final_loss": result.final_loss}
    fields: dict[str, Any] = dict(  # noqa: C408  (keyword style reads as the report's fields)
        steps=result.steps,
        skipped_steps=result.skipped_steps,
        samples_seen=result.samples_seen,
        seconds=round(result.train_seconds, 3),
        samples_per_second=round(result.samples_seen / max(result.train_seconds, 1e-9)),
        params=network.parameter_count(),
        precision=config.train.precision,
        loss_scale=result.loss_scale,
        psnr_curve=curve,
        image={"path": info.path, "width": info.width, "height": info.height, "channels": info.channels, "bit_depth": info.bit_depth, "mode": info.source_mode},
        trained_size=[width, height],
        bundle={"manifest": manifest_path.name, "bytes": bundle_bytes},
        image_bytes_uncompressed=width * height * channels,
    )
    return BakeOutcome(metrics, fields, curve_title=f"neural texture: {Path(config.image).name}", quality_key="psnr_db")


def render_saved_network(
    bundle_dir: str | Path,
    width: int,
    height: int,
    out_png: str | Path,
    *,
    device: str = "auto",
    precision: str = "fp32",
    progress: bool = False,
    kernels: str = "auto",
) -> Path:
    """Render a saved neural texture at ``width x height`` to a PNG (``neuralbake texture infer``).

    The memory it needs (float32 output and the 8-bit PNG) is checked before any work starts.
    ``kernels``: auto (the fused Triton MLP on a CUDA GPU at fp16 or bf16), triton or torch.
    """
    _check_size((width, height), "size")
    if precision not in ("fp32", "fp16", "bf16"):
        raise ConfigError(f"unknown precision {precision!r}.", field="precision", fix="use fp32, fp16 or bf16.")
    dtype = compute_dtype(precision)
    torch_device = resolve_device(device)
    network, _ = load_coordinate_network(bundle_dir, device=torch_device)
    out_png = Path(out_png)
    channels = network.config.outputs if hasattr(network, "config") else 4
    check_memory(
        width * height * channels * (4 + 4 + 1),
        what=f"a {width}x{height} render",
        field="size",
        fix="render a smaller --size; the network has no native resolution, so a smaller image loses only pixels.",
    )
    model = cast_model(network, dtype) if dtype != torch.float32 else network
    if isinstance(model, CoordinateNetwork):
        mlp = model.mlp.config
        reason = unsupported_reason(mlp.widths(), [mlp.hidden_activation, mlp.output_activation])
    else:
        reason = f"the bundle holds a {type(model).__name__}, not a coordinate network"
    path = resolve_kernels(kernels, torch_device, reason, dtype=dtype)
    path = try_kernels(kernels, path, lambda: render_network(model, 2, 2, kernels="triton"), lambda message: Console(stderr=True).print(message, markup=False))
    prepare_output_dir(out_png.parent if str(out_png.parent) else Path("."))
    with progress_task("rendering", width * height, enabled=progress, unit="texels") as advance:
        image = render_network(model, width, height, progress=advance, kernels=path)
    save_png(out_png, image.cpu().numpy())
    return out_png
