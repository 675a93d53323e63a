"""The one run path every bake goes through.

A bake module declares *what* is learned with a :class:`Bake`: its config dataclass, the sizes
it picks by device, and a body that builds sampler, model and loss, trains them with
:meth:`BakeRun.train` and writes its outputs into :attr:`BakeRun.stage`. :func:`run_bake` does
the rest, the same for every bake:

1. resolve the device, fill the config's device-dependent defaults (fields left ``None``; the
   choice is printed and recorded in the report), validate;
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
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
from rich.console import Console

from neuralbake.core.config import config_to_dict
from neuralbake.core.device import resolve_device, seed_everything
from neuralbake.core.events import EventSink, EventWriter, JsonlSink, ProgressSink, progress_task
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.errors import InputError, NeuralbakeError, TrainingError
from neuralbake.io.files import atomic_write_json, prepare_output_dir
from neuralbake.io.limits import load_json_file
from neuralbake.io.manifest import BAKE_MANIFEST, read_bake_manifest, write_bake_manifest
from neuralbake.nn.trainer import Trainer, TrainerConfig, TrainingInterrupted, TrainResult

__all__ = [
    "Bake",
    "BakeOutcome",
    "BakeRun",
    "Footprint",
    "OutputLockedError",
    "apply_defaults",
    "check_footprint",
    "get_field",
    "run_bake",
    "set_field",
    "validate_for_any_device",
]

C = TypeVar("C")

STATE_DIR = ".neuralbake"
"""The runner's own folder inside a bake's output folder (lock, staging, checkpoints, journal)."""
PREVIEW_DIR = "previews"
"""Live previews, under the runner's folder (``.neuralbake/previews``); kept after the bake."""
PREVIEW_MAX_SIDE = 1024
PREVIEW_VERSIONS = 20
"""Pictures kept per preview name (the newest); the events name every one that was published."""
ASIDE_DIR = "set_aside"
"""What a new bake replaces (the previous bake's staging, checkpoints and previews), kept under the runner's
folder until the new bake has a checkpoint of its own or has finished (``.neuralbake/set_aside``)."""
_ASIDE_RECORD = "set_aside.json"
_ASIDE_NAMES = ("staging", "checkpoints", PREVIEW_DIR)
_DROPPED = "set_aside.dropped"


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
        from neuralbake.errors import ConfigError

        raise ConfigError(str(exc), field="config") from exc


def check_footprint(
    bake: Bake[C], config: C, device: torch.device, *, memory_bytes: int | None = None, max_steps: int | None = None, fraction: float = 0.8
) -> Footprint | None:
    """Refuse ``config`` when its :class:`Footprint` is more than the machine can hold: more than
    ``fraction`` of ``memory_bytes`` (default: what ``device`` has free now), or more than ``max_steps``.
    Returns the footprint (``None`` for a bake that declares none)."""
    if bake.footprint is None:
        return None
    from neuralbake.core.device import device_memory_bytes
    from neuralbake.errors import ConfigError

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
    ) -> TrainResult:
        """Run one training phase on the shared Trainer, checkpointed as ``phase``.

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
        step. Returns the file name, or ``None`` when previews are off.
        """
        if self.previews is None:
            return None
        _check_preview_name(name)
        import numpy as np

        from neuralbake.io.images import resize_image, save_png

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

        from neuralbake.io.files import atomic_path

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


# -- the output folder ------------------------------------------------------------------------


def _check_preview_name(name: str) -> None:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"a preview name is 1 to 64 letters, digits, _ or -; got {name!r}")


class OutputLockedError(InputError):
    """Another bake holds the output folder's lock (nothing of this bake was started)."""


@contextlib.contextmanager
def _folder_lock(path: Path, out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released by the OS if the process dies)."""
    handle = open(path, "a+b")
    try:
        try:
            if sys.platform == "win32":
                import msvcrt

                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl

                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raise OutputLockedError(
                "another bake is writing to this output folder right now.",
                path=out,
                field="--out",
                fix="wait for it to finish (or stop it), or choose another --out.",
            ) from exc
        yield
    finally:
        handle.close()


def _old_names(out: Path) -> set[str]:
    """Top-level names of the files the previous bake in ``out`` wrote (from its bake.json)."""
    try:
        manifest = read_bake_manifest(out)
    except NeuralbakeError:
        manifest = None
    if manifest is None:
        return set()
    listed = set(manifest["files"])
    return {name for name in {Path(item).parts[0] for item in listed} if _owned(out / name, name, listed)} | {BAKE_MANIFEST}


def _owned(path: Path, name: str, listed: set[str]) -> bool:
    """Whether ``path`` holds only what the previous bake wrote: a listed file, or a folder whose
    every file is listed (so a folder of the user's that a forged or stale bake.json names is
    never removed)."""
    if path.is_symlink() or not path.exists():
        return False
    if path.is_file():
        return name in listed
    return all(f"{name}/{inner.relative_to(path).as_posix()}" in listed for inner in path.rglob("*") if not inner.is_dir() or inner.is_symlink())


def _finish_swap(out: Path, state: Path) -> None:
    """Move the staged files into ``out`` as the journal says; safe to repeat after a crash."""
    journal = state / "swap.json"
    if not journal.exists():
        return
    plan = load_json_file(journal, what="swap journal")
    stage, trash = state / "staging", state / "trash"
    trash.mkdir(exist_ok=True)
    new = [name for name in plan["new"] if name != BAKE_MANIFEST] + [BAKE_MANIFEST]  # the manifest goes in last

    def discard(name: str) -> None:
        target = out / name
        if target.is_symlink() or target.exists():
            os.replace(target, trash / f"{name}.{time.monotonic_ns()}")

    for name in sorted(set(plan["old"]) - set(new)):
        discard(name)
    for name in new:
        if (stage / name).exists():
            discard(name)
            os.replace(stage / name, out / name)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)
    journal.unlink()


def _swap_in(out: Path, state: Path, listed: list[str]) -> None:
    """Swap the staged outputs (the top-level names of ``listed``, bake.json's files) into ``out``.

    A name already in ``out`` that the previous bake did not write (a user's file or folder) is
    never replaced: the bake stops with an error naming it, its checkpoints kept for --resume.
    """
    new = sorted({Path(name).parts[0] for name in listed} | {BAKE_MANIFEST})
    old = _old_names(out)
    for name in new:
        target = out / name
        if (target.exists() or target.is_symlink()) and name not in old:
            raise InputError(
                f"the output folder already holds {name!r}, which this bake would replace, and no earlier bake recorded writing it.",
                path=target,
                field="--out",
                fix=f"move or delete {name!r} (then --resume to finish without training again), or choose another --out.",
            )
    atomic_write_json(state / "swap.json", {"new": new, "old": sorted(old)})
    _finish_swap(out, state)


def _prepare_state(out: Path, state: Path, resume: bool) -> None:
    """Fresh staging for the bake, and for a new one fresh checkpoints, with what they replace set aside
    (:func:`_set_aside`); a resumed bake keeps its checkpoints and carries its event log over."""
    stage, checkpoints = state / "staging", state / "checkpoints"
    if resume and (not checkpoints.is_dir() or not any(checkpoints.glob("*.pt"))):
        raise TrainingError(
            "there is no checkpoint to resume from in this output folder.",
            path=out,
            field="--resume",
            fix="run without --resume to start a new bake.",
        )
    _set_aside(state, resume)
    for folder in (stage, checkpoints):
        folder.mkdir(parents=True, exist_ok=True)
    for partial in checkpoints.glob(".*.partial"):  # a kill in the middle of a checkpoint save leaves its temp file
        partial.unlink(missing_ok=True)
    log, earlier = stage / "events.jsonl", state / ASIDE_DIR / "staging" / "events.jsonl"
    if resume and earlier.is_file():
        shutil.copyfile(earlier, log)  # outputs are written again at the end; only the event log carries over (one history)
    elif resume and (out / "events.jsonl").is_file():
        shutil.copyfile(out / "events.jsonl", log)  # resuming a finished bake (more steps): one log


def _set_aside(state: Path, resume: bool) -> None:
    """Move what this bake replaces into ``.neuralbake/set_aside``: the staging folder, and for a new bake the
    checkpoints and previews. The record, written last, lists them and the checkpoints left in place (their
    inode, mtime and size), by which :func:`_settle_aside` tells whether this bake wrote one of its own."""
    aside = state / ASIDE_DIR
    aside.mkdir()
    names = ["staging"] if resume else list(_ASIDE_NAMES)
    moved = []
    for name in names:
        if (state / name).exists() or (state / name).is_symlink():
            os.replace(state / name, aside / name)
            moved.append(name)
    atomic_write_json(aside / _ASIDE_RECORD, {"names": names, "moved": moved, "checkpoints": _checkpoint_stamps(state / "checkpoints")})


def _checkpoint_stamps(checkpoints: Path) -> dict[str, list[int]]:
    """Every checkpoint under ``checkpoints`` (a chain's stages' too) with what a save changes: inode, mtime, size
    (a save replaces the file, so its inode changes)."""
    stamps: dict[str, list[int]] = {}
    if checkpoints.is_dir() and not checkpoints.is_symlink():
        for path in checkpoints.rglob("*.pt"):
            if path.is_file() and not path.is_symlink():
                info = path.stat()
                stamps[path.relative_to(checkpoints).as_posix()] = [info.st_ino, info.st_mtime_ns, info.st_size]
    return stamps


def _settle_aside(state: Path, *, finished: bool = False) -> str:
    """Put back or drop what a bake set aside (:func:`_set_aside`), by one rule: it goes once the bake has written
    a checkpoint of its own or has ``finished``; otherwise the folder gets back what it held before the bake, and
    what the bake made in its place goes. Safe to repeat after a crash inside it. Returns ``"restored"``,
    ``"dropped"`` or ``"none"`` (nothing was set aside)."""
    shutil.rmtree(state / _DROPPED, ignore_errors=True)
    aside = state / ASIDE_DIR
    if not aside.is_dir():
        return "none"
    try:
        record = load_json_file(aside / _ASIDE_RECORD, what="set-aside record")
    except (OSError, NeuralbakeError):
        record = None
    if not isinstance(record, dict):  # killed while setting aside: nothing of the bake exists yet, so all of it goes back
        for name in _ASIDE_NAMES:
            if (aside / name).exists() or (aside / name).is_symlink():
                _remove(state / name)
                os.replace(aside / name, state / name)
        shutil.rmtree(aside)
        return "restored"
    kept = record.get("checkpoints") or {}
    wrote = any(kept.get(name) != stamp for name, stamp in _checkpoint_stamps(state / "checkpoints").items())
    if not record.get("restore") and (finished or wrote):
        _drop_aside(state)
        return "dropped"
    if not record.get("restore"):  # decided once: a restore cut short goes on as a restore
        atomic_write_json(aside / _ASIDE_RECORD, {**record, "restore": True})
    for name in record.get("names") or _ASIDE_NAMES:
        if (aside / name).exists() or (aside / name).is_symlink():
            _remove(state / name)
            os.replace(aside / name, state / name)
        elif name not in (record.get("moved") or []):
            _remove(state / name)  # made by the bake where there was none
    shutil.rmtree(aside)
    return "restored"


def _drop_aside(state: Path) -> None:
    """Remove what was set aside (renamed first, so a crash during the removal cannot look like a set-aside to restore)."""
    aside = state / ASIDE_DIR
    if aside.is_dir():
        shutil.rmtree(state / _DROPPED, ignore_errors=True)
        os.replace(aside, state / _DROPPED)
        shutil.rmtree(state / _DROPPED, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class _Shown:
    """An event sink that hands another the events as ``shown`` makes them (see :func:`run_bake`)."""

    def __init__(self, sink: EventSink, shown: Callable[[Any], Any]) -> None:
        self.sink, self.shown = sink, shown

    def write(self, event: dict[str, Any]) -> None:
        self.sink.write(self.shown(event))

    def close(self) -> None:
        self.sink.close()


class _DropAsideOnCheckpoint:
    """An event sink that drops what the bake set aside at its first checkpoint (the bake has its own from then on)."""

    def __init__(self, state: Path) -> None:
        self.state, self.checkpoints = state, (state / "checkpoints").resolve()

    def write(self, event: dict[str, Any]) -> None:
        if event.get("event") == "checkpoint" and (self.state / ASIDE_DIR).is_dir():
            if Path(str(event.get("path", ""))).resolve().is_relative_to(self.checkpoints):
                _drop_aside(self.state)

    def close(self) -> None:
        pass


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
    with _folder_lock(state / "lock", out):
        prepared = False
        try:
            finished = (state / "swap.json").exists()  # a bake killed inside its swap had finished: what it set aside goes
            _finish_swap(out, state)
            _settle_aside(state, finished=finished)  # what a killed bake left set aside
            _prepare_state(out, state, resume)
            prepared = True
            return _run_locked(
                bake, config, out, state, device, chosen, resume=resume, progress=progress, sinks=sinks, on_step=on_step, wall_start=wall_start,
                previews=previews, shown=shown,
            )
        except (TrainingInterrupted, KeyboardInterrupt):
            # Staging and checkpoints stay for --resume once this bake has a checkpoint; before, the previous ones come back.
            _settle_aside(state)
            raise
        except BaseException:
            # Nothing usable came of it. Before its first checkpoint, the folder gets back what it held; after,
            # its staged outputs go and its checkpoints stay (a failure after training must not cost the
            # training). A folder this bake created goes too when no checkpoint was written, all while the
            # lock is still held.
            if _settle_aside(state) != "restored" and prepared:
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
    all_sinks: list[EventSink] = [_Shown(JsonlSink(stage / "events.jsonl"), record), _DropAsideOnCheckpoint(state), *(sinks or [])]
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
    report = write_report(
        stage / "report.json",
        bake=bake.name,
        device=device,
        metrics=record(outcome.metrics),
        **record(outcome.fields),
        device_defaults=chosen,
        resumed=resume,
        wall_seconds=round(time.perf_counter() - wall_start, 3),
    )
    manifest = write_bake_manifest(stage, bake=bake.name)
    _swap_in(out, state, list(manifest["files"]))
    _drop_aside(state)  # finished: the previous bake's state goes
    return report


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "x".join(str(v) for v in value)
    return str(value)
