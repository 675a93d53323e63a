"""The shared trainer's settings (:class:`TrainerConfig`), which every bake's ``train`` table holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from neuralbake.errors import ConfigError
from neuralbake.nn.schedule import SCHEDULES

__all__ = ["AUTO_EVALUATIONS", "TrainerConfig"]

AUTO_EVALUATIONS = 200
"""Evaluations a run makes when its ``eval_every`` is left to the run's length (None)."""


@dataclass
class TrainerConfig:
    """Optimisation settings shared by every bake."""

    steps: int | None = 2000
    """Number of optimiser steps (a bake may leave it to its device default)."""
    seconds: float | None = None
    """Time budget in training seconds (evaluations and checkpoints not counted): the run ends at
    whichever of ``steps`` and ``seconds`` comes first, and the learning-rate schedule follows
    whichever is further along. None: steps only."""
    learning_rate: float | None = 0.01
    """Peak Adam learning rate (a bake may leave it to its device default)."""
    schedule: Literal["constant", "cosine", "wsd"] = "cosine"
    """Learning-rate schedule after warm-up: constant, cosine decay to final_lr_fraction, or wsd (warm-up, stable at the
    peak, then a cosine decay to final_lr_fraction over the last decay_fraction of the run)."""
    warmup_steps: int = 0
    """Steps of linear learning-rate warm-up."""
    final_lr_fraction: float = 0.05
    """Cosine and wsd schedules: learning rate at the last step as a fraction of the peak."""
    decay_fraction: float = 0.2
    """wsd schedule: the share of the run (its last steps) over which the rate decays."""
    half_run: bool = True
    """wsd schedule: after the run, also train the run of half its steps from their shared stable stretch (decay_fraction
    x steps / 2 more steps) and judge convergence by what the second half of the steps bought."""
    precision: Literal["fp32", "fp16", "bf16"] = "fp16"
    """Forward/backward precision; weights and Adam moments stay fp32 either way."""
    loss_scale: Literal["dynamic", "static", "none"] = "dynamic"
    """Loss scaling: dynamic (backs off on overflow, grows back), static, or none."""
    initial_loss_scale: float = 4096.0
    """Starting (or, for static, fixed) loss scale."""
    loss_scale_growth_interval: int = 500
    """Dynamic scaling: clean steps before the scale doubles."""
    adam_beta1: float = 0.9
    """Adam first-moment decay."""
    adam_beta2: float = 0.99
    """Adam second-moment decay."""
    adam_eps: float = 1e-10
    """Adam epsilon (the update is m / (sqrt(v) + eps))."""
    seed: int = 0
    """Seed for weight initialisation and batch sampling."""
    log_every: int = 25
    """Emit a training-loss event every this many steps."""
    eval_every: int | None = 250
    """Run the bake's evaluation every this many steps (0: only at the end; None: :attr:`evaluation_interval` chooses
    by the run's length)."""
    checkpoint_every: int = 500
    """Save a resumable checkpoint every this many steps (0: only by time, when stopped and at the end)."""
    checkpoint_seconds: float = 60.0
    """Also save one when this many seconds have passed since the last (0: by steps only), so a killed run loses at most this much."""
    plateau_evals: int = 0
    """Stop early once the bake's quality figure (PSNR) gained less than ``plateau_gain`` over the
    last this-many evaluations (0: never stop early). Stopping early skips the end of the
    learning-rate decay, so it suits a constant schedule or a run with a later fine-tuning phase."""
    plateau_gain: float = 0.05
    """The least gain of the quality figure (dB for PSNR) over ``plateau_evals`` evaluations that counts as still improving."""
    keep_best: bool = False
    """End on the weights of the evaluation with the best quality figure when the last one is
    worse (a run that lost quality late ships its best state; the report's curve shows both)."""
    max_nonfinite_steps: int = 50
    """Stop with an error after this many skipped steps in a row (the run has diverged)."""
    cuda_graph: bool = True
    """On a GPU, capture the whole training step in a CUDA graph (far less launch overhead); same results."""

    @property
    def evaluation_interval(self) -> int:
        """Steps between evaluations: ``eval_every``, or when it is None about :data:`AUTO_EVALUATIONS` a run and at
        least 250 steps apart (so a million-step run is not timed by its evaluations)."""
        if self.eval_every is not None:
            return self.eval_every
        return max(250, (self.steps or 0) // AUTO_EVALUATIONS)

    def validate(self) -> None:
        """Raise ConfigError on values no run can use."""
        if self.steps is None:
            raise ConfigError("the number of steps is not set.", field="steps", fix="pass --steps N (or let the bake choose it by device).")
        if self.learning_rate is None:
            raise ConfigError("the learning rate is not set.", field="learning_rate", fix="pass --lr X (or let the bake choose it by device).")
        positive = {"steps": self.steps, "learning_rate": self.learning_rate, "initial_loss_scale": self.initial_loss_scale}
        for name, value in positive.items():
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"must be a positive number, got {value}.", field=name, fix=f"set {name} > 0.")
        if self.seconds is not None and not (isinstance(self.seconds, (int, float)) and self.seconds > 0 and math.isfinite(self.seconds)):
            raise ConfigError(f"must be a positive number of seconds, got {self.seconds}.", field="seconds", fix="pass --seconds S with S > 0, or leave it out.")
        if not (self.plateau_gain >= 0 and math.isfinite(self.plateau_gain)):
            raise ConfigError(f"must be >= 0, got {self.plateau_gain}.", field="plateau_gain", fix="use e.g. 0.05 (dB).")
        if not (self.checkpoint_seconds >= 0 and math.isfinite(self.checkpoint_seconds)):
            raise ConfigError(f"must be >= 0, got {self.checkpoint_seconds}.", field="checkpoint_seconds", fix="set checkpoint_seconds to 0 or more.")
        for name in ("warmup_steps", "log_every", "eval_every", "checkpoint_every", "plateau_evals"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}.", field=name, fix=f"set {name} to 0 or more.")
        for name in ("adam_beta1", "adam_beta2", "final_lr_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0 + (name == "final_lr_fraction"):
                raise ConfigError(f"out of range, got {value}.", field=name, fix="use a value in [0, 1).")
        if self.precision not in ("fp32", "fp16", "bf16"):
            raise ConfigError(f"unknown precision {self.precision!r}.", field="precision", fix="use fp32, fp16 or bf16.")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}.", field="schedule", fix=f"use one of {', '.join(SCHEDULES)}.")
        if self.plateau_evals and self.schedule == "wsd":
            raise ConfigError("stopping on a plateau would end a wsd run on its stable stretch, before its rate decays.", field="plateau_evals",
                              fix="pass --schedule cosine with --plateau-evals, or leave plateau_evals at 0.")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ConfigError(f"out of range, got {self.decay_fraction}.", field="decay_fraction", fix="use a share of the run in (0, 1], e.g. 0.2.")
        if self.loss_scale not in ("dynamic", "static", "none"):
            raise ConfigError(f"unknown loss scaling {self.loss_scale!r}.", field="loss_scale", fix="use dynamic, static or none.")
