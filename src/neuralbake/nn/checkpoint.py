"""Trainer checkpoints and the signals that save one.

A checkpoint holds the fp32 masters, Adam's state, the loss scaler, the sampling generator, the
step counters and the event history, so a resumed run ends with bit-identical weights. A resumed
run must match the checkpoint's config (except the fields that only change how a run is watched,
and ``steps``) and the bake's ``compatibility`` facts; a mismatch names the field. While a trainer
runs in the main thread, the first Ctrl-C or SIGTERM asks it to stop at the next step boundary
(it saves a checkpoint first); a second one aborts at once.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from neuralbake.errors import TrainingError
from neuralbake.io.files import atomic_path

if TYPE_CHECKING:
    from neuralbake.nn.trainer import Trainer

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "RESUME_FREE_FIELDS", "StopOnSignals", "checkpoint_state", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_FORMAT = "neuralbake.checkpoint"
CHECKPOINT_VERSION = 1

RESUME_FREE_FIELDS = {"steps", "half_run", "log_every", "eval_every", "checkpoint_every", "checkpoint_seconds", "max_nonfinite_steps", "cuda_graph"}
"""Config fields that change only how a run is watched, not what it computes; a resumed run may
change these (and ``steps``, which extends or shortens the run) without breaking bit-exactness."""


def checkpointed_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's buffers that a checkpoint keeps: those under the name prefixes the model lists in
    a ``checkpointed_buffers`` attribute (state trained outside the Trainer's Adam, e.g. a fit's
    large-steps shape and its own optimiser's moments); none by default."""
    prefixes = tuple(getattr(model, "checkpointed_buffers", ()))
    if not prefixes:
        return {}
    return {name: b for name, b in model.named_buffers() if name.startswith(prefixes)}


def checkpoint_state(self: Trainer) -> dict[str, Any]:
    """Everything a bit-identical resume needs: masters, Adam, loss scaler, generator, counters, history
    (and the model's :func:`checkpointed_buffers`)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": self.step,
        "samples_seen": self.samples_seen,
        "train_seconds": self.train_seconds,
        "last_loss": self._last_loss,
        "counters": {
            name: float(getattr(self, f"_{name}")) for name in ("skipped", "nonfinite_run", "loss_sum", "loss_count")
        },
        "model": {name: p.detach().clone() for name, p in self.master.items()},
        "buffers": {name: b.detach().clone() for name, b in checkpointed_buffers(self.model).items()},
        "optimizer": self.optimizer.state_dict(),
        "scaler": self.scaler.state_dict(),
        "generator": self.generator.get_state(),
        # Models that draw noise themselves (NTC's quantisation noise) use the global CPU
        # generator; on CUDA they share the trainer's (the device's default) one.
        "global_rng": torch.random.get_rng_state(),
        "history": self.history,
        "stopped_by": self.stopped_by,
        "config": asdict(self.config),
        "compatibility": self.compatibility,
    }

def save_checkpoint(self: Trainer) -> None:
    """Write the trainer's checkpoint atomically (no-op without a checkpoint path)."""
    if self.checkpoint_path is None:
        return
    with atomic_path(self.checkpoint_path) as tmp:
        torch.save(checkpoint_state(self), tmp)
    self._saved_at_step = self.step
    self._saved_at_time = time.monotonic()
    self.events.emit("checkpoint", step=self.step, path=str(self.checkpoint_path))

def load_checkpoint(self: Trainer) -> None:
    """Restore the trainer from its checkpoint, refusing one made with other settings (naming the field)."""
    path = self.checkpoint_path
    if path is None or not path.is_file():
        raise TrainingError(
            "there is no checkpoint to resume from.",
            path=path,
            fix="run without --resume to start a new bake.",
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for damaged pickles
        raise TrainingError(f"the checkpoint cannot be read ({exc}).", path=path, fix="delete it and run without --resume.") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or state.get("version") != CHECKPOINT_VERSION:
        raise TrainingError("this is not a neuralbake checkpoint of a supported version.", path=path, fix="delete it and run without --resume.")
    saved_config = state["config"]
    current = asdict(self.config)
    for key in sorted(set(saved_config) | set(current)):
        if key in RESUME_FREE_FIELDS:
            continue
        if saved_config.get(key) != current.get(key):
            raise TrainingError(
                f"the checkpoint was made with {key}={saved_config.get(key)!r} but this run has {current.get(key)!r}.",
                path=path,
                field=key,
                fix=f"resume with the same {key}, or run without --resume to start over.",
            )
    for key in sorted(set(state["compatibility"]) | set(self.compatibility)):
        if state["compatibility"].get(key) != self.compatibility.get(key):
            raise TrainingError(
                f"the checkpoint was made with {key}={state['compatibility'].get(key)!r} but this run has {self.compatibility.get(key)!r}.",
                path=path,
                field=key,
                fix=f"resume with the same {key}, or run without --resume to start over.",
            )
    if state["step"] > self.config.steps:
        raise TrainingError(
            f"the checkpoint is at step {state['step']}, past this run's {self.config.steps} steps.",
            path=path,
            field="steps",
            fix=f"pass --steps {state['step']} or more.",
        )
    buffers = checkpointed_buffers(self.model)
    saved = state.get("buffers") or {}
    missing = sorted(set(buffers) - set(saved))
    if missing:
        raise TrainingError(
            f"the checkpoint lacks the model state {missing[0]}.", path=path, field=missing[0],
            fix="run without --resume to start over (the checkpoint is of another kind of run).",
        )
    with torch.no_grad():
        for name, param in self.master.items():
            param.copy_(state["model"][name].to(param.device))
        for name, buffer in buffers.items():
            buffer.copy_(saved[name].to(buffer.device))
    self.optimizer.load_state_dict(state["optimizer"])
    for group, (lr_t, _) in zip(self.optimizer.param_groups, self._lr_groups):
        group["lr"] = lr_t  # loading replaced it with a copy; the schedule writes into ours
    self.scaler.load_state_dict(state["scaler"])
    self.generator.set_state(state["generator"])
    if "global_rng" in state:
        torch.random.set_rng_state(state["global_rng"])
    self.step = state["step"]
    self.samples_seen = state["samples_seen"]
    self.train_seconds = state["train_seconds"]
    self._last_loss = state["last_loss"]
    for name, value in state["counters"].items():
        getattr(self, f"_{name}").fill_(value)
    self.history = list(state["history"])
    self.stopped_by = state.get("stopped_by")  # a phase that ended on its time budget or a plateau stays ended
    self._saved_at_step = self.step


class StopOnSignals:
    """While training in the main thread, the first Ctrl-C or SIGTERM requests a clean stop (a
    checkpoint is saved at the next step boundary); a second one aborts at once."""

    _signals = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self._signals:
                self.previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.trainer._stop_requested:
            raise KeyboardInterrupt
        self.trainer.request_stop()

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
