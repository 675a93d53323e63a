"""The compiled forward/backward against the autograd reference, on the model it serves (NTC)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from neuralbake.bakes.ntc import NTCModel, TexelSampler, choose_layout
from neuralbake.bakes.ntc.texture_set import ChannelGroup
from neuralbake.errors import TrainingError
from neuralbake.nn.compiled import CompiledForwardBackward
from neuralbake.nn.precision import compute_dtype
from neuralbake.nn.trainer import AutogradForwardBackward, cast_model

NEEDS_CXX = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="Inductor compiles for the CPU with a C++ compiler, and there is none here (.ci/run installs g++)")
DEVICES = [pytest.param("cpu", marks=[pytest.mark.slow, NEEDS_CXX]), *(["cuda"] if torch.cuda.is_available() else [])]  # cpu: a C++ compile, ~20 s


def _ntc(device: str, hidden: tuple[int, ...] = (16,)) -> tuple[NTCModel, TexelSampler]:
    groups = (ChannelGroup("base_color", ("r", "g", "b"), "color"),)
    layout = choose_layout(32, 32, groups, 16.0, hidden=hidden, pe_frequencies=2)
    torch.manual_seed(0)  # the decoder's layers initialise from the global generator
    model = NTCModel(layout, generator=torch.Generator().manual_seed(0)).to(device)
    levels = [torch.rand(h, w, 3, generator=torch.Generator().manual_seed(i)).numpy() for i, (w, h) in enumerate(layout.level_sizes)]
    return model, TexelSampler(layout, levels, 512, torch.device(device))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_loss_and_gradients_match_autograd(device: str) -> None:
    model, sampler = _ntc(device)
    model.quant_mode = "round"  # deterministic: the noise phase draws its noise differently once compiled
    batch = sampler.sample(torch.Generator(device).manual_seed(1))
    params = dict(model.named_parameters())
    reference_loss, reference = AutogradForwardBackward(model, F.mse_loss)(params, batch, 256.0)
    loss, grads = CompiledForwardBackward(model, F.mse_loss)(params, batch, 256.0)
    torch.testing.assert_close(loss, reference_loss, rtol=1e-5, atol=1e-7)
    assert len(grads) == len(reference)
    for name, got, want in zip(params, grads, reference):
        assert got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * float(want.abs().max()), msg=name)
    assert any(float(g.abs().max()) > 0 for g in grads[:2])  # the latents get gradients through the gathers


def test_another_precision_is_refused_by_name() -> None:
    model, sampler = _ntc("cpu")
    half = cast_model(model, compute_dtype("bf16"))
    step = CompiledForwardBackward(model, F.mse_loss)
    with pytest.raises(TrainingError, match="fp32"):
        step(dict(half.named_parameters()), sampler.sample(torch.Generator().manual_seed(0)), 1.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_graphed_compiled_training_follows_the_graphed_eager_run() -> None:
    from neuralbake.nn.trainer import Trainer, TrainerConfig

    finals = []
    for compiled in (False, True):
        model, sampler = _ntc("cuda")
        # no rounding (latents or int8 weights): a rounding flip from a reordered sum would make the runs part ways
        model.quant_mode, model.quantize_weights = "none", False
        config = TrainerConfig(steps=20, learning_rate=0.003, schedule="constant", precision="fp32", checkpoint_every=0, checkpoint_seconds=0, log_every=10)
        step = CompiledForwardBackward(model, F.mse_loss) if compiled else None
        trainer = Trainer(model, sampler, F.mse_loss, config, device=torch.device("cuda"), forward_backward=step)
        assert trainer.use_cuda_graph
        trainer.fit()
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(finals[1], finals[0], rtol=1e-3, atol=1e-4)
    start = torch.cat([p.detach().flatten() for p in _ntc("cuda")[0].parameters()])
    assert float((finals[1] - start).abs().max()) > 0.01  # and both trained


@NEEDS_CXX
def test_a_step_that_does_not_compile_falls_back_to_autograd_when_allowed() -> None:
    model, sampler = _ntc("cpu")
    model.quant_mode = "round"
    batch = sampler.sample(torch.Generator().manual_seed(2))
    params = dict(model.named_parameters())

    def host_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if model.quant_mode == "none" and float(prediction.sum()) != 0.0:  # a host read: no whole graph to compile
            return F.mse_loss(prediction, target)
        return F.mse_loss(prediction, target)

    reasons: list[str] = []
    step = CompiledForwardBackward(model, host_loss, fall_back=reasons.append)
    step(params, batch, 1.0)  # this variant compiles
    assert not step.fell_back and not reasons
    model.quant_mode = "none"  # the next phase's variant does not
    loss, grads = step(params, batch, 1.0)
    assert step.fell_back and len(reasons) == 1 and reasons[0]
    reference_loss, reference = AutogradForwardBackward(model, F.mse_loss)(params, batch, 1.0)  # quant_mode none
    torch.testing.assert_close(loss, reference_loss)
    for got, want in zip(grads, reference):
        torch.testing.assert_close(got, want)
    model.quant_mode = "round"
    step(params, batch, 1.0)
    assert len(reasons) == 1  # said once; the reference runs from then on
    model.quant_mode = "none"
    with pytest.raises(Exception):  # without a fall-back the compiler's error stands
        CompiledForwardBackward(model, host_loss)(params, batch, 1.0)


@pytest.mark.slow
@NEEDS_CXX
def test_each_step_keeps_its_own_compiled_variants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo caps the variants kept per code object (8 by default); one shared by every step would stop a sweep of
    five rates. With the cap at one, two steps of differently shaped decoders (one variant each) still both compile."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    for hidden in ((16,), (24,)):
        model, sampler = _ntc("cpu", hidden)
        model.quant_mode = "round"
        params = dict(model.named_parameters())
        CompiledForwardBackward(model, F.mse_loss)(params, sampler.sample(torch.Generator().manual_seed(3)), 1.0)
