"""The one run path every bake goes through.

A bake module declares *what* is learned with a :class:`Bake`: its config dataclass, the sizes
it picks by device, and a body that builds sampler, model and loss, trains them with
:meth:`BakeRun.train` and writes its outputs into :attr:`BakeRun.stage`. :func:`run_bake` does
the rest, the same for every bake:

1. resolve the device, fill the config's device-dependent defaults (fields left ``None``; the
   choice is printed and recorded in the report), validate, check the footprint, and check that
   every input path is there (:func:`check_input_paths`: ``file not found: PATH`` naming the field);
2. claim the output folder: a lock (``.neuralbake/lock``) refuses a second bake on the same
   folder instead of interleaving the two; a swap that a crash cut short is finished first;
3. write ``config.json`` into the staging folder (``.neuralbake/staging``) before any work, seed
   every generator, and open the event sinks: ``events.jsonl``, a progress bar on stderr, and
   whatever the caller passes (the asset service subscribes this way);
4. run the body; each training phase runs on the shared :class:`~neuralbake.nn.trainer.Trainer`
   with its checkpoint in ``.neuralbake/checkpoints/<phase>.pt`` (by steps and by time; Ctrl-C and
   SIGTERM save one; ``resume=True`` continues each phase from it, bit-identically);
5. write ``report.json`` and ``loss.png``, then ``bake.json`` with a size and a sha256 for every
   file (see :mod:`neuralbake.io.manifest`), and swap the staging folder's files into the output
   folder. The swap is journalled (``.neuralbake/swap.json``) and finished by the next bake on the
   folder if the process dies inside it, so the folder never holds a new ``config.json`` beside an
   old bundle, nor half-written files.

The previous bake's files (those its ``bake.json`` lists) are replaced; anything else in the
folder is left alone. Checkpoints stay after a finished bake, so ``--resume`` with more steps
extends it.

A bake refused before it has anything to show changes nothing in the folder: a new bake moves the
previous one's staging, checkpoints and previews aside (``.neuralbake/set_aside``, a resumed one
only its staging) and puts them back if it fails or stops before it wrote a checkpoint of its own;
they are dropped once it has one, or has finished. After a ``kill -9`` the next bake on the folder
applies the same rule first, under the lock.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
from rich.console import Console

from neuralbake.bakes.folder import (
    PREVIEW_DIR,
    STATE_DIR,
    DropAsideOnCheckpoint,
    drop_aside,
    finish_swap,
    folder_lock,
    prepare_state,
    settle_aside,
    swap_in,
)
from neuralbake.core.config import config_to_dict
from neuralbake.core.device import device_memory_bytes, resolve_device, seed_everything
from neuralbake.core.events import EventSink, EventWriter, JsonlSink, ProgressSink, progress_task
from neuralbake.core.paths import PathField, map_paths
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import ConfigError, InputError, NeuralbakeError
from neuralbake.io.files import atomic_path, atomic_write_json, prepare_output_dir
from neuralbake.io.images import resize_image, save_png
from neuralbake.io.manifest import write_bake_manifest
from neuralbake.kernels import kernel_choice, tried_kernels
from neuralbake.nn.convergence import training_record
from neuralbake.nn.trainer import Trainer, TrainerConfig, TrainingInterrupted, TrainResult

__all__ = [
    "Bake",
    "BakeOutcome",
    "BakeRun",
    "Footprint",
    "apply_defaults",
    "check_footprint",
    "check_input_paths",
    "get_field",
    "run_bake",
    "set_field",
    "validate_for_any_device",
]

C = TypeVar("C")

PREVIEW_MAX_SIDE = 1024
PREVIEW_VERSIONS = 20
"""Pictures kept per preview name (the newest); the events name every one that was published."""


@dataclass
class BakeOutcome:
    """What a bake's body hands back: the report's metrics and fields."""
    metrics: dict[str, Any]
    """Headline numbers (PSNR, FLIP, ...), first in ``report.json``."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Everything else the report records (sizes, timings, files)."""
    curve_title: str | None = None
    """Title of ``loss.png`` (``None``: the bake draws no loss curve)."""
    quality_key: str | None = None
    """Eval metric drawn on the loss curve's second axis (e.g. ``psnr_db``)."""
    rate_tolerance: float | None = None
    """Gain of ``quality_key`` per 1,000 steps under which the run also counts as converged
    (:func:`~neuralbake.nn.convergence.convergence`); ``None``: the last quarter's gain alone decides."""


@dataclass(frozen=True)
class Footprint:
    """What a bake will ask of its machine, estimated from its config (device defaults filled in)
    before any input is read or any memory is spent."""

    memory_bytes: int
    """Peak memory on the bake's device (host memory on a CPU, GPU memory on a GPU): its inputs and
    references as held, weights with their gradients and optimiser state, and a batch's activations."""
    steps: int
    """Optimiser steps over all its training phases."""
    field: str
    """The setting that drives most of the memory (named in the error when it is too much)."""
    steps_field: str = "train.steps"
    """The setting that sets the steps (``train.steps``, ``epochs``...)."""


@dataclass
class Bake(Generic[C]):
    """A bake's declaration: what the runner needs to run it."""
    name: str
    """Short name, recorded as ``bake`` in the report and the manifest (``neural_texture``)."""
    config_type: type[C]
    """The config dataclass (one field per setting; a docstring under each)."""
    body: Callable[[BakeRun], BakeOutcome]
    """Builds sampler, model and loss, trains with ``run.train``, writes outputs into ``run.stage``."""
    device_defaults: Callable[[C, torch.device], dict[str, Any]] | None = None
    """``(config, device) -> {dotted.field: value}`` for fields left ``None``: full size on a GPU,
    sizes that finish in minutes on a CPU."""
    title: str = ""
    """Progress-bar label (default: the name)."""
    footprint: Callable[[C, torch.device], Footprint] | None = None
    """``(config, device) -> Footprint``: the memory and steps a validated config (device defaults
    filled in) will need, checked by :func:`check_footprint` before the bake starts (and by the asset
    service before it queues a job)."""

    def run(self, config: C, out_dir: str | Path, **options: Any) -> dict[str, Any]:
        """Run this bake with ``config`` into ``out_dir``: :func:`run_bake` (``resume``, ``progress``,
        ``sinks``, ``on_step``); return the report."""
        return run_bake(self, config, out_dir, **options)


def _seed_of(config: Any) -> int:
    train = getattr(config, "train", None)
    if isinstance(train, TrainerConfig):
        return train.seed
    return int(getattr(config, "seed", 0) or 0)


def get_field(config: Any, dotted: str) -> Any:
    """``config``'s field at a dotted path (``train.steps``)."""
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def set_field(config: Any, dotted: str, value: Any) -> None:
    """Set ``config``'s field at a dotted path (``train.steps``)."""
    *parents, last = dotted.split(".")
    for part in parents:
        config = getattr(config, part)
    setattr(config, last, value)


def apply_defaults(bake: Bake[C], config: C, device: torch.device) -> dict[str, Any]:
    """Fill the config fields left ``None`` with the bake's defaults for ``device``; return those set."""
    chosen: dict[str, Any] = {}
    if bake.device_defaults is None:
        return chosen
    for dotted, value in bake.device_defaults(config, device).items():
        if get_field(config, dotted) is None:
            set_field(config, dotted, value)
            chosen[dotted] = value
    return chosen


def validate_for_any_device(bake: Bake[C], config: C) -> None:
    """``config``'s own ``validate()`` with the fields a device would choose filled as on a CPU: how a
    config is checked before the machine that will run it is known (the service at submission)."""
    trial = copy.deepcopy(config)
    apply_defaults(bake, trial, torch.device("cpu"))
    try:
        trial.validate()  # type: ignore[attr-defined]
    except NeuralbakeError:
        raise
    except ValueError as exc:

        raise ConfigError(str(exc), field="config") from exc


def check_input_paths(config: Any) -> None:
    """Refuse ``config`` when an input it names is not there: an :class:`~neuralbake.errors.InputError`
    ``file not found: PATH`` naming the field (``material``, ``sources[1]``, ``stage_options.fit.reference``).

    Every field declared as a path (:mod:`neuralbake.core.paths`) is checked, at any depth, before the bake
    reads anything, so a typo'd path gets this one message whatever would have read it (a glTF reader, an
    image loader, a material parser) instead of that reader's guess at what went wrong."""

    def check(field: str, path: str, marker: PathField) -> str:
        if path and not os.path.exists(path):  # os.path.exists: False, never an error, for any string
            what = "file or folder" if marker.folder else "file"
            shown = path if len(path) <= 300 else path[:297] + "..."
            raise InputError(f"{what} not found: {shown}.", field=field, fix="check the path (a relative path starts from the folder the command runs in).")
        return path

    map_paths(type(config), config_to_dict(config), check)


def check_footprint(
    bake: Bake[C], config: C, device: torch.device, *, memory_bytes: int | None = None, max_steps: int | None = None, fraction: float = 0.8
) -> Footprint | None:
    """Refuse ``config`` when its :class:`Footprint` is more than the machine can hold: more than
    ``fraction`` of ``memory_bytes`` (default: what ``device`` has free now), or more than ``max_steps``.
    Returns the footprint (``None`` for a bake that declares none)."""
    if bake.footprint is None:
        return None

    footprint = bake.footprint(config, device)
    where = "this GPU" if device.type == "cuda" else "this machine"
    if memory_bytes is None:
        memory_bytes = device_memory_bytes(device)
    else:
        where = "the service's workers"
    if memory_bytes is not None and footprint.memory_bytes > fraction * memory_bytes:
        raise ConfigError(
            f"these settings need about {footprint.memory_bytes / 2**30:.1f} GiB of memory; {where} can give "
            f"{fraction * memory_bytes / 2**30:.1f} GiB.",
            field=footprint.field,
            fix=f"lower {footprint.field} (or the sizes beside it).",
        )
    if max_steps is not None and footprint.steps > max_steps:
        raise ConfigError(
            f"these settings train {footprint.steps:,} steps; the service runs at most {max_steps:,}.",
            field=footprint.steps_field,
            fix=f"lower {footprint.steps_field}, or ask the service's operator to raise --max-steps.",
        )
    return footprint


class BakeRun:
    """One running bake, as its body sees it (see the module docstring)."""
    def __init__(self, *, bake: Bake[Any], config: Any, device: torch.device, out: Path, state: Path, events: EventWriter,
                 resume: bool, progress: bool, on_step: Callable[[Trainer, int], None] | None, previews: bool = False,
                 shown: Callable[[Any], Any] | None = None) -> None:
        self.bake = bake
        self.config = config
        """The resolved config (device defaults filled in)."""
        self.device = device
        self.out = out
        """The final output folder (outputs appear there only when the bake has finished)."""
        self.stage = state / "staging"
        """Where the body writes its outputs."""
        self.checkpoints = state / "checkpoints"
        self.events = events
        self.resume = resume
        self.progress = progress
        self._on_step = on_step
        self._shown = shown
        self.phases: list[tuple[str, TrainResult]] = []
        self.previews = state / PREVIEW_DIR if previews else None
        """Where live previews go (``.neuralbake/previews``), or ``None`` when nobody watches."""
        self._trainer: Trainer | None = None
        self._phase = ""
        self._resumed_any = False
        self._earlier_phase_trained = False
        self.kernel_paths: dict[str, dict[str, str]] = {}
        """Each piece of work's kernel path and why it was chosen (:meth:`kernels`), for the report's ``kernel_paths``."""

    def kernels(self, work: str, mode: str, reason: str | None = None, *, dtype: torch.dtype | None = None,
                trial: Callable[[], object] | None = None, torch_faster: str | None = None) -> str:
        """``triton`` or ``torch`` for ``work`` (``train``, ``decode``...) under the ``--kernels`` setting ``mode``, decided
        once here and kept on the run with why (:attr:`kernel_paths`).

        ``reason``: why the fused kernels cannot run the network (:func:`~neuralbake.kernels.unsupported_reason`);
        ``trial``: one small call of the fused path (a kernel that fails to compile here falls back under ``auto``);
        ``torch_faster``: the measurement that makes PyTorch the faster path for this work, which ``auto`` then takes.
        """
        path, why = kernel_choice(mode, self.device, reason, dtype=dtype)
        if path == "triton" and mode == "auto" and torch_faster:
            path, why = "torch", f"auto: {torch_faster}"
        if trial is not None:
            path, failed = tried_kernels(mode, path, trial, self.note)
            why = failed or why
        self.kernel_paths[work] = {"path": path, "why": why}
        return path

    def train(
        self,
        model: torch.nn.Module,
        sampler: Any,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        train: TrainerConfig,
        *,
        phase: str = "train",
        evaluate: Callable[[torch.nn.Module], dict[str, float]] | None = None,
        compatibility: dict[str, Any] | None = None,
        forward_backward: Any = None,
        on_step: Callable[[Trainer, int], None] | None = None,
        lr_scales: dict[str, float] | None = None,
        quality_key: str | None = None,
    ) -> TrainResult:
        """Run one training phase on the shared Trainer, checkpointed as ``phase``; ``quality_key``
        names the figure of ``evaluate``'s result that ``train.plateau_evals`` watches.

        On ``resume``, a phase with a checkpoint continues from it (a finished phase returns at
        once with its result); phases after the interrupted one start fresh.
        """
        if any(name == phase for name, _ in self.phases):
            raise ValueError(f"phase {phase!r} ran twice in one bake; give each phase its own name.")
        checkpoint = self.checkpoints / f"{phase}.pt"
        # A phase that trains on (or afresh) changes the weights every later phase starts from, so
        # their old checkpoints no longer follow from it: they start over.
        resume = self.resume and checkpoint.is_file() and not self._earlier_phase_trained
        self._resumed_any |= resume
        hooks = [hook for hook in (on_step, self._on_step) if hook is not None]

        def each_step(trainer: Trainer, step: int) -> None:
            for hook in hooks:
                hook(trainer, step)

        trainer = Trainer(
            model, sampler, loss_fn, train, device=self.device, checkpoint_path=checkpoint, events=self.events, evaluate=evaluate,
            forward_backward=forward_backward, on_step=each_step if hooks else None, compatibility=compatibility, lr_scales=lr_scales,
            quality_key=quality_key,
        )
        self.events.emit("phase", phase=phase, resumed=resume)
        self._trainer, self._phase = trainer, phase
        result = trainer.fit(resume=resume)
        if self.resume and trainer.started_at < result.steps:
            self._earlier_phase_trained = True
        self.phases.append((phase, result))
        return result

    def shown(self, value: Any) -> Any:
        """``value`` (a record a bake writes besides its report: a bundle's manifest, a per-rate report)
        as the caller wants its inputs shown (``run_bake(shown=...)``); as it is otherwise."""
        return self._shown(value) if self._shown is not None else value

    def run_stage(self, bake: Bake[Any], config: Any, out: Path, *, resume: bool, sinks: list[EventSink] | None = None) -> dict[str, Any]:
        """Run another bake into ``out`` as a stage of this one (the lod chain's simplify, skin and
        fit): on the one run path, with this run's step hook, so a job's cancellation or a fault
        injected by a test reaches whichever stage is training."""
        return run_bake(bake, config, out, resume=resume, progress=self.progress, sinks=sinks, on_step=self._on_step, shown=self._shown)

    @property
    def step(self) -> int:
        """The running phase's step (0 before the first phase)."""
        return self._trainer.step if self._trainer is not None else 0

    def preview_image(self, name: str, image: Callable[[], Any], *, max_side: int = PREVIEW_MAX_SIDE) -> str | None:
        """Publish a live picture of the bake (``[H, W, C]`` floats in [0, 1], made by ``image()``).

        Only when the bake runs with ``previews=True`` (the service's workers; a plain CLI run
        skips the work): the picture is written as ``.neuralbake/previews/<name>.<number>.png``
        (shrunk to at most ``max_side`` pixels a side; the newest :data:`PREVIEW_VERSIONS` per
        name are kept) and announced by a ``preview`` event naming the file, the phase and the
        step. Returns the file name, or ``None`` when previews are off (and for a run's half-length twin's evaluation).
        """
        if self.previews is None or (self._trainer is not None and self._trainer.half_run.running):
            return None
        _check_preview_name(name)
        import numpy as np


        picture = np.asarray(image(), dtype=np.float32)
        if picture.ndim == 2:
            picture = picture[..., None]
        height, width = picture.shape[:2]
        scale = min(1.0, max_side / max(height, width))
        if scale < 1.0:
            height, width = max(1, round(height * scale)), max(1, round(width * scale))
            picture = resize_image(picture, width, height)
        self.previews.mkdir(parents=True, exist_ok=True)
        versions = sorted(self.previews.glob(f"{name}.*.png"))
        number = int(versions[-1].name.split(".")[1]) + 1 if versions else 1
        file = f"{name}.{number:06d}.png"  # numbered on across phases and resumes (steps restart per phase)
        save_png(self.previews / file, picture)
        for old in sorted(self.previews.glob(f"{name}.*.png"))[:-PREVIEW_VERSIONS]:
            old.unlink(missing_ok=True)
        self.events.emit("preview", name=name, file=file, phase=self._phase, step=self.step, width=width, height=height)
        return file

    def preview_arrays(self, name: str, arrays: dict[str, Any]) -> str | None:
        """Keep arrays beside the previews as ``.neuralbake/previews/<name>.npz`` (numbers only,
        read back without pickle), for a service that works on a preview (the fit's paintable
        views keep their visibility data this way); ``None`` when previews are off."""
        if self.previews is None:
            return None
        _check_preview_name(name)
        import numpy as np


        self.previews.mkdir(parents=True, exist_ok=True)
        file = f"{name}.npz"
        with atomic_path(self.previews / file) as tmp, open(tmp, "wb") as handle:
            np.savez_compressed(handle, **{key: np.asarray(value) for key, value in arrays.items()})
        return file

    @contextlib.contextmanager
    def task(self, description: str, total: int, *, unit: str = "") -> Iterator[Callable[[int], None]]:
        """A progress bar (with remaining time) for work that is not training; yields ``advance(n)``."""
        with progress_task(description, total, enabled=self.progress, unit=unit) as advance:
            yield advance

    def note(self, message: str) -> None:
        """One line of plain text on stderr (not with ``quiet``)."""
        if self.progress:
            Console(stderr=True).print(message, highlight=False, markup=False)

    def history(self) -> list[dict[str, Any]]:
        """Every phase's train/eval events, steps counted on from phase to phase."""
        events: list[dict[str, Any]] = []
        offset = 0
        for name, result in self.phases:
            events.extend({**event, "step": event["step"] + offset, "phase": name} for event in result.history)
            offset += result.steps
        return events


def _check_preview_name(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"a preview name is 1 to 64 letters, digits, _ or -; got {name!r}")


class _Shown:
    """An event sink that hands another the events as ``shown`` makes them (see :func:`run_bake`)."""
    def __init__(self, sink: EventSink, shown: Callable[[Any], Any]) -> None:
        self.sink, self.shown = sink, shown

    def write(self, event: dict[str, Any]) -> None:
        self.sink.write(self.shown(event))

    def close(self) -> None:
        self.sink.close()


# -- the run ----------------------------------------------------------------------------------


def run_bake(
    bake: Bake[C],
    config: C,
    out_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    sinks: list[EventSink] | None = None,
    on_step: Callable[[Trainer, int], None] | None = None,
    previews: bool = False,
    shown: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """Run ``bake`` with ``config`` into ``out_dir`` (see the module docstring); return the report.

    ``shown`` turns what the bake records of its settings and inputs (``config.json``, ``report.json``,
    ``events.jsonl``) into what its readers may see (the asset service shows upload references, not
    its own paths). ``sinks`` receive every event (the service subscribes here); ``on_step`` is called after every
    training step of every phase (tests inject faults with it); ``previews`` turns on the bake's
    live pictures (:meth:`BakeRun.preview_image`), which only a watcher needs. Raises
    :class:`~neuralbake.nn.trainer.TrainingInterrupted` when stopped by Ctrl-C or SIGTERM (the
    staging folder and checkpoints are kept for ``resume=True``); on any other error the output
    folder is left as it was: removed if this bake created it, else its previous bake untouched.
    """
    wall_start = time.perf_counter()
    config = copy.deepcopy(config)  # the caller's object stays as given
    device = resolve_device(getattr(config, "device", "auto"))
    chosen = apply_defaults(bake, config, device)
    config.validate()  # type: ignore[attr-defined]
    check_footprint(bake, config, device)
    check_input_paths(config)
    created_out = not Path(out_dir).exists()
    out = prepare_output_dir(out_dir)
    state = out / STATE_DIR
    created_state = not state.exists()
    state.mkdir(exist_ok=True)
    return _run_in_folder(
        bake, config, out, state, device, chosen, resume=resume, progress=progress, sinks=sinks, on_step=on_step, wall_start=wall_start,
        previews=previews, created=out if created_out else state if created_state else None, shown=shown,
    )


def _run_in_folder(
    bake: Bake[Any], config: Any, out: Path, state: Path, device: torch.device, chosen: dict[str, Any], *,
    resume: bool, progress: bool, sinks: list[EventSink] | None, on_step: Callable[[Trainer, int], None] | None, wall_start: float,
    created: Path | None, previews: bool = False, shown: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    with folder_lock(state / "lock", out):
        prepared = False
        try:
            finished = (state / "swap.json").exists()  # a bake killed inside its swap had finished: what it set aside goes
            finish_swap(out, state)
            settle_aside(state, finished=finished)  # what a killed bake left set aside
            prepare_state(out, state, resume)
            prepared = True
            return _run_locked(
                bake, config, out, state, device, chosen, resume=resume, progress=progress, sinks=sinks, on_step=on_step, wall_start=wall_start,
                previews=previews, shown=shown,
            )
        except (TrainingInterrupted, KeyboardInterrupt):
            # Staging and checkpoints stay for --resume once this bake has a checkpoint; before, the previous ones come back.
            settle_aside(state)
            raise
        except BaseException:
            # Nothing usable came of it. Before its first checkpoint, the folder gets back what it held; after,
            # its staged outputs go and its checkpoints stay (a failure after training must not cost the
            # training). A folder this bake created goes too when no checkpoint was written, all while the
            # lock is still held.
            if settle_aside(state) != "restored" and prepared:
                shutil.rmtree(state / "staging", ignore_errors=True)
            shutil.rmtree(state / "trash", ignore_errors=True)
            checkpoints = state / "checkpoints"
            if created is not None and not (checkpoints.is_dir() and any(checkpoints.glob("*.pt"))):
                shutil.rmtree(created, ignore_errors=True)
            raise


def _run_locked(
    bake: Bake[Any], config: Any, out: Path, state: Path, device: torch.device, chosen: dict[str, Any], *,
    resume: bool, progress: bool, sinks: list[EventSink] | None, on_step: Callable[[Trainer, int], None] | None, wall_start: float,
    previews: bool = False, shown: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    stage = state / "staging"
    record = shown or (lambda value: value)
    atomic_write_json(stage / "config.json", record(config_to_dict(config)))
    if chosen:
        where = "GPU" if device.type == "cuda" else "CPU"
        picked = ", ".join(f"{name.rsplit('.', 1)[-1]} {_show(value)}" for name, value in chosen.items())
        if progress:
            Console(stderr=True).print(f"{where} defaults: {picked} (flags or --config choose others)", highlight=False, markup=False)
    seed_everything(_seed_of(config))
    all_sinks: list[EventSink] = [_Shown(JsonlSink(stage / "events.jsonl"), record), DropAsideOnCheckpoint(state), *(sinks or [])]
    if progress:
        all_sinks.append(ProgressSink(bake.title or bake.name.replace("_", " "), console=Console(stderr=True)))
    events = EventWriter(all_sinks)
    run = BakeRun(bake=bake, config=config, device=device, out=out, state=state, events=events, resume=resume, progress=progress, on_step=on_step,
                  previews=previews, shown=shown)
    try:
        events.emit("bake", bake=bake.name, out=str(out), device=str(device), resumed=resume, device_defaults=chosen)
        outcome = bake.body(run)
        events.emit("done", bake=bake.name, wall_seconds=round(time.perf_counter() - wall_start, 3))
    finally:
        events.close()
    history = run.history()
    if outcome.curve_title is not None and history:
        plot_loss_curve(stage / "loss.png", history, title=outcome.curve_title, quality_key=outcome.quality_key)
    training = {"training": training_record(run.phases, outcome.quality_key, rate_tolerance=outcome.rate_tolerance)} if run.phases and "training" not in outcome.fields else {}
    report = write_report(
        stage / "report.json",
        bake=bake.name,
        device=device,
        metrics=record(outcome.metrics),
        **record(outcome.fields),
        **training,
        **({"kernel_paths": run.kernel_paths} if run.kernel_paths else {}),
        device_defaults=chosen,
        resumed=resume,
        wall_seconds=round(time.perf_counter() - wall_start, 3),
    )
    manifest = write_bake_manifest(stage, bake=bake.name)
    swap_in(out, state, list(manifest["files"]))
    drop_aside(state)  # finished: the previous bake's state goes
    return report


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "x".join(str(v) for v in value)
    return str(value)
