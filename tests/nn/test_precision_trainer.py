import math

import pytest
import torch
import torch.nn.functional as F

from neuralbake.core.events import EventWriter, ListSink
from neuralbake.errors import TrainingError
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig
from neuralbake.nn.precision import LossScaler
from neuralbake.nn.schedule import learning_rate_at
from neuralbake.nn.trainer import AutogradForwardBackward, Batch, Trainer, TrainerConfig, TrainingInterrupted


class WaveSampler:
    """Targets from a fixed smooth function of two coordinates."""

    batch_size = 64
    capturable = True

    def __init__(self, device):
        self.device = device
        self.poison = torch.ones((), device=device)  # set to inf to poison the targets, even inside a CUDA graph

    def sample(self, generator):
        uv = torch.rand(self.batch_size, 2, generator=generator, device=self.device)
        target = torch.stack([0.5 + 0.4 * torch.sin(6 * uv[:, 0]), 0.5 + 0.4 * torch.cos(5 * uv[:, 1] * uv[:, 0])], dim=-1)
        return Batch(uv, target * self.poison)


def make_trainer(device, tmp_path=None, sampler=None, **overrides):
    torch.manual_seed(0)
    network = CoordinateNetwork(CoordinateNetworkConfig(frequencies=2, hidden=16, layers=2, outputs=2)).to(device)
    settings = dict(steps=40, learning_rate=0.01, log_every=5, eval_every=0, checkpoint_every=0)
    config = TrainerConfig(**{**settings, **overrides})
    sinks = ListSink()
    trainer = Trainer(
        network,
        (sampler or WaveSampler)(device),
        F.mse_loss,
        config,
        device=device,
        checkpoint_path=None if tmp_path is None else tmp_path / "ckpt.pt",
        events=EventWriter([sinks]),
    )
    return trainer, sinks


def test_dynamic_loss_scale_backs_off_and_grows():
    scaler = LossScaler("dynamic", 1024.0, growth_interval=3)
    scaler.update(True)
    assert scaler.scale == 512.0 and scaler.overflows == 1
    for _ in range(2):
        scaler.update(False)
    assert scaler.scale == 512.0
    scaler.update(torch.tensor(0.0))
    assert scaler.scale == 1024.0
    static = LossScaler("static", 1024.0)
    static.update(True)
    assert static.scale == 1024.0 and static.overflows == 1
    assert LossScaler("none", 1024.0).scale == 1.0


def test_unscale_detects_inf_and_nan():
    scaler = LossScaler("dynamic", 4.0)
    grads = [torch.tensor([4.0, 8.0])]
    assert not scaler.unscale_(grads)
    torch.testing.assert_close(grads[0], torch.tensor([1.0, 2.0]))
    assert scaler.unscale_([torch.tensor([1.0, math.inf])])
    assert scaler.unscale_([torch.tensor([math.nan])])


def test_injected_inf_gradient_skips_step_and_halves_scale(device):
    trainer, _ = make_trainer(device, precision="fp16", loss_scale="dynamic", initial_loss_scale=1024.0)
    reference = trainer.forward_backward

    def poisoned(params, batch, loss_scale):
        loss, grads = reference(params, batch, loss_scale)
        grads[1] = grads[1].clone()
        grads[1].view(-1)[0] = math.inf
        return loss, grads

    assert trainer.train_step() is True
    before = {name: p.detach().clone() for name, p in trainer.master.items()}
    moments_before = [trainer.optimizer.state[p]["exp_avg"].clone() for p in trainer.master.values()]
    trainer.forward_backward = poisoned
    assert trainer.train_step() is False
    assert trainer.skipped_steps == 1
    assert trainer.scaler.scale == 512.0
    for name, p in trainer.master.items():
        assert torch.equal(p, before[name]), f"{name} changed on a skipped step"
    for m_before, p in zip(moments_before, trainer.master.values()):
        assert torch.equal(trainer.optimizer.state[p]["exp_avg"], m_before)
    trainer.forward_backward = reference
    assert trainer.train_step() is True
    assert any(not torch.equal(p, before[n]) for n, p in trainer.master.items())


def test_fp16_step_uses_half_compute_and_fp32_masters(device):
    trainer, _ = make_trainer(device, precision="fp16")
    seen = {}
    reference = trainer.forward_backward

    def spy(params, batch, loss_scale):
        seen["dtypes"] = {p.dtype for p in params.values()}
        seen["scale"] = loss_scale
        loss, grads = reference(params, batch, loss_scale)
        seen["grad_dtypes"] = {g.dtype for g in grads}
        return loss, grads

    trainer.forward_backward = spy
    trainer.train_step()
    assert seen["dtypes"] == {torch.float16} and seen["grad_dtypes"] == {torch.float16}
    assert seen["scale"] == trainer.config.initial_loss_scale
    assert {p.dtype for p in trainer.master.values()} == {torch.float32}
    state = trainer.optimizer.state[next(iter(trainer.master.values()))]
    assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == torch.float32


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_training_lowers_loss(device, precision):
    trainer, sink = make_trainer(device, precision=precision, steps=150)
    trainer.fit()
    losses = [e["loss"] for e in sink.events if e["event"] == "train"]
    assert losses[-1] < 0.3 * losses[0]


def test_nan_guard_stops_a_diverged_run(device):
    trainer, _ = make_trainer(device, precision="fp32", loss_scale="none", max_nonfinite_steps=5)

    def always_nan(params, batch, loss_scale):
        return torch.full((), math.nan, device=device), [torch.full_like(p, math.nan) for p in params.values()]

    trainer.forward_backward = always_nan
    with pytest.raises(TrainingError, match="5 steps in a row"):
        trainer.fit()
    assert trainer.step == 5 and trainer.skipped_steps == 5


def test_a_short_run_that_ends_diverged_is_an_error(device):
    # 20 steps at lr 1e30: the weights blow up after the first step and every later step is
    # skipped, which the in-loop guard (50 in a row) never sees; the run must not end "done".
    trainer, _ = make_trainer(device, steps=20, learning_rate=1e30, precision="fp32", loss_scale="none")
    with pytest.raises(TrainingError, match="training diverged"):
        trainer.fit()


def test_a_short_fp16_run_ending_on_loss_scale_backoff_is_not_an_error(device):
    trainer, _ = make_trainer(device, steps=3, precision="fp16", loss_scale="dynamic", initial_loss_scale=2.0**24)
    trainer.fit()  # the scale halves on overflowing steps; that is scaling, not divergence
    assert trainer.step == 3


def test_resume_is_bit_exact(tmp_path, device):
    full, _ = make_trainer(device, precision="fp16", checkpoint_every=7)
    full.fit()

    stopped, _ = make_trainer(device, tmp_path, precision="fp16", checkpoint_every=7)
    stopped.on_step = lambda trainer, step: trainer.request_stop() if step == 18 else None
    with pytest.raises(TrainingInterrupted, match="step 18"):
        stopped.fit()

    resumed, _ = make_trainer(device, tmp_path, precision="fp16", checkpoint_every=7)
    torch.manual_seed(123)  # a different global RNG state must not matter
    with torch.no_grad():
        for p in resumed.master.values():
            p.add_(1.0)  # weights come from the checkpoint, not from construction
    result = resumed.fit(resume=True)
    assert result.steps == 40 and result.samples_seen == full.samples_seen
    for name, p in full.master.items():
        assert torch.equal(p, resumed.master[name]), name
    assert resumed.scaler.scale == full.scaler.scale
    assert [e["loss"] for e in resumed.history if e["event"] == "train"] == [e["loss"] for e in full.history if e["event"] == "train"]


def test_resume_checks_config(tmp_path):
    trainer, _ = make_trainer(torch.device("cpu"), tmp_path)
    trainer.on_step = lambda t, step: t.request_stop() if step == 3 else None
    with pytest.raises(TrainingInterrupted):
        trainer.fit()
    other, _ = make_trainer(torch.device("cpu"), tmp_path, learning_rate=0.5)
    with pytest.raises(TrainingError, match="learning_rate"):
        other.fit(resume=True)
    fresh, _ = make_trainer(torch.device("cpu"), tmp_path / "nowhere")
    with pytest.raises(TrainingError, match="no checkpoint"):
        fresh.fit(resume=True)


def test_damaged_checkpoint_is_a_clear_error(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(b"not a checkpoint")
    trainer, _ = make_trainer(torch.device("cpu"), tmp_path)
    with pytest.raises(TrainingError, match="cannot be read"):
        trainer.fit(resume=True)


def test_learning_rate_schedules():
    assert learning_rate_at(0, base=1.0, total_steps=100, schedule="constant") == 1.0
    assert learning_rate_at(0, base=1.0, total_steps=101, schedule="cosine", final_fraction=0.1) == pytest.approx(1.0)
    assert learning_rate_at(50, base=1.0, total_steps=101, schedule="cosine", final_fraction=0.1) == pytest.approx(0.55)
    assert learning_rate_at(100, base=1.0, total_steps=101, schedule="cosine", final_fraction=0.1) == pytest.approx(0.1)
    assert learning_rate_at(1, base=1.0, total_steps=100, warmup_steps=4) == pytest.approx(0.5)


def test_autograd_forward_backward_accepts_foreign_params():
    torch.manual_seed(0)
    network = CoordinateNetwork(CoordinateNetworkConfig(frequencies=2, hidden=8, layers=1, outputs=2))
    fb = AutogradForwardBackward(network, F.mse_loss)
    batch = WaveSampler("cpu").sample(torch.Generator().manual_seed(0))
    own = dict(network.named_parameters())
    copies = {k: v.detach().clone().requires_grad_(True) for k, v in own.items()}
    loss_a, grads_a = fb(own, batch, 8.0)
    loss_b, grads_b = fb(copies, batch, 8.0)
    assert torch.equal(loss_a, loss_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b)


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CUDA-graph fast path)")


@cuda_only
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cuda_graph_step_matches_eager_steps(precision):
    device = torch.device("cuda")
    graphed, _ = make_trainer(device, precision=precision, cuda_graph=True)
    eager, _ = make_trainer(device, precision=precision, cuda_graph=False)
    assert graphed.use_cuda_graph and not eager.use_cuda_graph
    graphed.fit()
    eager.fit()
    assert graphed.graph is not None
    for name, p in eager.master.items():
        torch.testing.assert_close(graphed.master[name], p, rtol=0, atol=0, msg=name)
    assert graphed.scaler.scale == eager.scaler.scale


class HostSyncSampler(WaveSampler):
    """A sampler that reads the host mid-draw (as the material graph does): it cannot be captured."""

    capturable = False

    def sample(self, generator):
        batch = super().sample(generator)
        assert math.isfinite(float(batch.targets.sum()))  # a host sync: illegal inside a capture
        return batch


@cuda_only
@pytest.mark.parametrize("model_capturable", [True, False])
def test_fed_cuda_graph_matches_eager_steps_with_a_host_syncing_sampler(model_capturable, monkeypatch):
    """A sampler that syncs with the host stays outside the graph: its batches are copied into the graph's buffers,
    and the replayed steps give the eager steps' weights bit for bit. A model that does not say it can be captured
    keeps the whole step eager."""
    device = torch.device("cuda")
    if model_capturable:
        monkeypatch.setattr(CoordinateNetwork, "capturable", True, raising=False)
    graphed, _ = make_trainer(device, cuda_graph=True, steps=30, sampler=HostSyncSampler)
    eager, _ = make_trainer(device, cuda_graph=False, steps=30, sampler=HostSyncSampler)
    assert graphed.use_cuda_graph == graphed.feeds_graph == model_capturable and not eager.use_cuda_graph
    graphed.fit()
    eager.fit()
    assert (graphed.graph is not None) == model_capturable
    for name, p in eager.master.items():
        torch.testing.assert_close(graphed.master[name], p, rtol=0, atol=0, msg=name)


@cuda_only
def test_cuda_graph_overflow_skips_and_backs_off():
    device = torch.device("cuda")
    trainer, _ = make_trainer(device, precision="fp16", initial_loss_scale=1024.0, steps=20, log_every=1)
    poisoned_steps = {8, 9}

    def poison(t, step):
        t.sampler.poison.fill_(math.inf if step + 1 in poisoned_steps else 1.0)

    trainer.on_step = poison
    trainer.sampler.poison.fill_(1.0)
    before = {}

    def snapshot(t, step):
        poison(t, step)
        if step == 7:
            before.update({n: p.detach().clone() for n, p in t.master.items()})
        if step == 9:
            for n, p in t.master.items():
                assert torch.equal(p, before[n]), f"{n} changed on a skipped step"

    trainer.on_step = snapshot
    trainer.fit()
    assert trainer.graph is not None
    assert trainer.skipped_steps == 2
    assert trainer.scaler.scale == 256.0
