"""Checkpoints by time, SIGTERM that saves one, learning-rate groups, and a finished run that resumes as finished."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from neuralbake.errors import TrainingError
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig, TrainingInterrupted


class _Line:
    batch_size = 8

    def sample(self, generator: torch.Generator) -> Batch:
        x = torch.randn(self.batch_size, 3, generator=generator)
        return Batch(x, x.sum(dim=1, keepdim=True))


def _trainer(tmp_path: Path, **config) -> Trainer:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    cfg = TrainerConfig(**{"steps": 12, "precision": "fp32", "checkpoint_every": 0, "checkpoint_seconds": 0, "log_every": 4, **config})
    return Trainer(model, _Line(), torch.nn.functional.mse_loss, cfg, device=torch.device("cpu"), checkpoint_path=tmp_path / "ckpt.pt", **{})


def test_a_checkpoint_is_saved_by_time_even_between_step_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 3))  # every reading of the clock is 3 s later
    monkeypatch.setattr("neuralbake.nn.trainer.time.monotonic", lambda: float(next(clock)))
    trainer = _trainer(tmp_path, checkpoint_seconds=5.0)
    saved: list[int] = []
    trainer.events.sinks.append(type("S", (), {"write": lambda self, e: saved.append(e["step"]) if e["event"] == "checkpoint" else None, "close": lambda self: None})())
    trainer.fit()
    assert len(saved) >= 3 and saved[-1] == 12  # by time during the run, and once at the end


def test_sigterm_stops_at_a_step_boundary_and_saves(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)

    def on_step(t: Trainer, step: int) -> None:
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer.on_step = on_step
    with pytest.raises(TrainingInterrupted, match="step 5 of 12"):
        trainer.fit()
    assert torch.load(tmp_path / "ckpt.pt", weights_only=True)["step"] == 5
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back


def test_a_finished_run_resumes_as_finished(tmp_path: Path) -> None:
    first = _trainer(tmp_path)
    first.fit()
    again = _trainer(tmp_path)
    result = again.fit(resume=True)
    assert result.steps == 12
    for a, b in zip(first.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


def test_learning_rate_scales_apply_per_parameter_group(tmp_path: Path) -> None:
    frozen_ish = _trainer(tmp_path, learning_rate=0.1, schedule="constant")
    scaled = Trainer(
        frozen_ish.model, _Line(), torch.nn.functional.mse_loss, frozen_ish.config, device=torch.device("cpu"), lr_scales={"0.": 0.5}
    )
    scaled.train_step()
    rates = sorted(float(group["lr"]) for group in scaled.optimizer.param_groups)
    assert rates == pytest.approx([0.05, 0.1])
    with pytest.raises(TrainingError, match="no parameter name starts with"):
        Trainer(frozen_ish.model, _Line(), torch.nn.functional.mse_loss, frozen_ish.config, device=torch.device("cpu"), lr_scales={"decoder.": 2.0})


def test_a_checkpoint_with_other_lr_scales_is_refused(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    trainer.fit()
    other = Trainer(trainer.model, _Line(), torch.nn.functional.mse_loss, trainer.config, device=torch.device("cpu"),
                    checkpoint_path=tmp_path / "ckpt.pt", lr_scales={"1.": 0.5})
    with pytest.raises(TrainingError, match="lr_scales"):
        other.fit(resume=True)
