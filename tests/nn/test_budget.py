"""The trainer's budgets and verdicts: a time budget, stopping on a plateau, a model's projection after each
update, and the convergence verdict that reports carry."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from neuralbake.errors import ConfigError
from neuralbake.nn.convergence import convergence
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig


class _Line:
    batch_size = 8

    def sample(self, generator: torch.Generator) -> Batch:
        x = torch.randn(self.batch_size, 3, generator=generator)
        return Batch(x, x.sum(dim=1, keepdim=True))


class _Bounded(torch.nn.Module):
    """A linear model whose weights must stay in [-0.1, 0.1] (the target needs 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(3))
        self.constrained = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.weight).sum(dim=1, keepdim=True)

    def constrain_(self) -> None:
        self.weight.clamp_(-0.1, 0.1)
        self.constrained += 1


def _trainer(tmp_path: Path, model: torch.nn.Module | None = None, evaluate=None, **config) -> Trainer:
    torch.manual_seed(0)
    model = model or torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    settings = {"steps": 40, "precision": "fp32", "checkpoint_every": 0, "checkpoint_seconds": 0, "log_every": 4, "eval_every": 4, **config}
    return Trainer(
        model, _Line(), torch.nn.functional.mse_loss, TrainerConfig(**settings), device=torch.device("cpu"),
        checkpoint_path=tmp_path / "ckpt.pt", evaluate=evaluate, quality_key="psnr_db" if evaluate else None,
    )


def _fake_clock(monkeypatch: pytest.MonkeyPatch, seconds_per_reading: float) -> None:
    readings = iter(range(1_000_000))
    monkeypatch.setattr("neuralbake.nn.trainer.time.perf_counter", lambda: next(readings) * seconds_per_reading)


def test_a_time_budget_ends_the_run_and_drives_the_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_clock(monkeypatch, 0.1)
    trainer = _trainer(tmp_path, steps=10_000, seconds=2.0, learning_rate=0.01)
    result = trainer.fit()
    assert result.stopped_by == "seconds"
    assert 5 <= result.steps < 100  # ended by the clock, long before the step cap
    assert trainer.learning_rate < 0.01 * 0.2  # the cosine followed the time spent, not the 10,000 steps
    # resumed, a run that spent its time stays finished
    again = _trainer(tmp_path, steps=10_000, seconds=2.0, learning_rate=0.01)
    assert again.fit(resume=True).steps == result.steps


def test_steps_end_a_run_before_its_time_budget(tmp_path: Path) -> None:
    result = _trainer(tmp_path, steps=12, seconds=3600.0).fit()
    assert (result.steps, result.stopped_by) == (12, "steps")


def test_a_plateau_of_the_quality_figure_stops_the_run(tmp_path: Path) -> None:
    values = iter([10.0, 20.0, 21.0, 21.01, 21.02, 21.0, 21.03] + [21.0] * 100)
    result = _trainer(tmp_path, steps=400, plateau_evals=3, plateau_gain=0.05, evaluate=lambda model: {"psnr_db": next(values)}).fit()
    assert result.stopped_by == "plateau"
    assert result.steps == 4 * 5  # the evaluations at steps 4..20: the last three gained 0.02 dB on the best before


def test_a_rising_quality_figure_keeps_the_run_going(tmp_path: Path) -> None:
    values = iter(float(v) for v in range(1000))
    result = _trainer(tmp_path, steps=40, plateau_evals=3, plateau_gain=0.05, evaluate=lambda model: {"psnr_db": next(values)}).fit()
    assert (result.steps, result.stopped_by) == (40, "steps")


def test_a_plateau_needs_an_evaluation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="plateau"):
        _trainer(tmp_path, plateau_evals=3)


@pytest.mark.parametrize("bad", [{"seconds": 0.0}, {"seconds": -1.0}, {"plateau_evals": -1}, {"plateau_gain": float("nan")}])
def test_bad_budgets_are_refused(bad: dict) -> None:
    with pytest.raises(ConfigError):
        TrainerConfig(**bad).validate()


def test_the_model_projection_runs_after_every_update(tmp_path: Path) -> None:
    model = _Bounded()
    result = _trainer(tmp_path, model=model, steps=30, learning_rate=0.5).fit()
    assert model.constrained == result.steps
    assert float(model.weight.detach().abs().max()) == pytest.approx(0.1)  # pushed to the bound and held there


def _evals(values: list[float], every: int = 100) -> list[dict]:
    return [{"event": "eval", "step": i * every, "psnr_db": v} for i, v in enumerate(values)] + [{"event": "train", "step": 5, "loss": 1.0}]


def test_convergence_of_a_run_still_rising() -> None:
    verdict = convergence(_evals([10, 20, 25, 28, 30]), "psnr_db", tolerance=0.1)
    assert verdict["converged"] is False
    assert verdict["last_quarter_gain"] == pytest.approx(2.0)  # 28 -> 30 over steps 300..400
    assert verdict["gain_per_1000_steps"] == pytest.approx(20.0)


def test_convergence_of_a_flat_run() -> None:
    verdict = convergence(_evals([10, 30, 30.01, 30.02, 30.02]), "psnr_db", tolerance=0.1)
    assert verdict["converged"] is True and verdict["evaluations"] == 5


def test_convergence_of_an_error_figure_and_too_few_evaluations() -> None:
    falling = [{"event": "eval", "step": s, "flip": v} for s, v in [(0, 0.5), (100, 0.2), (200, 0.1), (300, 0.05)]]
    assert convergence(falling, "flip", tolerance=0.01, higher_is_better=False)["converged"] is False
    assert convergence(_evals([10, 20]), "psnr_db", tolerance=0.1)["converged"] is None


def test_keep_best_ends_on_the_best_evaluated_weights(tmp_path: Path) -> None:
    values = iter([1.0, 5.0, 9.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.2, 0.1, 0.0, -1.0])
    weights: list[torch.Tensor] = []

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        weights.append(model[0].weight.detach().clone())
        return {"psnr_db": next(values)}

    trainer = _trainer(tmp_path, steps=40, eval_every=4, keep_best=True, evaluate=evaluate)
    result = trainer.fit()
    assert torch.equal(trainer.model[0].weight, weights[2])  # the weights of the 9.0 evaluation (step 8)
    assert result.history[-1]["restored_from_step"] == 8 and result.history[-1]["psnr_db"] == 9.0
    assert convergence(result.history, "psnr_db", tolerance=0.1)["last_quarter_gain"] < 0  # the verdict reads the curve, not the restore
    # resumed, the finished phase holds the restored weights
    again = _trainer(tmp_path, steps=40, eval_every=4, keep_best=True, evaluate=lambda model: {"psnr_db": 9.0})
    again.fit(resume=True)
    assert torch.equal(again.model[0].weight, weights[2])


def test_keep_best_leaves_a_run_that_ended_best(tmp_path: Path) -> None:
    values = iter(float(v) for v in range(100))
    trainer = _trainer(tmp_path, steps=20, eval_every=4, keep_best=True, evaluate=lambda model: {"psnr_db": next(values)})
    assert "restored_from_step" not in trainer.fit().history[-1]


def test_the_training_record_judges_the_longest_phase_and_the_warning_follows_it() -> None:
    from neuralbake.bakes.summaries import still_improving
    from neuralbake.nn.convergence import training_record
    from neuralbake.nn.trainer import TrainResult

    rising = TrainResult(400, 0, 0, 1.0, 0.0, 1.0, history=_evals([10, 20, 25, 28, 30]), stopped_by="seconds")
    flat = TrainResult(40, 0, 0, 0.1, 0.0, 1.0, history=_evals([30, 30, 30.01], every=20))
    record = training_record([("main", rising), ("finetune", flat)], "psnr_db")
    assert (record["main_phase"], record["converged"], record["stopped_by"]) == ("main", False, "seconds")
    assert [p["converged"] for p in record["phases"]] == [False, True]
    assert "+2.00 dB" in still_improving({"training": record})
    assert still_improving({"training": training_record([("main", flat)], "psnr_db")}) == ""
    assert still_improving({}) == ""


def test_a_loss_curve_is_judged_like_an_evaluation_history_and_the_warning_names_the_flag() -> None:
    from neuralbake.bakes.summaries import still_improving
    from neuralbake.nn.convergence import curve_record

    falling = curve_record([1.0, 0.5, 0.25, 0.125, 0.0625], 10, phase="shape", seconds=1.0)
    flat = curve_record([1.0, 0.5, 0.49, 0.489, 0.489], 10, phase="shape", seconds=1.0)
    assert (falling["converged"], falling["quality_key"], falling["phases"][0]["steps"]) == (False, "loss_db", 40)
    assert abs(falling["last_quarter_gain"] - 10 * math.log10(2)) < 1e-3 and flat["converged"] is True
    noisy = curve_record([1.0 + 0.5 * (k % 2) for k in range(100)], 1, phase="weights", seconds=1.0, smooth=10)
    assert noisy["converged"] is True and noisy["phases"][0]["evaluations"] == 10
    assert "more --epochs would" in still_improving({"bake": "simplify", "training": falling})
    chain = {"bake": "lod", "training": {**falling, "stage": "skin"}}
    assert "its skin stage was still improving" in still_improving(chain) and "--set skin.steps" in still_improving(chain)


def test_a_rate_tolerance_accepts_a_long_run_whose_last_quarter_is_lifted_by_its_anneal() -> None:
    # the same 0.5 dB lift in the last quarter: over 400 steps it is 5 dB per 1,000 steps, over 40,000 steps 0.05
    short = convergence(_evals([10, 20, 25, 29.5, 30]), "psnr_db", tolerance=0.25, rate_tolerance=0.1)
    long = convergence(_evals([10, 20, 25, 29.5, 30], every=10_000), "psnr_db", tolerance=0.25, rate_tolerance=0.1)
    assert short["converged"] is False and long["converged"] is True
    assert long["last_quarter_gain"] == pytest.approx(0.5) and long["gain_per_1000_steps"] == pytest.approx(0.05)
    assert convergence(_evals([10, 20, 25, 29.5, 30], every=10_000), "psnr_db", tolerance=0.25)["converged"] is False
    # a very long run gaining 2 dB in its last quarter is not waved through on its rate (RATE_GAIN_CAP: 1 dB here)
    creeping = convergence(_evals([10, 20, 25, 28, 30], every=100_000), "psnr_db", tolerance=0.25, rate_tolerance=0.1)
    assert creeping["gain_per_1000_steps"] < 0.1 and creeping["converged"] is False
