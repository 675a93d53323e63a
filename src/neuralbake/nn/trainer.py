"""The one training loop every bake uses: sampler + model + loss -> steps.

Each step: the learning rate for the step, a batch from the sampler, low-precision copies of the
fp32 master weights, forward and backward through a :class:`ForwardBackward` (by default PyTorch
autograd; a fused GPU kernel can stand in without the bake noticing), unscale and check the
gradients, then an Adam step on the masters or a skipped step, then the model's own projection
of its parameters if it has one (``constrain_()``). Around it: metric events,
periodic evaluation, checkpoints that resume bit-exactly, a guard that stops a diverged run, and
Ctrl-C or SIGTERM that stops at the next step boundary after saving a checkpoint.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.func import functional_call

from neuralbake.core.events import EventWriter
from neuralbake.errors import ConfigError, TrainingError
from neuralbake.nn.batches import Batch, Sampler, TexelDraws
from neuralbake.nn.checkpoint import StopOnSignals, load_checkpoint, save_checkpoint
from neuralbake.nn.half_run import HalfRun
from neuralbake.nn.precision import LossScaler, compute_dtype
from neuralbake.nn.schedule import learning_rate_at, parameter_groups
from neuralbake.nn.train_config import TrainerConfig

__all__ = [
    "AutogradForwardBackward",
    "Batch",
    "ForwardBackward",
    "Sampler",
    "TexelDraws",
    "TrainResult",
    "Trainer",
    "TrainerConfig",
    "TrainingInterrupted",
    "cast_model",
]


class ForwardBackward(Protocol):
    """Computes the loss and the gradients of ``loss * loss_scale`` for one batch.

    ``params`` are the compute-precision weights (fp16/bf16 copies of the masters, refreshed
    before every step), keyed like ``model.named_parameters()``. Returns the unscaled fp32 loss
    (a 0-d tensor) and one gradient per parameter, in order, in the compute dtype or fp32 (a fused
    kernel that sums in fp32 hands those sums back), *scaled* by ``loss_scale`` (a float, or the
    scaler's device tensor); the trainer may modify the returned gradients in place. This is the
    seam where a fused kernel replaces PyTorch autograd; one with ``capturable = True`` (no host
    syncs) is captured in the trainer's CUDA graph with the rest of the step.

    One that sets ``fuses_update = True`` may take the whole step instead: when its
    ``can_update(optimizer)`` returns None the trainer calls ``update_step(batch, master, optimizer,
    scaler, found_inf, counters)`` in place of the forward/backward, unscale, Adam, loss-scale and
    bookkeeping below, and it must leave the masters, ``optimizer.state``, the scaler and the
    counters as that sequence would (see :class:`neuralbake.kernels.training.FusedForwardBackward`).
    Such a step may also draw the batches itself: where its ``draws_from(sampler)`` returns a
    :class:`TexelDraws`, the trainer sets its draw counter with ``seek_draws(step)`` at the start of
    each fit and calls ``update_step(None, ..., draws=draws, seed=config.seed)`` without sampling.
    """

    def __call__(self, params: dict[str, torch.Tensor], batch: Batch, loss_scale: float) -> tuple[torch.Tensor, list[torch.Tensor]]: ...


class AutogradForwardBackward:
    """The reference :class:`ForwardBackward`: a forward pass and ``torch.autograd.grad``.

    When ``params`` are ``model``'s own parameters (the trainer's compute copy) the module runs
    directly; any other tensors are swapped in with ``torch.func.functional_call``.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.model = model
        self.loss_fn = loss_fn
        self._own = dict(model.named_parameters())

    def __call__(self, params: dict[str, torch.Tensor], batch: Batch, loss_scale: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if params.keys() == self._own.keys() and all(params[k] is v for k, v in self._own.items()):
            prediction = self.model(batch.inputs)
        else:
            prediction = functional_call(self.model, params, (batch.inputs,))
        loss = self.loss_fn(prediction.float(), batch.targets)
        grads = torch.autograd.grad(loss * loss_scale, list(params.values()), allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads)]
        return loss.detach(), grads


@dataclass
class TrainResult:
    """What a finished run hands back to its bake."""

    steps: int
    """Steps completed (including skipped ones)."""
    skipped_steps: int
    """Steps skipped for inf/NaN gradients or loss."""
    samples_seen: int
    """Training samples drawn."""
    train_seconds: float
    """Time in training steps (evaluation and checkpoint time excluded)."""
    final_loss: float
    """Mean training loss over the last logged window."""
    loss_scale: float
    """Loss scale at the end."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Every train/eval event of the run (resumed runs included)."""
    stopped_by: str = "steps"
    """What ended the run: ``steps``, ``seconds`` (the time budget) or ``plateau`` (no gain over ``plateau_evals`` evaluations)."""
    schedule: str = "cosine"
    """The learning-rate schedule it ran (a ``wsd`` run is judged by its half-length twin alone)."""


class TrainingInterrupted(TrainingError):
    """The run was stopped (Ctrl-C or a stop request) after saving a checkpoint."""


def cast_model(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A copy of ``model`` with floating-point parameters in ``dtype`` (for inference at that precision)."""
    return copy.deepcopy(model).to(dtype)


class Trainer:
    """Runs a bake's optimisation (see the module docstring).

    Parameters
    ----------
    model:
        The module being trained; its parameters are the fp32 masters and must be on ``device``.
    sampler:
        Produces batches on ``device``.
    loss_fn:
        ``loss_fn(prediction_fp32, targets) -> scalar``; used by the default forward/backward.
    config:
        :class:`TrainerConfig`.
    device:
        Where training runs.
    checkpoint_path:
        File for resumable checkpoints (``None``: no checkpoints, no resume).
    events:
        Where metric events go.
    evaluate:
        Optional ``evaluate(model) -> {metric: value}`` run every ``eval_every`` steps and at the end.
    forward_backward:
        Replaces :class:`AutogradForwardBackward` (e.g. with a fused kernel).
    on_step:
        Called after every step with ``(trainer, step)``; tests use it to inject faults.
    compatibility:
        Extra JSON-able facts a checkpoint must share with the run that resumes it (e.g. the
        bake's input size); a mismatch is an error naming the field.
    lr_scales:
        Learning-rate multipliers by parameter-name prefix (``{"tone_map.": 0.1}``): each matching
        parameter follows the schedule times its scale (the longest matching prefix wins; others 1).
    quality_key:
        The key of ``evaluate``'s result that ``plateau_evals`` watches (higher is better, e.g. ``psnr_db``).
    """

    def __init__(
        self,
        model: nn.Module,
        sampler: Sampler,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        config: TrainerConfig,
        *,
        device: torch.device,
        checkpoint_path: str | Path | None = None,
        events: EventWriter | None = None,
        evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
        forward_backward: ForwardBackward | None = None,
        on_step: Callable[[Trainer, int], None] | None = None,
        compatibility: dict[str, Any] | None = None,
        lr_scales: dict[str, float] | None = None,
        quality_key: str | None = None,
    ) -> None:
        config.validate()
        if config.plateau_evals and (evaluate is None or quality_key is None):
            raise ConfigError("stopping on a plateau needs the bake's evaluation, and this bake has none.", field="plateau_evals", fix="leave plateau_evals at 0.")
        if config.keep_best and (evaluate is None or quality_key is None):
            raise ConfigError("keeping the best weights needs the bake's evaluation, and this bake has none.", field="keep_best", fix="leave keep_best off.")
        self.quality_key = quality_key
        self.model = model
        self.sampler = sampler
        self.config = config
        self.device = device
        self.checkpoint_path = None if checkpoint_path is None else Path(checkpoint_path)
        self.events = events or EventWriter()
        self.evaluate = evaluate
        self.on_step = on_step
        self.compatibility = dict(compatibility or {})
        if lr_scales:
            self.compatibility["lr_scales"] = dict(sorted(lr_scales.items()))
        self.dtype = compute_dtype(config.precision)
        self.master = dict(model.named_parameters())
        for name, param in self.master.items():
            if param.dtype != torch.float32:
                raise TrainingError(f"master weight {name} is {param.dtype}; masters must be float32.", field=name)
        # Fused Adam takes the learning rate as a device tensor and skips the update on device
        # when `found_inf` is set, so a step needs no host round trip.
        groups = parameter_groups(self.master, lr_scales or {})
        self._lr_groups = [(torch.tensor(config.learning_rate * scale, device=device), scale) for scale in groups]
        self.optimizer = torch.optim.Adam(
            [{"params": params, "lr": lr_t} for params, (lr_t, _) in zip(groups.values(), self._lr_groups)],
            lr=self._lr_groups[0][0],
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_eps,
            fused=True,
            capturable=device.type == "cuda",
        )
        self.scaler = LossScaler(
            config.loss_scale, config.initial_loss_scale, growth_interval=config.loss_scale_growth_interval, device=device
        )
        # A fused kernel that can also run the optimizer step on the GPU (gradients reduced,
        # unscaled and checked, Adam, the loss scale: a handful of launches) takes the whole step.
        fuses = getattr(forward_backward, "fuses_update", False) and forward_backward.can_update(self.optimizer) is None
        # The compute copy lives for the whole run and is refreshed from the masters each step
        # (one fused copy), as RTXNS keeps an fp16 parameter buffer beside the fp32 one. A fused step that
        # also runs the optimizer trains from its own packed compute weights, so it gets none.
        self.compute_model: nn.Module = model if self.dtype == torch.float32 or fuses else cast_model(model, self.dtype)
        self.compute_params = dict(self.compute_model.named_parameters())
        self.forward_backward: ForwardBackward = forward_backward or AutogradForwardBackward(self.compute_model, loss_fn)
        self.fused_update = self.forward_backward if fuses else None
        """The forward/backward when it also takes the optimizer step (``update_step``), else None: PyTorch's Adam runs."""
        # ... and may draw the batches in its kernel too, when the sampler's are uniform uv and nearest texels
        self.fused_draws = self.fused_update.draws_from(sampler) if self.fused_update is not None and hasattr(self.fused_update, "draws_from") else None
        """What the fused step draws in its kernel instead of calling the sampler (``draws_from``'s), else None."""
        if self.fused_draws is not None:
            self.fused_update.seek_draws(0)
        # A custom forward/backward joins the graph when it says it can be captured (a fused kernel that reads the loss
        # scale on the device does); the sampler too, unless the kernel draws the batches itself. A sampler that syncs
        # with the host stays outside when the model says it can be captured: its batches are fed (copied) into the graph.
        step_capturable = config.cuda_graph and device.type == "cuda" and (forward_backward is None or getattr(forward_backward, "capturable", False))
        sampler_inside = self.fused_draws is not None or getattr(sampler, "capturable", False)
        self.use_cuda_graph = step_capturable and (sampler_inside or getattr(model, "capturable", False))
        self.feeds_graph, self._fed = self.use_cuda_graph and not sampler_inside, None
        # On CUDA the default generator is used: CUDA graphs capture its Philox offsets.
        self.generator = torch.cuda.default_generators[device.index or 0] if device.type == "cuda" else torch.Generator()
        self.generator.manual_seed(config.seed)
        zeros = lambda: torch.zeros((), device=device)
        self._found_inf, self._loss_sum, self._loss_count, self._skipped, self._nonfinite_run = (zeros() for _ in range(5))
        self.graph: torch.cuda.CUDAGraph | None = None
        """The captured step that :meth:`graphed_step` replays (None until captured, and again after a checkpoint loads)."""
        self.step = 0
        self.samples_seen = 0
        self.train_seconds = 0.0
        self.history: list[dict[str, Any]] = []
        self._last_loss = math.nan
        self._stop_requested = False
        self._lr = config.learning_rate
        self._saved_at_step = -1
        self._loop_started: float | None = None
        self._best: tuple[float, int, dict[str, float], list[torch.Tensor]] | None = None
        self.stopped_by: str | None = None
        """Why the loop ended before ``steps`` (``seconds`` or ``plateau``); None while running or when it ran them all."""
        self.started_at = 0
        """The step the last ``fit`` began at (a resumed one: its checkpoint's)."""
        self._saved_at_time = time.monotonic()
        self.half_run = HalfRun(config)
        """A ``wsd`` run's half-length twin (:mod:`neuralbake.nn.half_run`): what the second half of the steps bought."""

    @property
    def learning_rate(self) -> float:
        """The base learning rate the last step was taken with (the schedule's value; scales apply on top)."""
        return self._lr

    @property
    def skipped_steps(self) -> int:
        """Steps skipped for inf/NaN loss or gradients."""
        return int(self._skipped)

    # -- control ---------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop at the next step boundary, saving a checkpoint first."""
        self._stop_requested = True

    # -- one step ---------------------------------------------------------------------------
    def elapsed_seconds(self) -> float:
        """Training seconds so far, the running stretch included (host time: graphed steps may still be queued)."""
        running = time.perf_counter() - self._loop_started if self._loop_started is not None else 0.0
        return self.train_seconds + running

    def _schedule_step(self) -> int:
        """The step the schedule is at: the step, or with a time budget the share of it spent, whichever is further along."""
        if self.config.seconds is None:
            return self.step
        spent = self.elapsed_seconds() / self.config.seconds
        return max(self.step, min(int(spent * self.config.steps), self.config.steps - 1))

    def _set_learning_rate(self) -> None:
        cfg = self.config
        step, total = self.half_run.position(self) if self.half_run.running else (self._schedule_step(), cfg.steps)
        self._lr = learning_rate_at(step, base=cfg.learning_rate, total_steps=total, schedule=cfg.schedule,
                                    warmup_steps=cfg.warmup_steps, final_fraction=cfg.final_lr_fraction, decay_fraction=cfg.decay_fraction)
        for lr_t, scale in self._lr_groups:
            lr_t.fill_(self._lr * scale)

    def _device_step(self, batch: Batch | None = None) -> None:
        """One step on ``batch`` (or the sampler's next), every decision on the device (no host sync): capturable."""
        if self.fused_update is not None:
            counters = (self._loss_sum, self._loss_count, self._skipped, self._nonfinite_run)
            if self.fused_draws is not None:  # the kernel draws the step's batch (its own counter, the run's seed)
                self.fused_update.update_step(None, self.master, self.optimizer, self.scaler, self._found_inf, counters, draws=self.fused_draws, seed=self.config.seed)
            else:
                self.fused_update.update_step(batch or self.sampler.sample(self.generator), self.master, self.optimizer, self.scaler, self._found_inf, counters)
            self._constrain()
            return
        batch = batch if batch is not None else self.sampler.sample(self.generator)
        if self.compute_model is not self.model:
            with torch.no_grad():
                torch._foreach_copy_(list(self.compute_params.values()), list(self.master.values()))
        loss, grads = self.forward_backward(self.compute_params, batch, self.scaler.scale_tensor)
        # Fused Adam assumes each gradient has its parameter's memory layout; autograd can return
        # another (e.g. for a parameter used through a slice or a cat), so match it explicitly.
        grads32 = [g.float() if g.stride() == p.stride() else torch.empty_like(p).copy_(g) for g, p in zip(grads, self.master.values())]
        found = self.scaler.unscale_(grads32, self._found_inf)
        torch.maximum(found, (~torch.isfinite(loss)).float(), out=found)
        for param, grad in zip(self.master.values(), grads32):
            param.grad = grad
        self.optimizer.found_inf = found
        self.optimizer.step()
        self._constrain()
        self.scaler.update(found)
        clean = 1.0 - found
        self._loss_sum.add_(torch.where(found > 0, torch.zeros_like(loss), loss))
        self._loss_count.add_(clean)
        self._skipped.add_(found)
        self._nonfinite_run.mul_(found).add_(found)

    def _constrain(self) -> None:
        """The model's projection after each update (``constrain_()``, e.g. latents back into their
        quantisation range), when it has one: device work, captured with the step."""
        constrain = getattr(self.model, "constrain_", None)
        if constrain is not None:
            with torch.no_grad():
                constrain()

    def train_step(self) -> bool:
        """Run one eager step; return True if the weights were updated, False if it was skipped."""
        self._set_learning_rate()
        self._device_step()
        self.step += 1
        self.samples_seen += self.sampler.batch_size
        return not bool(self._found_inf)

    def graphed_step(self) -> None:
        """Replay the captured step, capturing it first after a few eager warm-up steps."""
        self._set_learning_rate()
        if self.feeds_graph:  # the batch is drawn outside and copied into the buffers the graph reads
            batch = self.sampler.sample(self.generator)
            if self._fed is None or (self._fed.inputs.shape, self._fed.targets.shape) != (batch.inputs.shape, batch.targets.shape):
                self._fed, self.graph = Batch(inputs=batch.inputs.clone(), targets=batch.targets.clone()), None
            torch._foreach_copy_([self._fed.inputs, self._fed.targets], [batch.inputs, batch.targets])
        if self.graph is None:
            # Warm-up on a side stream initialises autograd, cuBLAS and Adam state outside capture.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._device_step(self._fed)
            torch.cuda.current_stream(self.device).wait_stream(side)
            if self.step + 1 >= self._warmup_steps:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    self._device_step(self._fed)  # a fed graph replays on its buffers
                self.graph = graph
        else:
            self.graph.replay()
        self.step += 1
        self.samples_seen += self.sampler.batch_size

    _warmup_steps = 3

    # -- the loop ---------------------------------------------------------------------------
    def fit(self, *, resume: bool = False) -> TrainResult:
        """Train to ``config.steps`` (continuing from the checkpoint if ``resume``)."""
        if resume:
            self._load_checkpoint()
        elif self.step == 0:
            # Re-seed here too: on CUDA the generator is the device's shared default one, which
            # another trainer built since this one may have advanced.
            self.generator.manual_seed(self.config.seed)
        if self.fused_draws is not None:  # the kernel's batches follow the step count, so a resumed run draws on as before
            self.fused_update.seek_draws(self.step)
        self.started_at = self.step  # where this fit began (a resumed one: the checkpoint's step)
        self.events.emit("start", step=self.step, total_steps=self.config.steps, resumed=resume)
        if not resume and self.evaluate is not None:
            self._run_eval()  # the starting point of every quality-versus-time curve
        with StopOnSignals(self):
            self._loop()
        self._check_finished_finite()
        restored = False
        if self.evaluate is not None:
            self._run_eval()
            restored = self.config.keep_best and self._restore_best()
        if self._saved_at_step != self.step or restored:
            self._save_checkpoint()  # a finished phase resumes as finished (multi-phase bakes)
        if self.half_run.train(self):  # a wsd run's half-length twin, then kept in the checkpoint's history too
            self._save_checkpoint()
        self.events.emit("end", step=self.step, train_seconds=self.train_seconds, skipped_steps=self.skipped_steps)
        return TrainResult(
            steps=self.step,
            skipped_steps=self.skipped_steps,
            samples_seen=self.samples_seen,
            train_seconds=self.train_seconds,
            final_loss=self._last_loss,
            loss_scale=self.scaler.scale,
            history=list(self.history),
            stopped_by=self.stopped_by or "steps",
            schedule=self.config.schedule,
        )

    def _loop(self) -> None:
        cfg = self.config
        self._sync()
        started = self._loop_started = time.perf_counter()
        while self.step < cfg.steps and self.stopped_by is None:
            if self._stop_requested:
                self.train_seconds += self._elapsed(started)
                self._save_checkpoint()
                self.events.emit("interrupted", step=self.step)
                where = f" to {self.checkpoint_path}" if self.checkpoint_path else ""
                raise TrainingInterrupted(
                    f"stopped at step {self.step} of {cfg.steps}; checkpoint saved{where}.",
                    fix="run the same command with --resume to continue." if self.checkpoint_path else None,
                )
            self.half_run.keep_branch(self)
            self.graphed_step() if self.use_cuda_graph else self.train_step()
            at_end = self.step == cfg.steps
            log_now = (cfg.log_every and self.step % cfg.log_every == 0) or at_end
            # Graphed steps are checked for divergence when the host reads the device anyway.
            if not self.use_cuda_graph or log_now:
                self._check_divergence(started)
            if self.on_step is not None:
                self.on_step(self, self.step)
            eval_now = self.evaluate is not None and cfg.evaluation_interval and self.step % cfg.evaluation_interval == 0 and not at_end
            ckpt_now = self.checkpoint_path is not None and not at_end and (
                (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0)
                or (cfg.checkpoint_seconds and time.monotonic() - self._saved_at_time >= cfg.checkpoint_seconds)
            )
            if log_now or eval_now or ckpt_now:
                self.train_seconds += self._elapsed(started)
                if log_now:
                    self._log_train()
                if eval_now:
                    self._run_eval()
                    if self._on_plateau():
                        self.stopped_by = "plateau"
                if ckpt_now:
                    self._save_checkpoint()
                self._sync()
                started = self._loop_started = time.perf_counter()
            if cfg.seconds is not None and self.stopped_by is None and self.elapsed_seconds() >= cfg.seconds:
                self.stopped_by = "seconds"
        self.train_seconds += self._elapsed(started)
        self._loop_started = None

    def _on_plateau(self) -> bool:
        """Whether the last ``plateau_evals`` evaluations gained less than ``plateau_gain`` on the best before them."""
        window = self.config.plateau_evals
        values = [e[self.quality_key] for e in self.history if e.get("event") == "eval" and isinstance(e.get(self.quality_key), (int, float))]
        if not window or len(values) <= window:
            return False
        return max(values[-window:]) - max(values[:-window]) < self.config.plateau_gain

    def _check_divergence(self, started: float) -> None:
        run = int(self._nonfinite_run)
        if run >= self.config.max_nonfinite_steps:
            self.train_seconds += self._elapsed(started)
            raise TrainingError(
                f"{run} steps in a row produced inf/NaN loss or gradients (step {self.step}, loss scale {self.scaler.scale:g}); the run has diverged.",
                field="learning_rate",
                fix="lower --lr, or use --precision fp32 or bf16; check the reference data for NaN.",
            )

    _diverged_at_end = 3
    """A run whose last this-many steps all overflowed has diverged, however few steps it had."""

    def _check_finished_finite(self) -> None:
        # The in-loop guard waits for max_nonfinite_steps; a short run (or a huge learning rate
        # that blows the weights up in its last steps) can end before that and would otherwise
        # ship a network that outputs NaN. With dynamic loss scaling, overflowing steps are how the
        # scale finds its level, so a short fp16 run that ends on a few is not diverged unless the
        # scale has already fallen below 1 (no finite gradient at any sensible scale).
        run = int(self._nonfinite_run)
        broken = [name for name, p in self.model.named_parameters() if not bool(torch.isfinite(p).all())]
        scaling = self.config.loss_scale == "dynamic" and self.config.precision == "fp16"
        ended_diverged = run >= self._diverged_at_end and (not scaling or self.scaler.scale < 1.0)
        if broken or ended_diverged or run >= self.config.max_nonfinite_steps:
            what = f"parameters {', '.join(broken[:3])} hold inf/NaN" if broken else f"its last {run} steps produced inf/NaN loss or gradients"
            raise TrainingError(
                f"training diverged: {what} (step {self.step}); nothing usable was learned.",
                field="learning_rate",
                fix="lower --lr (the defaults are tuned), or use --precision fp32; check the reference data for NaN.",
            )

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _elapsed(self, started: float) -> float:
        self._sync()
        return time.perf_counter() - started

    def _log_train(self) -> None:
        count = float(self._loss_count)
        if count:
            self._last_loss = float(self._loss_sum) / count
        self._loss_sum.zero_()
        self._loss_count.zero_()
        record = {
            "event": "train",
            "step": self.step,
            "loss": self._last_loss,
            "lr": self._lr,
            "loss_scale": self.scaler.scale if self.config.loss_scale != "none" else None,
            "skipped_steps": self.skipped_steps,
            "samples_seen": self.samples_seen,
            "train_seconds": round(self.train_seconds, 4),
        }
        self.history.append(record)
        self.events.emit(**record)

    def _run_eval(self) -> None:
        assert self.evaluate is not None
        with torch.no_grad():
            metrics = self.evaluate(self.model)
        record = {"event": "eval", "step": self.step, "train_seconds": round(self.train_seconds, 4), **metrics}
        self.history.append(record)
        self.events.emit(**record)
        value = metrics.get(self.quality_key) if self.config.keep_best and self.quality_key else None
        if isinstance(value, (int, float)) and math.isfinite(value) and (self._best is None or value > self._best[0]):
            if self._best is None:
                self._best = (value, self.step, metrics, [p.detach().clone() for p in self.master.values()])
            else:
                torch._foreach_copy_(self._best[3], [p.detach() for p in self.master.values()])
                self._best = (value, self.step, metrics, self._best[3])

    def _restore_best(self) -> bool:
        """Put back the weights of the best evaluation when the last one is worse; True if it did."""
        last = self.history[-1].get(self.quality_key) if self.history else None
        if self._best is None or not isinstance(last, (int, float)) or self._best[0] <= last:
            return False
        value, step, metrics, weights = self._best
        with torch.no_grad():
            torch._foreach_copy_([p.data for p in self.master.values()], weights)
        record = {"event": "eval", "step": self.step, "train_seconds": round(self.train_seconds, 4), **metrics, "restored_from_step": step}
        self.history.append(record)
        self.events.emit(**record)
        return True

    # -- checkpoints ------------------------------------------------------------------------
    def _save_checkpoint(self) -> None:
        save_checkpoint(self)

    def _load_checkpoint(self) -> None:
        load_checkpoint(self)
        # Loading gave the optimizer new state tensors: a step captured before reads the old ones.
        self.graph = None
