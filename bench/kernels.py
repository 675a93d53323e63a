"""The fused Triton kernels against the PyTorch paths they replace, every row measured in one run.

Rows (fp16 weights; samples/s best of ``--repeats``, CUDA-synchronised):

- ``mlp``: a plain 32 -> 64 -> 64 -> 64 -> 32 MLP on rows (the scale the others are judged by);
- ``neural_material``: neural-material decode with the latent fetch, the copper tray's shape
  (8-channel 1024x1024 latent pyramid, decoder 14 -> 64 x 3 -> 3, wi and wo), bilinear and
  trilinear (a random level per sample), random uv;
- ``ntc``: NTC decode of the helmet's 11-channel set shape (2048x2048, the BC7-rate latent shape,
  decoder 53 -> 64 -> 48 -> 32 -> 11): a 3840x2160 frame of random-access texels, and a whole
  mip 0 level;
- ``train``: the RTXNS neural texture network (12 -> 64 x 4 -> 3, leaky ReLU, sigmoid) trained on
  a 1024x1024 image, the whole trainer step (Adam, loss scaling) in a CUDA graph, autograd versus
  the fused step (since 2026-11-26 the fused path is the whole step on the kernels: the pack, the
  training kernel, which draws the batch itself (uniform uv, nearest texels: the sampler says so with
  ``texel_draws``), the gradient sum, and Adam with the loss scale, four launches; the autograd step draws
  with the PyTorch sampler), samples per step 2^10 to 2^18; and the loss both reach after the same steps;
- ``train_bf16``: the same in bf16 (the trainer's ``precision="bf16"``), 2^14 to 2^18 samples per step;
- ``train_material``: the neural-material bake's step (encoder + decoder, relative L1 on a fixed
  random teacher, fp16, CUDA graph), autograd against each MLP's forward and backward as a fused
  kernel inside autograd (``MLP.kernels = "triton"``), 2^12 to 2^18 samples per step.

Each decode row: eager PyTorch, ``torch.compile`` of the same function, the shipped kernel ("triton": for the
neural-material decode on a GPU that is the Gluon kernel of ``kernels.gluon_decode``, and the row also times the
Triton ``tl.dot`` decode as "tl_dot"), the shipped kernel's ratio to compile, and its TFLOP/s (multiply-adds of the real layer widths x 2) as a
fraction of the GPU's dense fp16 tensor-core peak (989 TFLOP/s on an H100 SXM).

    python bench/kernels.py --out docs/results/kernels_h100_YYYY-MM-DD_COMMIT.json
    python bench/kernels.py --quick          # fewer sizes, for a smoke run
    python bench/kernels.py --sweep ntc 128 4   # one tile of one kernel kind
                                                # (--sweep and --ab-tiles: the Triton kernels, Gluon off)
    python bench/kernels.py --profile-step [ADAM_BLOCK REDUCE_ROWS]   # kernels and GPU time per graphed trainer step
    python bench/kernels.py --decode-launches [--no-gluon]   # the decodes for Nsight Compute (see decode_launches)
    python bench/kernels.py --profile-step --no-gluon   # any mode with the Triton training kernel instead of the Gluon one
    python bench/kernels.py --train-launches    # fused training steps for Nsight Compute (see train_launches)
    python bench/kernels.py --ab-tiles       # two tiles of the bilinear decode and of the training step, one process
    python bench/kernels.py --ab-gluon-train  # the graphed step with the Triton and the Gluon training kernels, 2^10-2^18 rows
    python bench/kernels.py --seed-spread    # final loss and PSNR over 12 seeds, autograd against the fused step
"""

# ruff: noqa: B023  (the timed lambdas run at once, inside the loop that binds their variables)
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import sys
import time
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes.neural_material.model import NeuralMaterial
from neuralbake.bakes.neural_texture import ImageSampler, texel_lookup, uv_grid
from neuralbake.bakes.ntc.container import pack_container, read_container
from neuralbake.bakes.ntc.decode import decode_texels
from neuralbake.bakes.ntc.layout import LatentShape, NTCLayout
from neuralbake.bakes.ntc.model import NTCModel
from neuralbake.bakes.ntc.texture_set import ChannelGroup
from neuralbake.core.device import describe_device
from neuralbake.core.metrics import psnr
from neuralbake.kernels import gluon_decode
from neuralbake.kernels import tuning


def TRITON_ONLY(**_: object) -> str:  # noqa: N802  (patched in for the kernels' gluon_reason functions)
    """Why the Gluon kernels do not run: this benchmark times the Triton (``tl.dot``) kernels."""
    return "the benchmark times the Triton kernels"
from neuralbake.kernels.decoders import FusedNeuralMaterial, FusedNTC
from neuralbake.kernels.packing import PackedMLP, mlp_forward
from neuralbake.kernels.training import FusedForwardBackward
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.precision import compute_dtype
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig, cast_model
from timing import measure

PEAK_FP16 = {"H100": 989e12, "H200": 989e12}
"""Dense fp16 tensor-core peak FLOP/s by GPU name fragment (SXM parts)."""


def _peak(device: torch.device) -> float | None:
    name = torch.cuda.get_device_name(device)
    return next((value for key, value in PEAK_FP16.items() if key in name), None)


def _macs(widths: list[int]) -> int:
    return sum(a * b for a, b in itertools.pairwise(widths))


def _row(name: str, n: int, times: dict[str, float | None], macs: int, peak: float | None) -> dict:
    rates = {path: (None if t is None else n / t) for path, t in times.items()}
    row = {"row": name, "samples": n, **{f"{path}_per_s": (None if r is None else round(r)) for path, r in rates.items()}}
    fused = rates.get("triton")
    for base in ("eager", "compile", "graph"):
        if rates.get(base) and fused:
            row[f"x_{base}"] = round(fused / rates[base], 2)
    if fused:
        row["triton_tflops"] = round(fused * macs * 2 / 1e12, 1)
        if peak:
            row["roofline_fraction"] = round(fused * macs * 2 / peak, 3)
    shown = "  ".join(f"{path} {r / 1e6:9.1f} M/s" if r else f"{path}       -      " for path, r in rates.items())
    ratios = "  ".join(f"{k} {v:6.1f}" for k, v in row.items() if k.startswith("x_"))
    print(f"{name:28s} {n:>10,d}  {shown}  {ratios}  {row.get('triton_tflops', '-')} TFLOP/s {row.get('roofline_fraction', '')}", flush=True)
    return row


def _compiled(fn):
    try:
        return torch.compile(fn, dynamic=False)
    except Exception as exc:  # noqa: BLE001  (a compile failure is a row without that column)
        print(f"torch.compile unavailable: {exc}", flush=True)
        return None


def _try_time(fn, repeats: int) -> float | None:
    if fn is None:
        return None
    try:
        return measure(fn, repeats=repeats).best
    except Exception as exc:  # noqa: BLE001
        print(f"  (a path failed: {type(exc).__name__}: {str(exc)[:200]})", flush=True)
        return None


def bench_mlp(device, sizes, repeats, peak) -> list[dict]:
    torch.manual_seed(0)
    mlp = MLP(MLPConfig(inputs=32, hidden=64, layers=3, outputs=32, hidden_activation="relu", output_activation="none")).to(device).half()
    packed = PackedMLP.from_mlp(mlp)
    compiled = _compiled(lambda x: mlp(x))
    rows = []
    for n in sizes:
        x = torch.randn(n, 32, device=device, dtype=torch.float16)
        out = torch.empty(n, 32, device=device, dtype=torch.float16)
        times = {
            "eager": _try_time(lambda: mlp(x), repeats),
            "compile": _try_time(None if compiled is None else (lambda: compiled(x)), repeats),
            "triton": measure(lambda: mlp_forward(packed, x, out_dtype=torch.float16), repeats=repeats).best,
        }
        del out
        rows.append(_row("mlp 32-64x3-32", n, times, _macs([32, 64, 64, 64, 32]), peak))
    return rows


def copper_material(device) -> NeuralMaterial:
    torch.manual_seed(1)
    latents, side = [], 1024
    while side >= 1:
        latents.append(torch.randn(side, side, 8, device=device) * 0.5)
        side //= 2
    decoder = MLP(MLPConfig(inputs=14, hidden=64, layers=3, outputs=3, hidden_activation="relu", output_activation="none")).to(device)
    return NeuralMaterial(latents, decoder, ("wi", "wo")).to(torch.float16)


def bench_neural_material(device, sizes, repeats, peak) -> list[dict]:
    material = copper_material(device)
    reference = NeuralMaterial(material.latents, material.decoder, material.direction_inputs)
    fused = NeuralMaterial(material.latents, material.decoder, material.direction_inputs)
    fused.kernels = "triton"
    fused.decode(*(torch.zeros(1, k, device=device) for k in (2, 3, 3)))  # builds the fused decode
    kernel = fused.decode_kernel
    with mock.patch.object(gluon_decode, "gluon_reason", TRITON_ONLY):
        plain = FusedNeuralMaterial(material)  # the Triton (tl.dot) decode, timed beside the shipped one where that is Gluon
    print(f"  the neural-material decode runs the {kernel} kernel" + (f" ({FusedNeuralMaterial(material).gluon_reason})" if kernel != "gluon" else ""), flush=True)
    compiled = _compiled(lambda uv, wi, wo: reference.decode(uv, wi, wo))
    compiled_lod = _compiled(lambda uv, wi, wo, lod: reference.decode(uv, wi, wo, lod))
    widths = [14, 64, 64, 64, 3]
    rows = []
    for n in sizes:
        g = torch.Generator(device=device).manual_seed(2)
        uv = torch.rand(n, 2, device=device, generator=g)
        wi = torch.nn.functional.normalize(torch.rand(n, 3, device=device, generator=g) * 2 - 1, dim=1).abs()
        wo = torch.nn.functional.normalize(torch.rand(n, 3, device=device, generator=g) * 2 - 1, dim=1).abs()
        lod = torch.rand(n, device=device, generator=g) * 10
        times = {
            "eager": _try_time(lambda: reference.decode(uv, wi, wo), repeats),
            "compile": _try_time(None if compiled is None else (lambda: compiled(uv, wi, wo)), repeats),
            "triton": measure(lambda: fused.decode(uv, wi, wo), repeats=repeats).best,
        }
        if kernel == "gluon":
            times["tl_dot"] = measure(lambda: plain(uv, wi, wo), repeats=repeats).best
        rows.append(_row("neural material bilinear", n, times, _macs(widths), peak) | {"kernel": kernel})
        times = {
            "eager": _try_time(lambda: reference.decode(uv, wi, wo, lod), repeats) if n <= 1 << 22 else None,
            "compile": _try_time(None if compiled_lod is None else (lambda: compiled_lod(uv, wi, wo, lod)), repeats),
            "triton": measure(lambda: fused.decode(uv, wi, wo, lod), repeats=repeats).best,
        }
        if kernel == "gluon":
            times["tl_dot"] = measure(lambda: plain(uv, wi, wo, lod), repeats=repeats).best
        rows.append(_row("neural material trilinear", n, times, _macs(widths), peak) | {"kernel": kernel})
    diff = (fused.decode(uv, wi, wo) - reference.decode(uv, wi, wo)).abs().max().item()
    print(f"  parity at {n:,}: max |triton - torch| = {diff:.3g}", flush=True)
    return rows


def helmet_ntc_container(device):
    groups = (
        ChannelGroup("base_color", ("R", "G", "B")),
        ChannelGroup("normal", ("X", "Y"), "normal_xy"),
        ChannelGroup("orm", ("O", "R", "M"), "data"),
        ChannelGroup("emissive", ("R", "G", "B")),
    )
    layout = NTCLayout(2048, 2048, groups, LatentShape(1, 8, 4))
    model = NTCModel(layout, generator=torch.Generator().manual_seed(3))
    return read_container(pack_container(model)).to(device)


def bench_ntc(device, repeats, peak) -> list[dict]:
    container = helmet_ntc_container(device)
    fused = FusedNTC(container)
    frame = (3840, 2160)
    n = frame[0] * frame[1]
    width, height = container.layout.width, container.layout.height
    x = torch.arange(frame[0], device=device).repeat(frame[1]) % width
    y = torch.arange(frame[1], device=device).repeat_interleave(frame[0]) % height
    level = torch.zeros_like(x)
    widths = container.layout.layer_widths
    compiled = _compiled(lambda level, x, y: decode_texels(container, level, x, y, chunk=n))
    times = {
        "eager": _try_time(lambda: decode_texels(container, level, x, y, chunk=1 << 22), repeats),
        "compile": _try_time(None if compiled is None else (lambda: compiled(level, x, y)), repeats),
        "triton": measure(lambda: fused.texels(level, x, y, out_dtype=torch.float16), repeats=repeats).best,
    }
    rows = [_row("ntc 4K frame random access", n, times, _macs(widths), peak)]
    rows[-1]["ms_per_frame_triton"] = round(n / rows[-1]["triton_per_s"] * 1e3, 3)
    level0 = width * height
    times = {"triton": measure(lambda: fused.level(0, out_dtype=torch.float16), repeats=repeats).best}
    rows.append(_row("ntc mip 0 (2048x2048)", level0, times, _macs(widths), peak))
    diff = (fused.texels(level[:65536], x[:65536], y[:65536]) - decode_texels(container, level[:65536], x[:65536], y[:65536])).abs().max().item()
    print(f"  ntc parity: max |triton - torch| = {diff:.3g}; 4K frame {rows[0]['ms_per_frame_triton']} ms", flush=True)
    # the same decode in int8 arithmetic (int8 activations x the container's int8 weights, int32 sums)
    from neuralbake.bakes.ntc.int8 import calibrate_int8, decode_texels_int8, int8_factors

    calibration = calibrate_int8(container)
    int8 = FusedNTC(container, torch.int8, int8_factors(container, calibration))
    times = {"triton": measure(lambda: int8.texels(level, x, y, out_dtype=torch.float16), repeats=repeats).best}
    rows.append(_row("ntc int8 4K frame random access", n, times, _macs(widths), peak))
    rows[-1]["ms_per_frame_triton"] = round(n / rows[-1]["triton_per_s"] * 1e3, 3)
    times = {"triton": measure(lambda: int8.level(0, out_dtype=torch.float16), repeats=repeats).best}
    rows.append(_row("ntc int8 mip 0 (2048x2048)", level0, times, _macs(widths), peak))
    part = (level[:65536], x[:65536], y[:65536])
    diff = (int8.texels(*part) - decode_texels_int8(container, calibration, *part)).abs()
    print(f"  ntc int8 parity: max |triton - torch| = {diff.max().item():.3g} ({(diff > 1e-5).float().mean().item():.2%} of values "
          f"differ); 4K frame {rows[-2]['ms_per_frame_triton']} ms (fp16 {rows[0]['ms_per_frame_triton']} ms)", flush=True)
    return rows


def rtxns_image(device) -> torch.Tensor:
    v, u = torch.meshgrid(torch.linspace(0, 1, 1024, device=device), torch.linspace(0, 1, 1024, device=device), indexing="ij")
    return torch.stack((0.5 + 0.5 * torch.sin(40 * u * v), 0.5 + 0.5 * torch.cos(25 * u + 7 * v * v), (u + v) / 2), dim=-1)


def _trainer(device, image, batch, steps, fused: bool, precision: str = "fp16", seed: int = 0, programs: int | None = None) -> Trainer:
    """The benches' RTXNS trainer: the network (seed 4) trained on ``image`` at ``batch`` rows a step, graphed, autograd or
    fused (``programs``: the training kernel's, by default FusedForwardBackward's)."""
    torch.manual_seed(4)
    net = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device)
    config = TrainerConfig(steps=steps, learning_rate=0.01, precision=precision, log_every=steps, eval_every=0, checkpoint_every=0, checkpoint_seconds=0, seed=seed)
    step = FusedForwardBackward(net, "mse", dtype=compute_dtype(precision), programs=programs) if fused else None
    return Trainer(net, ImageSampler(image, "identity", batch), torch.nn.functional.mse_loss, config, device=device, forward_backward=step)


def _replay_us(trainer: Trainer, replays: int, rounds: int = 1) -> float:
    """Microseconds per replay of ``trainer``'s captured step (captured after six steps), the best of ``rounds`` timings of
    ``replays`` replays."""
    for _ in range(6):
        trainer.graphed_step()
    graph = trainer.graph
    assert graph is not None

    def replay() -> None:
        for _ in range(replays):
            graph.replay()

    return measure(replay, repeats=rounds, warmup=0).best / replays * 1e6


def _train(device, image, batch, steps, fused: bool, precision: str = "fp16") -> tuple[float, float]:
    result = _trainer(device, image, batch, steps, fused, precision).fit()
    return result.samples_seen / result.train_seconds, result.final_loss


def bench_train(device, sizes, steps, peak, precision: str = "fp16") -> list[dict]:
    image = rtxns_image(device)
    widths = [12, 64, 64, 64, 64, 3]
    rows = []
    for n in sizes:
        count = steps or min(4000, max(200, (1 << 24) // n))
        for fused in (False, True):
            _train(device, image, n, 8, fused, precision)  # compiles the kernels, warms the allocator
        graph_rate, graph_loss = _train(device, image, n, count, False, precision)
        fused_rate, fused_loss = _train(device, image, n, count, True, precision)
        name = "train RTXNS net (fwd+bwd)" if precision == "fp16" else f"train RTXNS net {precision} (fwd+bwd)"
        row = _row(name, n, {"graph": n / graph_rate, "triton": n / fused_rate}, 3 * _macs(widths), peak)
        row.update(graph_final_loss=graph_loss, triton_final_loss=fused_loss, steps=count)
        print(f"  final loss after {count} steps: graph {graph_loss:.5f}  fused {fused_loss:.5f}", flush=True)
        rows.append(row)
    return rows


class _MaterialSampler:
    """Texel features (a smooth function of uv) and local directions -> ``log(1 + f cos)`` of a fixed random teacher."""

    capturable = True

    def __init__(self, features: int, batch_size: int, device) -> None:
        self.features, self.batch_size = features, batch_size
        torch.manual_seed(5)
        self.basis = torch.randn(2, features, device=device) * 3.0
        self.teacher = MLP(MLPConfig(inputs=features + 6, hidden=32, layers=2, outputs=3, hidden_activation="relu", output_activation="none")).to(device)

    def sample(self, generator: torch.Generator) -> Batch:
        device = self.basis.device
        uv = torch.rand(self.batch_size, 2, generator=generator, device=device)
        texels = torch.sin(uv @ self.basis)
        directions = torch.randn(self.batch_size, 6, generator=generator, device=device)
        directions[:, 2] = directions[:, 2].abs() + 0.1
        directions[:, 5] = directions[:, 5].abs() + 0.1
        wi = torch.nn.functional.normalize(directions[:, :3], dim=1)
        wo = torch.nn.functional.normalize(directions[:, 3:], dim=1)
        inputs = torch.cat([texels, wi, wo], dim=1)
        with torch.no_grad():
            targets = torch.nn.functional.softplus(self.teacher(inputs))
        return Batch(inputs=inputs, targets=targets)


def _train_material(device, batch, steps, fused: bool) -> tuple[float, float]:
    from neuralbake.bakes.neural_material.config import NeuralMaterialConfig
    from neuralbake.bakes.neural_material.model import NeuralMaterialModel, relative_l1

    torch.manual_seed(6)
    features = 24
    model = NeuralMaterialModel(features, NeuralMaterialConfig(material="unused.json")).to(device)
    model.encoder.kernels = model.decoder.kernels = "triton" if fused else "torch"
    config = TrainerConfig(steps=steps, learning_rate=0.005, precision="fp16", log_every=steps, eval_every=0, checkpoint_every=0, checkpoint_seconds=0)
    trainer = Trainer(model, _MaterialSampler(features, batch, device), relative_l1, config, device=device)
    result = trainer.fit()
    return result.samples_seen / result.train_seconds, result.final_loss


def bench_train_material(device, sizes, steps, peak) -> list[dict]:
    """The neural-material bake's training step (encoder 24 -> 64 x 2 -> 8, decoder 17 -> 64 x 3 -> 3, relative L1, fp16, CUDA graph):
    autograd against FusedMLP (each MLP's forward and backward a fused kernel inside autograd)."""
    widths_encoder, widths_decoder = [24, 64, 64, 8], [17, 64, 64, 64, 3]
    rows = []
    for n in sizes:
        count = steps or min(2000, max(100, (1 << 23) // n))
        for fused in (False, True):
            _train_material(device, n, 8, fused)
        graph_rate, graph_loss = _train_material(device, n, count, False)
        fused_rate, fused_loss = _train_material(device, n, count, True)
        row = _row("train neural material", n, {"graph": n / graph_rate, "triton": n / fused_rate}, 3 * (_macs(widths_encoder) + _macs(widths_decoder)), peak)
        row.update(graph_final_loss=graph_loss, triton_final_loss=fused_loss, steps=count)
        print(f"  final loss after {count} steps: graph {graph_loss:.5f}  fused {fused_loss:.5f}", flush=True)
        rows.append(row)
    return rows


def sweep(device, repeats, kind: str, tile: tuple[int, int]) -> None:
    """Time the kernels of one kind (forward, trilinear, ntc or train) at one (rows per program, warps) tile.

    The fastest tile that tests/kernels/test_gpu_parity.py passes goes into ``kernels.tuning.TILES``. One
    tile per process: a tile the compiler gets wrong can take the CUDA context down with it. ``train`` times the
    trainer's graphed step (replays, as ``--profile-step``) at 2^14 and 2^18 rows, the autograd one and the fused one
    with 1-4 training programs per SM, the gradients carried in registers where ``carries_gradients`` allows.
    """
    tuning.TILES[kind] = tile
    n = 1 << 22
    show = lambda t: f"{n / t / 1e9:7.2f} G/s" if t else "   failed"
    if kind == "trilinear":
        material = copper_material(device)
        material.kernels = "triton"
        uv = torch.rand(n, 2, device=device)
        wi = torch.nn.functional.normalize(torch.rand(n, 3, device=device), dim=1)
        lod = torch.rand(n, device=device) * len(material.latents)
        print(f"trilinear tile {tile}: neural material {show(_try_time(lambda: material.decode(uv, wi, wi, lod=lod), repeats))}", flush=True)
    elif kind == "forward":
        mlp = MLP(MLPConfig(inputs=32, hidden=64, layers=3, outputs=32, hidden_activation="relu", output_activation="none")).to(device).half()
        packed = PackedMLP.from_mlp(mlp)
        x = torch.randn(n, 32, device=device, dtype=torch.float16)
        material = copper_material(device)
        material.kernels = "triton"
        uv = torch.rand(n, 2, device=device)
        wi = torch.nn.functional.normalize(torch.rand(n, 3, device=device), dim=1)
        t_mlp = _try_time(lambda: mlp_forward(packed, x, out_dtype=torch.float16), repeats)
        t_nm = _try_time(lambda: material.decode(uv, wi, wi), repeats)
        print(f"forward tile {tile}: mlp {show(t_mlp)}  neural material {show(t_nm)}", flush=True)
    elif kind == "ntc":
        ntc = FusedNTC(helmet_ntc_container(device))
        x = torch.randint(0, 2048, (n,), device=device)
        print(f"ntc tile {tile}: {show(_try_time(lambda: ntc.texels(torch.zeros_like(x), x, x, out_dtype=torch.float16), repeats))}", flush=True)
    else:
        image = rtxns_image(device)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        for batch in (1 << 14, 1 << 18):
            replays = 50 if batch >= 1 << 18 else 300
            t_auto = _replay_us(_trainer(device, image, batch, 10**6, False), replays, 3)
            print(f"train step {batch}: autograd {batch / t_auto:8.1f} M/s ({t_auto:.1f} us a graphed step)", flush=True)
            for per_sm in (1, 2, 3, 4):
                trainer = _trainer(device, image, batch, 10**6, True, programs=per_sm * sms)
                try:
                    t = _replay_us(trainer, replays, 3)
                except Exception as exc:  # noqa: BLE001  (a tile the compiler gets wrong is a failed line)
                    print(f"train step {batch} tile {tile} programs {per_sm}x SMs: failed ({type(exc).__name__}: {str(exc)[:160]})", flush=True)
                    continue
                assert trainer.fused_update is not None
                where = "registers" if trainer.fused_update.buffers.carry else "slots"
                print(f"train step {batch} tile {tile} programs {per_sm}x SMs, gradients in {where}: {batch / t:8.1f} M/s ({t:.1f} us)", flush=True)


def profile_step(device, blocks: tuple[int, int] | None = None) -> None:
    """Kernels and GPU time per trainer step, as the trainer runs it: the step captured in a CUDA graph, the wall time
    per replay over 200 replays after 6 steps (50 at 2^18 rows), and torch.profiler over 20 more. The RTXNS network at
    2^10, 2^14 and 2^18 rows, the PyTorch step (autograd + fused Adam) and the fused one (``update_step``).

    ``blocks``: ``(Adam block, slots summed at once)`` for the fused step's optimizer kernels instead of
    ``FusedForwardBackward``'s (``adam_block``, ``reduce_rows``), to compare settings.
    """
    from torch.profiler import ProfilerActivity, profile

    image = rtxns_image(device)
    settings = mock.patch.multiple(FusedForwardBackward, adam_block=blocks[0], reduce_rows=blocks[1]) if blocks else contextlib.nullcontext()
    with settings:
        print(f"fused step's Adam block {FusedForwardBackward.adam_block}, slots summed {FusedForwardBackward.reduce_rows} at once", flush=True)
        for fused in (False, True):
            for n in (1 << 10, 1 << 14, 1 << 18):
                trainer = _trainer(device, image, n, 10**6, fused)
                wall_us = _replay_us(trainer, 50 if n >= 1 << 18 else 200)
                graph = trainer.graph
                assert graph is not None
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        graph.replay()
                    torch.cuda.synchronize()
                events = [e for e in prof.events() if e.device_type.name == "CUDA"]
                gpu_us = sum(e.device_time for e in events) / 20
                print(
                    f"{'fused' if fused else 'pytorch'} step, {n} rows: {len(events) / 20:.0f} kernels a step, {gpu_us:.1f} us of GPU time, "
                    f"{wall_us:.1f} us a replay",
                    flush=True,
                )
                per_kernel: dict[str, list[float]] = {}
                for e in events:
                    per_kernel.setdefault(e.name, []).append(e.device_time)
                for name, times in sorted(per_kernel.items(), key=lambda item: -sum(item[1])):
                    print(f"    {sum(times) / 20:8.1f} us  {len(times) / 20:4.1f}x  {name[:90]}", flush=True)


def decode_launches(device) -> None:
    """Two launches of each decode at 2^22 samples (the neural material's, bilinear, then NTC's random access), for a
    profiler to attach to:

        ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \\
            --section InstructionStats -k regex:ntc_kernel -c 1 python bench/kernels.py --decode-launches
    """
    n = 1 << 22
    material = copper_material(device)
    material.kernels = "triton"
    uv = torch.rand(n, 2, device=device)
    wi = torch.nn.functional.normalize(torch.rand(n, 3, device=device), dim=1)
    ntc = FusedNTC(helmet_ntc_container(device))
    x = torch.randint(0, 2048, (n,), device=device)
    for _ in range(2):
        material.decode(uv, wi, wi)
        ntc.texels(torch.zeros_like(x), x, x, out_dtype=torch.float16)
    torch.cuda.synchronize()


def train_launches(device) -> None:
    """Three fused training steps of the RTXNS network at 2^18 rows (the kernel and the step's other launches), for a
    profiler to attach to:

        ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \\
            --section InstructionStats -k regex:mlp_train_kernel -s 1 -c 1 python bench/kernels.py --train-launches
    """
    image = rtxns_image(device)
    net = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device)
    half = cast_model(net, torch.float16)
    sample = ImageSampler(image, "identity", 1 << 18).sample(torch.Generator(device=device).manual_seed(0))
    step = FusedForwardBackward(net, "mse", dtype=torch.float16)
    for _ in range(3):
        step(dict(half.named_parameters()), sample, torch.tensor(1024.0, device=device))
    torch.cuda.synchronize()


def seed_spread(device, seeds: int = 12) -> list[dict]:
    """The RTXNS network trained at 2^14 rows a step for 1024 steps with ``seeds`` trainer seeds, the graphed autograd step
    (the PyTorch sampler's batches) against the fused one (batches drawn in the kernel): the mean and spread of the final
    training loss, and of the PSNR of the trained network on a 512x512 grid of texel centres. Two paths that draw different
    random batches can only be compared through such spreads."""
    image = rtxns_image(device)
    grid = uv_grid(512, 512, device)
    reference = texel_lookup(image, grid)
    rows = []
    for path in ("autograd", "fused"):
        losses, psnrs = [], []
        for seed in range(seeds):
            trainer = _trainer(device, image, 1 << 14, 1024, path == "fused", seed=seed)
            net = trainer.model
            losses.append(trainer.fit().final_loss)
            assert path == "autograd" or trainer.fused_draws is not None
            with torch.no_grad():
                psnrs.append(psnr(net(grid).float(), reference))
        loss, quality = torch.tensor(losses), torch.tensor(psnrs)
        print(f"{path:9s} final training loss mean {loss.mean():.5f} sd {loss.std():.5f}; PSNR on a 512^2 grid mean {quality.mean():.2f} dB "
              f"sd {quality.std():.2f} ({seeds} seeds)", flush=True)  # fmt: skip
        rows.append({"row": f"seed spread RTXNS net {path}", "samples": 1 << 14, "steps": 1024, "final_loss": losses, "psnr_db": psnrs})
    return rows


def ab_gluon_train(device, sizes: list[int]) -> list[dict]:
    """The graphed trainer step (replays, as ``--profile-step``) of the RTXNS network at each size: autograd, the fused step
    with the Triton training kernel and with the Gluon one (``kernels.gluon_train``, the tile ``tile_for`` picks), then
    the Gluon one at each of its two tiles forced; three rounds alternating, the best of each. Then 1,000 steps of
    2^14 rows with each kernel, the final losses side by side."""
    from neuralbake.kernels import gluon_train

    image = rtxns_image(device)
    rows = []
    tiles = {"small": gluon_train.SMALL_TILE, "large": gluon_train.LARGE_TILE}
    for n in sizes:
        replays = 200 if n < 1 << 18 else 50
        best: dict[str, float] = {}
        chosen = None
        for _ in range(3):
            for label in ("autograd", "triton", "gluon", "gluon small tile", "gluon large tile"):
                forced = tiles.get(label.removeprefix("gluon ").removesuffix(" tile"))
                with contextlib.ExitStack() as stack:
                    if label == "triton":
                        stack.enter_context(mock.patch.object(gluon_train, "gluon_train_reason", TRITON_ONLY))
                    if forced is not None:
                        stack.enter_context(mock.patch.object(gluon_train, "tile_for", lambda n, sms, tile=forced: tile))
                    trainer = _trainer(device, image, n, 100, label != "autograd")
                    us = _replay_us(trainer, replays, 2)
                if label != "autograd":
                    assert trainer.forward_backward.buffers.kernel == ("triton" if label == "triton" else "gluon"), label
                if label == "gluon":
                    chosen = gluon_train.tile_for(n, trainer.forward_backward.buffers.sms)
                best[label] = min(best.get(label, math.inf), us)
        row = {"name": "train step replay, gluon A/B", "n": n, "us": {k: round(v, 2) for k, v in best.items()}, "gluon_tile": list(chosen)}
        row["x_autograd"] = {k: round(best["autograd"] / v, 2) for k, v in best.items() if k != "autograd"}
        rows.append(row)
        shown = "  ".join(f"{k} {v:7.1f} us" for k, v in best.items())
        print(f"{n:>8d} rows: {shown}  | gluon {best['autograd'] / best['gluon']:.2f}x autograd, {best['triton'] / best['gluon']:.2f}x triton, tile {chosen}", flush=True)
    for label in ("triton", "gluon"):
        with mock.patch.object(gluon_train, "gluon_train_reason", TRITON_ONLY) if label == "triton" else contextlib.nullcontext():
            result = _trainer(device, image, 1 << 14, 1000, True).fit()
        print(f"1,000 steps of 2^14 rows, {label} kernel: final loss {result.final_loss:.5f}", flush=True)
        rows.append({"name": f"train 1000 x 2^14, {label} kernel", "final_loss": result.final_loss})
    return rows


def ab_tiles(device, repeats) -> list[dict]:
    """Two tiles of a kernel kind timed in one process, alternating, so that the machine's drift falls on both: the
    bilinear neural-material decode (``TILES["forward"]``) at 128 x 2 and 128 x 4, 2^22 and 2^24 samples, three rounds;
    the graphed fp16 RTXNS training step (``TILES["train"]``) at 64 x 4 and 32 x 4, 2^14 to 2^18 rows, two rounds."""

    rows = []
    material = copper_material(device)
    material.kernels = "triton"
    for n in (1 << 22, 1 << 24):
        g = torch.Generator(device=device).manual_seed(2)
        uv = torch.rand(n, 2, device=device, generator=g)
        wi = torch.nn.functional.normalize(torch.rand(n, 3, device=device, generator=g) * 2 - 1, dim=1).abs()
        rates: dict[str, list[float]] = {}
        for _ in range(3):
            for tile in ((128, 2), (128, 4)):
                with _tile("forward", tile):
                    rates.setdefault(f"{tile[0]}x{tile[1]}", []).append(n / measure(lambda: material.decode(uv, wi, wi), repeats=repeats).best)
        print(f"bilinear decode {n} samples: " + ", ".join(f"{k} " + " / ".join(f"{r / 1e9:.2f}" for r in v) + " G/s" for k, v in rates.items()), flush=True)
        rows.append({"row": "ab tiles neural material bilinear", "samples": n, "per_s": rates})
    image = rtxns_image(device)
    for n in (1 << 14, 1 << 16, 1 << 18):
        count = min(4000, max(200, (1 << 24) // n))
        for tile in ((64, 4), (32, 4)):
            with _tile("train", tile):
                _train(device, image, n, 8, True)
        rates = {}
        for _ in range(2):
            for tile in ((64, 4), (32, 4)):
                with _tile("train", tile):
                    rates.setdefault(f"{tile[0]}x{tile[1]}", []).append(_train(device, image, n, count, True)[0])
        print(f"train {n} rows, {count} steps: " + ", ".join(f"{k} " + " / ".join(f"{r / 1e6:.1f}" for r in v) + " M/s" for k, v in rates.items()), flush=True)
        rows.append({"row": "ab tiles train RTXNS net", "samples": n, "steps": count, "per_s": rates})
    return rows


@contextlib.contextmanager
def _tile(kind: str, tile: tuple[int, int]):
    """``kernels.tuning.TILES[kind]`` set to ``tile`` inside, restored after."""
    with mock.patch.dict(tuning.TILES, {kind: tile}):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer sizes")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--steps", type=int, default=0, help="training steps per timed run (0: about 2^24 samples, 200 to 4000 steps)")
    parser.add_argument(
        "--sweep", nargs="+", metavar="KIND ROWS WARPS", help="only time the forward, trilinear, ntc or train kernels at one tile"
    )
    parser.add_argument(
        "--profile-step", nargs="*", type=int, metavar="ADAM_BLOCK REDUCE_ROWS",
        help="only the kernels and GPU time of a graphed trainer step, PyTorch and fused (optionally the fused step's Adam block and slots summed at once)",
    )  # fmt: skip
    parser.add_argument("--decode-launches", action="store_true", help="only launch each decode twice (for ncu to profile; see decode_launches)")
    parser.add_argument("--train-launches", action="store_true", help="only three fused training steps (for ncu to profile; see train_launches)")
    parser.add_argument("--ab-gluon-train", action="store_true", help="only the graphed training step with the Triton and the Gluon training kernel and each Gluon tile (see ab_gluon_train)")
    parser.add_argument("--ab-tiles", action="store_true", help="only two tiles each of the bilinear decode and the training step, alternating (see ab_tiles)")
    parser.add_argument("--seed-spread", action="store_true", help="only the final loss and PSNR over 12 seeds, autograd against the fused step (see seed_spread)")
    parser.add_argument("--no-gluon", action="store_true", help="the Triton (tl.dot) kernels only: the neural-material decode and the training step without Gluon (their gluon_reason and gluon_train_reason patched to refuse)")
    parser.add_argument("--only", nargs="*", default=["mlp", "neural_material", "ntc", "train", "train_bf16", "train_material"])
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON (an existing file keeps its rows of the parts not run)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/kernels.py times the CUDA kernels; run it on a machine with an NVIDIA GPU.")
    device = torch.device("cuda")
    peak = _peak(device)
    decode_sizes = [1 << 16, 1 << 20, 1 << 24] if args.quick else [1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24]
    train_sizes = [1 << 10, 1 << 14, 1 << 18] if args.quick else [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18]
    result = {"device": describe_device(device), "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "peak_fp16_flops": peak, "rows": []}
    import triton

    result["triton"] = triton.__version__
    print(f"{torch.cuda.get_device_name(device)}  torch {torch.__version__}  triton {triton.__version__}", flush=True)
    if args.sweep or args.ab_tiles or args.no_gluon:
        # these tune the Triton (tl.dot) kernels' tiles and choices, so they leave the Gluon decode and training kernels off
        from neuralbake.kernels import gluon_train

        gluon_decode.gluon_reason = gluon_train.gluon_train_reason = TRITON_ONLY
    if args.sweep:
        kind, *numbers = args.sweep
        if kind not in ("forward", "trilinear", "ntc", "train") or len(numbers) != 2 or not all(v.isdigit() and int(v) > 0 for v in numbers):
            sys.exit("--sweep takes KIND ROWS WARPS: KIND forward, trilinear, ntc or train, then positive whole numbers")
        sweep(device, args.repeats, kind, (int(numbers[0]), int(numbers[1])))
        return
    if args.profile_step is not None:
        if len(args.profile_step) not in (0, 2) or any(v < 1 or v & (v - 1) for v in args.profile_step):
            sys.exit("--profile-step takes nothing, or an Adam block and a count of slots summed at once, both powers of two")
        profile_step(device, tuple(args.profile_step) or None)
        return
    if args.decode_launches:
        decode_launches(device)
        return
    if args.train_launches:
        train_launches(device)
        return
    if args.ab_gluon_train:
        args.only = ["ab_gluon_train"]
        result["rows"] += ab_gluon_train(device, [1 << 10, 1 << 12, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18])
    if args.ab_tiles:
        args.only = ["ab_tiles"]
        result["rows"] += ab_tiles(device, args.repeats)
    if args.seed_spread:
        args.only = ["seed_spread"]
        result["rows"] += seed_spread(device)
    if "mlp" in args.only:
        result["rows"] += bench_mlp(device, decode_sizes, args.repeats, peak)
    if "neural_material" in args.only:
        result["rows"] += bench_neural_material(device, decode_sizes, args.repeats, peak)
    if "ntc" in args.only:
        result["rows"] += bench_ntc(device, args.repeats, peak)
    if "train" in args.only:
        result["rows"] += bench_train(device, train_sizes, args.steps, peak)
    if "train_bf16" in args.only:
        result["rows"] += bench_train(device, train_sizes[2:], args.steps, peak, "bf16")
    if "train_material" in args.only:
        result["rows"] += bench_train_material(device, train_sizes[1:], args.steps, peak)
    if args.out:
        if args.out.is_file():  # a partial run (--only) replaces its own rows and keeps the others
            ran = {row["row"] for row in result["rows"]}
            result["rows"] = [row for row in json.loads(args.out.read_text())["rows"] if row["row"] not in ran] + result["rows"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
