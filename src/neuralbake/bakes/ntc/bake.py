"""The NTC bake on the one run path: per rate, train latents + decoder in two phases, write ``texture.ntc`` and its report.

One rate writes into the output folder itself: ``texture.ntc``, ``manifest.json`` (its size and
sha256), ``preview.png`` (per group: reference | NTC | error x10) and, from the runner,
``report.json``, ``loss.png``, ``config.json``, ``events.jsonl`` and ``bake.json``. Several rates
are one bake whose phases are the rates: ``bpp_<X>/`` per rate (the same files, its own
``report.json``, ``loss.png`` and ``bake.json``), then ``rd.json`` and ``rd.png`` beside them.
Phases are named ``noise`` and ``round`` (``bpp_<X>_noise``, ``bpp_<X>_round`` in a sweep), each
with its checkpoint for ``--resume``. A sweep stopped midway (Ctrl-C) names the rates that had
finished and where they are: each a complete ``bpp_<X>/`` folder in the staging folder, readable as it is.

Every report holds ``comparison.rows`` (:func:`~neuralbake.bakes.ntc.rd.comparison_table`): NTC,
the BC1 set, the BC7 set and NTC->BC7 (the decoded file BC-encoded as ``ntc transcode --format
bc7`` does, timed as ``transcode_seconds``), and every compress draws ``rd.png`` (one NTC point
for one rate). ``baselines = false`` leaves out the three BC rows.
"""

from __future__ import annotations

import math
import resource
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from neuralbake.bakes.ntc.baselines import bc_baselines
from neuralbake.bakes.ntc.config import NTCConfig, device_defaults, load_config_texture_set, ntc_footprint
from neuralbake.bakes.ntc.container import CONTAINER_NAME, MANIFEST_NAME, pack_container, read_container
from neuralbake.bakes.ntc.decode import decode_all_levels, decode_reason, set_quality
from neuralbake.bakes.ntc.layout import CONTAINER_VERSION, NTCLayout, choose_layout
from neuralbake.bakes.ntc.model import NTCModel, TexelSampler
from neuralbake.bakes.ntc.rd import comparison_table, plot_rate_distortion, rate_distortion_summary
from neuralbake.bakes.ntc.texture_set import ChannelGroup, TextureSet
from neuralbake.bakes.ntc.transcode import choose_formats, encode_textures, stack_groups
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.core.events import EventSink
from neuralbake.core.metrics import mse
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import ConfigError
from neuralbake.io.files import atomic_write_bytes, atomic_write_json, sha256_file
from neuralbake.io.images import save_png
from neuralbake.io.manifest import write_bake_manifest
from neuralbake.kernels import resolve_kernels, unsupported_reason
from neuralbake.nn.compiled import CompiledForwardBackward
from neuralbake.nn.convergence import training_record
from neuralbake.nn.trainer import TrainingInterrupted, TrainResult
from neuralbake.render.pictures import comparison_row, panel_grid

__all__ = ["NTC", "compress_rate_distortion", "compress_texture_set"]


def _peak_memory(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {"peak_gpu_memory_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}
    # Linux reports ru_maxrss in KiB: the peak resident memory of the whole process so far.
    return {"peak_process_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _all_texel_coords(layout: NTCLayout, device: torch.device) -> torch.Tensor:
    parts = []
    for index, (width, height) in enumerate(layout.level_sizes):
        yy, xx = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij")
        parts.append(torch.stack((torch.full((width * height,), index, device=device), xx.reshape(-1), yy.reshape(-1)), dim=1))
    return torch.cat(parts).to(torch.float32)


def _preview_image(reference: np.ndarray, decoded: np.ndarray, groups: tuple[ChannelGroup, ...]) -> np.ndarray:
    """Rows per group: reference | NTC | error x10 around mid-grey."""
    rows, start = [], 0
    for group in groups:
        stop = start + len(group.channels)
        rows += comparison_row(reference[..., start:stop], decoded[..., start:stop], error="signed", error_gain=10.0, kind=group.kind)
        start = stop
    return panel_grid(rows, gap=4)


def _save_preview(path: Path, reference: np.ndarray, decoded: np.ndarray, groups: tuple[ChannelGroup, ...]) -> None:
    save_png(path, _preview_image(reference, decoded, groups))


EVAL_TEXELS = 1 << 18
"""Texels of mip 0 that the evaluations during training decode (a fixed random set; all of them
on a smaller set): enough for a PSNR within about 0.05 dB of the whole level's, and cheap enough
to evaluate every ``eval_every`` steps of a long run. The report's figures decode everything."""


def _eval_texels(layout: NTCLayout, sampler: TexelSampler, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinates ``[N, 3]`` (level 0, x, y) and reference texels of the evaluation set."""
    width, height = layout.level_sizes[0]
    count = width * height
    device = sampler.texels.device
    if count > EVAL_TEXELS:
        index = torch.randperm(count, generator=torch.Generator().manual_seed(seed))[:EVAL_TEXELS].to(device)
    else:
        index = torch.arange(count, device=device)
    return _level0_coords(index, width), sampler.texels[index]


def _level0_coords(index: torch.Tensor, width: int) -> torch.Tensor:
    """Model inputs ``[N, 3]`` (level 0, x, y) of row-major texel indices ``[N]`` of mip 0."""
    return torch.stack((torch.zeros_like(index), index % width, index // width), dim=1).to(torch.float32)


def finetune_steps(config: NTCConfig, noise_steps: int) -> int:
    """Steps of the hard-rounding phase: ``finetune_steps``, or a tenth of the noise phase's."""
    return config.finetune_steps if config.finetune_steps is not None else max(1, noise_steps // 10)


def _train(run: BakeRun, model: NTCModel, sampler: TexelSampler, compatibility: dict[str, Any], prefix: str) -> list[tuple[str, TrainResult]]:
    """The noise-quantised phase, then the hard-rounded one (see :class:`NTCConfig` for their schedules)."""
    config: NTCConfig = run.config
    layout = model.layout
    eval_coords, eval_targets = _eval_texels(layout, sampler, config.train.seed)

    def evaluate(net: nn.Module) -> dict[str, float]:
        mode = net.quant_mode
        net.quant_mode = "round"
        with torch.no_grad():
            prediction = torch.cat([net(part).clamp(0, 1) for part in eval_coords.split(1 << 16)])
            run.preview_image("preview", lambda: _level0_preview(net, layout, sampler))  # decoded only when watched
        net.quant_mode = mode
        error = mse(prediction, eval_targets)
        return {"psnr_db": 10 * math.log10(1 / error) if error > 0 else math.inf}

    results = []
    model.quant_mode = "noise"
    name = f"{prefix}noise"
    step = _training_step(run, model)
    noise = run.train(model, sampler, F.mse_loss, config.train, phase=name, evaluate=evaluate, compatibility={**compatibility, "phase": "noise"},
                      quality_key="psnr_db", forward_backward=step)
    results.append((name, noise))
    steps = finetune_steps(config, noise.steps)
    if steps > 0:
        finetune = replace(
            config.train, steps=steps, seconds=None, plateau_evals=0, learning_rate=config.train.learning_rate * config.finetune_lr_fraction, warmup_steps=0, half_run=False,
            eval_every=max(1, min(config.train.eval_every or steps, steps // 4)),
        )
        model.quant_mode = "round"
        name = f"{prefix}round"
        results.append((name, run.train(model, sampler, F.mse_loss, finetune, phase=name, evaluate=evaluate, compatibility={**compatibility, "phase": "round"},
                                        quality_key="psnr_db", forward_backward=step)))
    return results


def _training_step(run: BakeRun, model: NTCModel) -> CompiledForwardBackward | None:
    """The compiled step where ``--kernels`` takes the Triton path (``auto`` on a GPU), else None (eager PyTorch, graphed on a GPU).

    NTC has no hand-written training kernel: Inductor compiles the model's own forward and backward
    into fused Triton kernels (:mod:`neuralbake.nn.compiled`), which the trainer graphs like the eager step.
    """
    config: NTCConfig = run.config
    precision = config.train.precision
    reason = None if precision == "fp32" else f"the compiled step trains in fp32 and this run trains in {precision}"
    if run.kernels("train", config.kernels, reason) != "triton":
        return None
    if run.device.type != "cuda":  # Triton's interpreter (tests) on a CPU: Inductor would compile C++ here, not Triton
        run.kernel_paths["train"] = {"path": "torch", "why": "the compiled step trains on a CUDA GPU; this run is on the CPU"}
        return None
    run.kernel_paths["train"]["why"] = (f"{'auto' if config.kernels == 'auto' else '--kernels triton'}: {COMPILED_STEP_GAIN}; "
                                        "TorchInductor compiles it once per machine and caches it")

    def fell_back(why: str) -> None:
        run.kernel_paths["train"] = {"path": "torch", "why": f"auto: the compiled step failed here ({why})"}
        run.note(f"the compiled NTC step failed here ({why}); PyTorch trains")

    def refuse(why: str) -> None:
        raise ConfigError(f"the compiled NTC step failed here ({why}).", field="kernels", fix="use --kernels auto or torch.")

    return CompiledForwardBackward(model, F.mse_loss, fall_back=fell_back if config.kernels == "auto" else refuse)


COMPILED_STEP_GAIN = "the compiled step trained the crate 1.9x faster than the graphed PyTorch step on an H200, at equal PSNR"
"""Why ``auto`` compiles NTC's step on a GPU: ``bench/bakes_gpu.py --kinds ntc --paths torch auto``, 2026-11-29: 113.1 s
against 58.7 s of training (100,000 + 10,000 steps), 41.26 against 41.34 dB, 24 s to compile cold (docs/benchmarks.md)."""


def _level0_preview(net: nn.Module, layout: NTCLayout, sampler: TexelSampler) -> np.ndarray:
    width, height = layout.level_sizes[0]
    coords = _level0_coords(torch.arange(width * height, device=sampler.texels.device), width)
    prediction = torch.cat([net(part).clamp(0, 1) for part in coords.split(1 << 16)])
    level0 = lambda t: t[: width * height].reshape(height, width, -1).float().cpu().numpy()
    return _preview_image(level0(sampler.texels), level0(prediction), layout.groups)


def _compress_rate(
    run: BakeRun, bpp: float, layout: NTCLayout, texture_set: TextureSet, reference: list[np.ndarray], baselines: dict[str, Any] | None, folder: Path, prefix: str
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Train and write one rate into ``folder``; return its metrics, report fields and training history."""
    config: NTCConfig = run.config
    device = run.device
    start = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(config.train.seed)
    model = NTCModel(layout, generator=generator, weight_clip=config.weight_clip).to(device)
    sampler = TexelSampler(layout, reference, config.batch_size, device)
    compatibility = {"layout": layout.header(), "size": [texture_set.width, texture_set.height], "batch_size": config.batch_size}
    phases = _train(run, model, sampler, compatibility, prefix)
    history: list[dict[str, Any]] = []
    offset = 0
    for _, result in phases:
        history += [{**event, "step": event["step"] + offset} for event in result.history]
        offset += result.steps

    data = pack_container(model)
    atomic_write_bytes(folder / CONTAINER_NAME, data)
    manifest = {"file": CONTAINER_NAME, "bytes": len(data), "sha256": sha256_file(folder / CONTAINER_NAME), "format": "neuralbake.ntc", "version": CONTAINER_VERSION}
    atomic_write_json(folder / MANIFEST_NAME, manifest)
    memory = _peak_memory(device)

    decode_start = time.perf_counter()
    container = read_container(folder / CONTAINER_NAME).to(device)
    def trial() -> None:
        from neuralbake.kernels.decoders import FusedNTC  # imports Triton

        one = torch.zeros(1, dtype=torch.int64, device=device)
        FusedNTC(container, torch.float32).texels(one, one, one)

    kernels = run.kernels("decode", config.kernels, decode_reason(container), dtype=torch.float32, trial=trial)  # the decode runs in fp32
    with run.task(f"decoding {prefix.rstrip('_') or 'texture.ntc'}", sum(w * h for w, h in layout.level_sizes), unit="texels") as advance:
        decoded = decode_all_levels(container, progress=advance, kernels=kernels)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    decode_seconds = time.perf_counter() - decode_start
    quality = set_quality(decoded, reference, layout.groups)
    _save_preview(folder / "preview.png", reference[0], decoded[0], layout.groups)

    measured = 8.0 * len(data) / (texture_set.width * texture_set.height)
    fields: dict[str, Any] = {
        "bpp_target": bpp,
        "bpp_measured": measured,
        "bpp_counts": "bytes of texture.ntc (every mip level inside) * 8 / texels of mip 0; BCn likewise over the full mip chain",
        "bytes": len(data),
        "sections": layout.section_bytes(),
        "latent_shape": {**asdict(layout.shape), "low_div": layout.shape.low_div, "name": layout.shape.name, "nominal_latent_bpp": round(layout.shape.nominal_bpp, 3)},
        "decoder": {"widths": layout.layer_widths, "activation": layout.activation, "weights": "int8 QAT", "biases": "fp32"},
        "size": [texture_set.width, texture_set.height],
        "levels": layout.levels,
        "groups": [asdict(g) for g in layout.groups],
        "sources": texture_set.sources,
        "ntc": quality,
        "train_seconds": round(sum(result.train_seconds for _, result in phases), 3),
        "decode_seconds_all_levels": round(decode_seconds, 4),
        "kernels": {"train": run.kernel_paths["train"]["path"], "decode": kernels},
        "steps": {name.removeprefix(prefix): result.steps for name, result in phases},
        "phases": [name for name, _ in phases],
        "training": training_record(phases, "psnr_db"),
        "psnr_curve": _psnr_curve(phases),
        **memory,
    }
    transcoded = None
    if baselines is not None:
        fields["bcn"] = {family: {k: v for k, v in result.items() if k != "levels"} for family, result in baselines.items()}
        transcoded = _transcode_to_bc7(run, decoded, reference, layout, prefix.rstrip("_") or CONTAINER_NAME)
        fields["transcode_seconds"] = transcoded["seconds"]
    fields["comparison"] = comparison_table(len(data), quality, texture_set.width * texture_set.height, baselines, transcoded)
    fields["compress_seconds"] = round(time.perf_counter() - start, 3)
    return {"psnr_db": quality["overall_db"], "bpp": measured}, fields, history


def _psnr_curve(phases: list[tuple[str, TrainResult]]) -> list[dict[str, float]]:
    """The evaluation set's PSNR (hard-rounded latents) against step and training seconds, over both phases."""
    points: list[dict[str, float]] = []
    steps = seconds = 0.0
    for _, result in phases:
        for event in result.history:
            if event.get("event") == "eval" and isinstance(event.get("psnr_db"), (int, float)):
                point = {"step": event["step"] + steps, "seconds": round(event["train_seconds"] + seconds, 3), "psnr_db": round(event["psnr_db"], 3)}
                if "restored_from_step" in event:  # the phase ended on the weights of an earlier, better evaluation
                    point["restored_from_step"] = event["restored_from_step"] + steps
                points.append(point)
        steps += result.steps
        seconds += result.train_seconds
    return points


def _transcode_to_bc7(run: BakeRun, decoded: list[np.ndarray], reference: list[np.ndarray], layout: NTCLayout, what: str) -> dict[str, Any]:
    """The decoded set BC-encoded as ``ntc transcode --format bc7`` does, measured against ``reference`` (the table's NTC->BC7 row)."""
    start = time.perf_counter()
    formats = choose_formats(layout.groups, "bc7")
    with run.task(f"NTC->BC7 {what}", len(layout.groups) * len(layout.level_sizes), unit="texture mips") as advance:
        encoded = encode_textures(decoded, layout.groups, formats, bc7_uber_level=run.config.bc7_uber_level, progress=advance)
    group_bytes = {texture.group.name: texture.data_bytes for texture in encoded}
    quality = set_quality(stack_groups([texture.levels for texture in encoded]), reference, layout.groups)
    seconds = round(time.perf_counter() - start, 4)
    return {"bytes": sum(group_bytes.values()), "group_bytes": group_bytes, "formats": formats, "quality": quality, "seconds": seconds}


def _curve_title(layout: NTCLayout) -> str:
    return f"NTC {layout.shape.name} at {layout.bpp():.2f} bpp"


def _stopped_after(exc: TrainingInterrupted, finished: list[Path]) -> TrainingInterrupted:
    """The stop of a multi-rate run, naming the rates that had finished: each is a complete folder (its own
    ``bake.json``, so ``ntc decompress`` and ``ntc transcode`` read it) in the staging folder, where it stays
    until the run is resumed (``--resume`` does not train them again)."""
    if not finished:
        return exc
    listed = ", ".join(f"{folder.name} in {folder.absolute()}" for folder in finished)
    return TrainingInterrupted(
        f"{exc.problem} The rates that finished are complete folders (each with its bake.json; `neuralbake ntc decompress` "
        f"reads them), kept until the run is resumed: {listed}.",
        path=exc.path, field=exc.field, fix=exc.fix,
    )


def _body(run: BakeRun) -> BakeOutcome:
    config: NTCConfig = run.config
    device = run.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    texture_set = load_config_texture_set(config)
    rates = config.rates()
    # every rate must fit before any training starts
    layouts = {bpp: choose_layout(texture_set.width, texture_set.height, texture_set.groups, bpp, hidden=config.hidden, pe_frequencies=config.pe_frequencies) for bpp in rates}
    for layout in layouts.values():  # and an impossible --kernels triton fails before it too
        resolve_kernels(config.kernels, device, unsupported_reason(layout.layer_widths, [layout.activation, "none"]))
    groups = ", ".join(f"{g.name} ({len(g.channels)})" for g in texture_set.groups)
    run.note(f"texture set {texture_set.width}x{texture_set.height}, {texture_set.channels} channels: {groups}")
    reference = texture_set.mip_chain()
    baselines = None
    if config.baselines:
        with run.task("BC1/BC7 baselines", 2 * len(texture_set.groups), unit="textures") as advance:
            baselines = bc_baselines(reference, texture_set.groups, texture_set.width, texture_set.height, bc7_uber_level=config.bc7_uber_level, progress=advance)
        for result in baselines.values():  # measured: their decoded chains are not needed (the memory goes to NTC->BC7's)
            del result["levels"]
    if len(rates) == 1:
        layout = layouts[rates[0]]
        metrics, fields, _ = _compress_rate(run, rates[0], layout, texture_set, reference, baselines, run.stage, "")
        plot_rate_distortion(run.stage / "rd.png", rate_distortion_summary([fields], baselines))
        return BakeOutcome(metrics, fields, curve_title=_curve_title(layout), quality_key="psnr_db")

    reports = []
    finished: list[Path] = []
    for bpp, layout in layouts.items():
        name = f"bpp_{bpp:g}"
        folder = run.stage / name
        try:
            metrics, fields, history = _compress_rate(run, bpp, layout, texture_set, reference, baselines, folder, f"{name}_")
        except TrainingInterrupted as exc:
            raise _stopped_after(exc, finished) from exc
        reports.append(write_report(folder / "report.json", bake="ntc", device=device, metrics=run.shown(metrics), **run.shown(fields),
                                    wall_seconds=fields["compress_seconds"]))
        if history:
            plot_loss_curve(folder / "loss.png", history, title=_curve_title(layout), quality_key="psnr_db")
        write_bake_manifest(folder, bake="ntc")  # each rate's folder can be checked (and decompressed) on its own
        finished.append(folder)
    summary = rate_distortion_summary(reports, baselines)
    atomic_write_json(run.stage / "rd.json", run.shown(summary))
    plot_rate_distortion(run.stage / "rd.png", summary)
    metrics = {key: value for key, value in summary["comparison"].items() if value is None or isinstance(value, int | float)}
    fields = {"rates": [f"bpp_{bpp:g}" for bpp in rates], "rd": summary, "size": [texture_set.width, texture_set.height], "sources": texture_set.sources}
    return BakeOutcome(metrics, fields, curve_title=f"NTC at {', '.join(f'{b:g}' for b in rates)} bpp (phases one after another)", quality_key="psnr_db")


NTC = Bake("ntc", NTCConfig, _body, device_defaults=device_defaults, title="ntc", footprint=ntc_footprint)
"""The NTC bake, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def compress_texture_set(config: NTCConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Compress a texture set at every rate of ``config.bpp`` into ``out_dir`` (see the module docstring).

    Runs through :func:`neuralbake.bakes.run.run_bake`; returns the report (one rate: its numbers;
    several: ``rd`` holds the rate-distortion record).
    """
    return NTC.run(config, out_dir, **options)


def compress_rate_distortion(
    config: NTCConfig, bpps: list[float], out_dir: str | Path, *, resume: bool = False, progress: bool = True, sinks: list[EventSink] | None = None
) -> dict[str, Any]:
    """Compress the set at every rate in ``bpps`` (one bake; ``out_dir/bpp_<X>/`` with two or more) -> the RD record (``rd.json``)."""
    if not bpps:
        raise ConfigError("no rates given.", field="bpp", fix="pass one or more rates.")
    report = compress_texture_set(replace(config, bpp=[float(b) for b in bpps]), out_dir, resume=resume, progress=progress, sinks=sinks)
    return report["rd"] if "rd" in report else rate_distortion_summary([report], report.get("bcn"))
