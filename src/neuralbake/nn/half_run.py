"""A ``wsd`` run's half-length twin: what the second half of the run's steps bought.

The question a user has of a finished bake is whether more steps would have bought more quality. A run's own curve
cannot answer it: under a cosine schedule the figure's last stretch is lifted by the anneal at any length (the texture's
last quarter gained 1.0-1.2 dB from 3,000 to 2,000,000 steps, while doubling its steps bought 0.2 dB), and on the
stable stretch of a ``wsd`` schedule it is lifted by nothing but it swings with the peak rate's noise (the texture's
stable-stretch gain per doubling read 0.73, 0.11 and 0.30 dB at 0.5, 1 and 2 million steps, where the shipped figure
rose 0.36 and 0.25 dB per doubling; docs/benchmarks.md).

What answers it is the run of half the steps, annealed like this one. Under ``wsd`` that run and this one take the same
rate until the step where the shorter one's decay begins (both are at the peak there), so it need not be trained from
the start: the trainer copies the whole training state at that step (the masters, Adam's moments and step counts, the
loss scaler, the step counters and the model's checkpointed buffers) and, once the run has ended, trains the shorter
run's decay from the copy (``decay_fraction`` x N/2 more steps: a quarter more at 0.5), evaluates it and puts the run's
own state back. The run's figure minus the twin's is what doubling the steps from N/2 to N bought, annealed against
annealed; :func:`neuralbake.nn.convergence.convergence` judges a ``wsd`` run by it.

State is copied and put back in place (``copy_``), so a captured CUDA graph, a compiled step and a fused kernel's flat
buffers (whose views the masters and moments are) go on working on the same tensors. A fused kernel's own batch draws
follow the step count, so the twin draws those of the half run's steps; a sampler's random stream is not rewound (the
twin draws batches of its own, and whatever follows the run draws on after them). The bake's ``on_step`` hooks run
after each of the twin's steps as after the run's, and Ctrl-C stops the twin as it stops the run. Like :mod:`neuralbake.nn.checkpoint`, this is the trainer's own machinery
split out of its module, and reads its private counters.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from neuralbake.nn.checkpoint import StopOnSignals, checkpointed_buffers
from neuralbake.nn.schedule import decay_start

if TYPE_CHECKING:
    from neuralbake.nn.train_config import TrainerConfig
    from neuralbake.nn.trainer import Trainer

__all__ = ["HALF_RUN_PARAMETER_BYTES", "HalfRun", "training_state"]

HALF_RUN_PARAMETER_BYTES = 24
"""Memory the twin adds per trained parameter: two copies (at its branch and at the run's end) of the fp32 master and
Adam's two fp32 moments."""


def training_state(trainer: Trainer) -> list[torch.Tensor]:
    """Every device tensor a step reads and writes: masters, Adam's state, the loss scaler, the counters, checkpointed buffers."""
    tensors = list(trainer.master.values())
    for param in trainer.master.values():
        tensors += [value for value in trainer.optimizer.state.get(param, {}).values() if isinstance(value, torch.Tensor)]
    scaler = trainer.scaler
    tensors += [scaler.scale_tensor, scaler.clean_steps_tensor, scaler.overflows_tensor]
    tensors += [getattr(trainer, f"_{name}") for name in ("skipped", "nonfinite_run", "loss_sum", "loss_count")]
    return tensors + list(checkpointed_buffers(trainer.model).values())


def _seek(trainer: Trainer, step: int, samples: int, last_loss: float) -> None:
    """Set the trainer's host-side counters (and a fused kernel's draw counter) to those of ``step``."""
    trainer.step, trainer.samples_seen, trainer._last_loss = step, samples, last_loss
    if trainer.fused_draws is not None:
        trainer.fused_update.seek_draws(step)


class HalfRun:
    """The twin of one run (see the module docstring): ``keep_branch`` before each step, ``train`` once the run has ended."""

    def __init__(self, config: TrainerConfig) -> None:
        self.steps = (config.steps or 0) // 2
        """The twin's length in steps (of the schedule: with a time budget, its share of the budget)."""
        self.branch = decay_start(self.steps, config.warmup_steps, config.decay_fraction)
        """The step where the twin's decay begins (``learning_rate_at``'s, for a run of :attr:`steps`)."""
        self.enabled = config.schedule == "wsd" and config.half_run and config.warmup_steps < self.branch < self.steps
        self.extra_steps = self.steps - self.branch if self.enabled else 0
        """Steps the twin adds to the run (with a time budget, its share of the budget instead)."""
        self.running = False
        """True while the twin trains: the trainer's schedule then follows :meth:`position`."""
        self._saved: tuple[int, int, list[torch.Tensor]] | None = None
        self._open = False
        self._done = 0
        self._started = 0.0
        self._budget: float | None = None

    def keep_branch(self, trainer: Trainer) -> None:
        """Copy the training state when the run's schedule crosses :attr:`branch`: once, and only in a fit that began at
        or before it (a run resumed past it has no state of its branch, so it gets no twin)."""
        if not self.enabled or self._saved is not None or trainer.evaluate is None:
            return
        at = trainer._schedule_step()
        if trainer.step == trainer.started_at:  # this fit's first step
            self._open = at <= self.branch
        if self._open and at >= self.branch:
            self._open = False
            self._saved = (trainer.step, trainer.samples_seen, [t.detach().clone() for t in training_state(trainer)])

    def position(self, trainer: Trainer) -> tuple[int, int]:
        """``(step, total)`` of the twin's schedule: the steps it took past the branch, or its share of a time budget spent."""
        step = self.branch + self._done
        if self._budget is not None:
            spent = (time.perf_counter() - self._started) / self._budget
            step = max(step, self.branch + int(spent * (self.steps - self.branch)))
        return min(step, self.steps - 1), self.steps

    def _finished(self) -> bool:
        if self.branch + self._done >= self.steps:
            return True
        return self._budget is not None and time.perf_counter() - self._started >= self._budget

    def train(self, trainer: Trainer) -> bool:
        """Train the twin's decay from the kept state, evaluate it into a ``half_run`` event, and put the run's state
        back; True when it added the event. A stop request (Ctrl-C, SIGTERM, a service's ``on_step`` hook) abandons the
        twin, puts the state back and raises :class:`~neuralbake.nn.trainer.TrainingInterrupted` (the finished run's
        checkpoint is already saved)."""
        saved, self._saved = self._saved, None
        if saved is None or trainer.evaluate is None or trainer.stopped_by == "plateau":
            return False
        at_step, at_samples, kept = saved
        state = training_state(trainer)
        final = [t.detach().clone() for t in state]
        step, samples, last_loss = trainer.step, trainer.samples_seen, trainer._last_loss
        seconds = trainer.config.seconds
        self._budget = None if seconds is None else seconds * (self.steps - self.branch) / trainer.config.steps
        every = max(trainer.config.log_every, (self.steps - self.branch) // 100) if trainer.config.log_every else 0  # events a service stores
        try:
            with torch.no_grad():
                torch._foreach_copy_(state, kept)
            _seek(trainer, at_step, at_samples, last_loss)
            self.running, self._done, self._started = True, 0, time.perf_counter()
            trainer.events.emit("half_run_start", step=0, total_steps=self.steps - self.branch)
            with StopOnSignals(trainer):
                while not self._finished() and not trainer._stop_requested:
                    trainer.graphed_step() if trainer.use_cuda_graph else trainer.train_step()
                    self._done += 1
                    if trainer.on_step is not None:  # the bake's own hooks (projections, a service's stop check)
                        trainer.on_step(trainer, trainer.step)
                    if every and self._done % every == 0:
                        trainer.events.emit("half_run_train", step=self._done)
            stopped = trainer._stop_requested
            trainer._sync()
            took = time.perf_counter() - self._started
            with torch.no_grad():
                metrics = {} if stopped else trainer.evaluate(trainer.model)
        finally:
            self.running = False
            with torch.no_grad():
                torch._foreach_copy_(state, final)
            _seek(trainer, step, samples, last_loss)
        if stopped:
            from neuralbake.nn.trainer import TrainingInterrupted  # the trainer's module imports this one

            trainer.events.emit("interrupted", step=step)
            raise TrainingInterrupted(f"stopped while training the run's half-length twin, after all {step} steps of the run; its checkpoint is saved.",
                                      fix="run the same command with --resume to go on (the twin is skipped).")
        # under a time budget the twin's length is what it trained, not half the step cap
        record: dict[str, Any] = {"event": "half_run", "step": step, "steps": at_step + self._done, "branch_step": at_step,
                                  "taken_steps": self._done, "train_seconds": round(took, 4), **metrics}
        trainer.history.append(record)
        trainer.events.emit(**record)
        return True
