"""The wsd schedule and its half-length twin: the twin is the run of half the steps, and the run itself is unchanged by it."""

import io
import math

import pytest
import torch
import torch.nn.functional as F

from rich.console import Console

from neuralbake.bakes.summaries import still_improving
from neuralbake.core.events import EventWriter, ListSink, ProgressSink
from neuralbake.errors import ConfigError
from neuralbake.nn.convergence import DOUBLING_GAIN, convergence, training_record
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig
from neuralbake.nn.schedule import learning_rate_at
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig, TrainingInterrupted


class FixedSampler:
    """The same batch every step: a run is then a function of its schedule alone, so a twin can be compared exactly."""

    batch_size = 128
    capturable = True

    def __init__(self, device):
        uv = torch.rand(self.batch_size, 2, generator=torch.Generator().manual_seed(1)).to(device)
        target = torch.stack([0.5 + 0.4 * torch.sin(6 * uv[:, 0]), 0.5 + 0.4 * torch.cos(5 * uv[:, 1] * uv[:, 0])], dim=-1)
        self.batch = Batch(uv, target)

    def sample(self, generator):
        return self.batch


def run(device, steps, checkpoint=None, stop_at=None, resume=False, events=None, on_step=None, **overrides):
    torch.manual_seed(0)
    network = CoordinateNetwork(CoordinateNetworkConfig(frequencies=2, hidden=16, layers=2, outputs=2)).to(device)
    sampler = FixedSampler(device)

    def evaluate(model):
        mse = F.mse_loss(model(sampler.batch.inputs), sampler.batch.targets)
        return {"psnr_db": float(-10.0 * torch.log10(mse))}

    settings = dict(steps=steps, learning_rate=0.02, schedule="wsd", decay_fraction=0.5, precision="fp32", log_every=5,
                    eval_every=5, checkpoint_every=0)
    trainer = Trainer(network, sampler, F.mse_loss, TrainerConfig(**{**settings, **overrides}), device=device, evaluate=evaluate,
                      quality_key="psnr_db", checkpoint_path=checkpoint, events=events)
    if stop_at is not None:
        trainer.on_step = lambda t, step: t.request_stop() if step == stop_at else None
    if on_step is not None:
        trainer.on_step = on_step
    return trainer, trainer.fit(resume=resume)


def test_wsd_schedule_is_stable_then_decays():
    at = lambda step: learning_rate_at(step, base=1.0, total_steps=101, schedule="wsd", decay_fraction=0.2, final_fraction=0.1, warmup_steps=4)
    assert at(1) == pytest.approx(0.5)  # warm-up as for the other schedules
    assert at(4) == at(50) == at(80) == 1.0  # stable until the last fifth (step round(101 * 0.8) = 81)
    assert at(81) == 1.0 and at(90) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 9 / 19)))
    assert at(100) == pytest.approx(0.1)
    assert [learning_rate_at(s, base=1.0, total_steps=10, schedule="wsd", decay_fraction=1.0) for s in range(10)] == [
        learning_rate_at(s, base=1.0, total_steps=10, schedule="cosine") for s in range(10)]


def test_decay_fraction_is_checked():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError) as caught:
            TrainerConfig(schedule="wsd", decay_fraction=bad).validate()
        assert caught.value.field == "decay_fraction"


def test_the_twin_is_the_run_of_half_the_steps_and_leaves_the_run_unchanged(device):
    full, result = run(device, 40)
    half, half_result = run(device, 20, half_run=False)
    alone, alone_result = run(device, 40, half_run=False)
    twin = [e for e in result.history if e["event"] == "half_run"]
    assert len(twin) == 1 and twin[0]["steps"] == 20 and twin[0]["branch_step"] == 10 and twin[0]["taken_steps"] == 10
    final_half = [e for e in half_result.history if e["event"] == "eval"][-1]["psnr_db"]
    assert twin[0]["psnr_db"] == pytest.approx(final_half, abs=1e-4)
    # the run goes on from its own state: weights, Adam, counters and its curve are those of the run without a twin
    for name, param in alone.master.items():
        assert torch.equal(param, full.master[name]), name
    for param in alone.master.values():
        mine, theirs = full.optimizer.state[full.master[next(n for n, p in alone.master.items() if p is param)]], alone.optimizer.state[param]
        assert all(torch.equal(mine[key], theirs[key]) for key in ("exp_avg", "exp_avg_sq", "step"))
    assert full.step == alone.step == 40 and full.samples_seen == alone.samples_seen
    assert result.final_loss == alone_result.final_loss
    evals = lambda r: [(e["step"], e["psnr_db"]) for e in r.history if e["event"] == "eval"]
    assert evals(result) == evals(alone_result)
    assert not [e for e in alone_result.history if e["event"] == "half_run"]
    # the verdict: what the second half bought
    verdict = convergence(result.history, "psnr_db", tolerance=0.25)
    assert verdict["doubling_gain"] == pytest.approx(evals(result)[-1][1] - final_half, abs=1e-3)
    assert verdict["half_run_steps"] == 20 and verdict["converged"] == (verdict["doubling_gain"] < DOUBLING_GAIN)


def test_no_twin_for_other_schedules_or_a_run_resumed_past_its_branch(device):
    for schedule in ("cosine", "constant"):
        _, result = run(device, 20, schedule=schedule)
        assert not [e for e in result.history if e["event"] == "half_run"]
    trainer, result = run(device, 8, eval_every=2)
    assert trainer.half_run.branch == 2 and len([e for e in result.history if e["event"] == "half_run"]) == 1
    trainer.half_run.train(trainer)  # the kept state is spent: as in a run resumed past its branch, there is no twin
    assert len([e for e in trainer.history if e["event"] == "half_run"]) == 1


def history(final, twin):
    evals = [{"event": "eval", "step": s, "psnr_db": v} for s, v in ((0, 10.0), (500, 20.0), (750, final - 1.5), (1000, final))]
    return evals + [{"event": "half_run", "step": 1000, "steps": 500, "psnr_db": twin}]


@pytest.mark.parametrize("final, twin, converged", [(30.0, 29.8, True), (30.0, 29.0, False)])
def test_a_wsd_run_is_judged_by_its_twin_not_its_last_quarter(final, twin, converged):
    verdict = convergence(history(final, twin), "psnr_db", tolerance=0.25)
    assert verdict["converged"] is converged and verdict["doubling_gain"] == pytest.approx(final - twin)
    assert verdict["last_quarter_gain"] > 0.25  # the last quarter alone would have said "still improving"

    class Result:
        steps, train_seconds, stopped_by, schedule = 1000, 1.0, "steps", "wsd"

    Result.history = history(final, twin)
    record = training_record([("train", Result)], "psnr_db")
    assert record["doubling_gain"] == verdict["doubling_gain"] and record["half_run_steps"] == 500
    warning = still_improving({"bake": "neural_texture", "training": record})
    assert (warning == "") is converged
    if not converged:
        assert "+1.00 dB over the same bake at 500 steps" in warning and "--steps" in warning


def test_a_run_resumed_past_its_branch_has_no_twin_and_says_so_by_its_last_quarter(tmp_path):
    cpu = torch.device("cpu")
    with pytest.raises(TrainingInterrupted):
        run(cpu, 40, checkpoint=tmp_path / "ckpt.pt", stop_at=15)  # the branch is step 10
    _, result = run(cpu, 40, checkpoint=tmp_path / "ckpt.pt", resume=True)
    assert not [e for e in result.history if e["event"] == "half_run"]
    # its last quarter is mostly the anneal, so with no twin a wsd run is not judged at all
    record = training_record([("train", result)], "psnr_db")
    assert record["converged"] is None and record["doubling_gain"] is None and record["last_quarter_gain"] is not None
    assert still_improving({"bake": "neural_texture", "training": record}) == ""
    # stopped before the branch, the resumed run keeps its twin
    with pytest.raises(TrainingInterrupted):
        run(cpu, 40, checkpoint=tmp_path / "early.pt", stop_at=5)
    _, result = run(cpu, 40, checkpoint=tmp_path / "early.pt", resume=True)
    assert len([e for e in result.history if e["event"] == "half_run"]) == 1


def test_the_twin_has_a_progress_bar_of_its_own():
    screen = io.StringIO()
    sink = ListSink()
    run(torch.device("cpu"), 400, events=EventWriter([sink, ProgressSink("texture", console=Console(file=screen, width=120))]))
    kinds = [e["event"] for e in sink.events]
    assert kinds.index("half_run_start") < kinds.index("half_run_train") < kinds.index("half_run") < kinds.index("end")
    assert 1 <= kinds.count("half_run_train") <= 100  # a service stores every one of them
    assert "texture at half the steps" in screen.getvalue() and "100/100" in screen.getvalue()


def test_a_stop_during_the_twin_keeps_the_finished_run_and_its_resume_has_no_twin(tmp_path):
    cpu = torch.device("cpu")

    def stop_in_the_twin(trainer, step):  # as a service's hook does when its job is cancelled
        if trainer.half_run.running and step == 13:
            trainer.request_stop()

    with pytest.raises(TrainingInterrupted, match="half-length twin"):
        run(cpu, 40, checkpoint=tmp_path / "ckpt.pt", on_step=stop_in_the_twin)
    resumed, result = run(cpu, 40, checkpoint=tmp_path / "ckpt.pt", resume=True)
    alone, _ = run(cpu, 40, half_run=False)
    assert result.steps == 40 and not [e for e in result.history if e["event"] == "half_run"]
    for name, param in alone.master.items():  # the run's own final state was saved, not the twin's
        assert torch.equal(param, resumed.master[name]), name


def test_an_extended_run_is_not_judged_by_its_shorter_self(tmp_path):
    cpu = torch.device("cpu")
    run(cpu, 40, checkpoint=tmp_path / "ckpt.pt")
    _, result = run(cpu, 80, checkpoint=tmp_path / "ckpt.pt", resume=True)
    assert len([e for e in result.history if e["event"] == "half_run"]) == 1  # the 40-step run's, at its step 40
    assert training_record([("train", result)], "psnr_db")["doubling_gain"] is None


def test_keep_best_is_judged_on_the_run_not_the_twin():
    _, result = run(torch.device("cpu"), 40, keep_best=True)
    assert [e for e in result.history if e["event"] == "half_run"]
    assert not [e for e in result.history if "restored_from_step" in e]  # the run's last evaluation is its best here


def test_a_time_budget_records_the_steps_the_twin_trained():
    _, result = run(torch.device("cpu"), 100_000, seconds=0.5, eval_every=20)
    twin = [e for e in result.history if e["event"] == "half_run"][0]
    assert result.stopped_by == "seconds" and twin["steps"] == twin["branch_step"] + twin["taken_steps"] < result.steps


def test_a_plateau_stop_is_refused_with_wsd():
    with pytest.raises(ConfigError) as caught:
        TrainerConfig(schedule="wsd", plateau_evals=3).validate()
    assert caught.value.field == "plateau_evals" and "--schedule cosine" in caught.value.fix
