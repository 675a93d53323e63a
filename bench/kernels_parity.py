"""GPU parity of the fused Triton kernels against the PyTorch reference: run it whenever the kernels change.

The unit tests (tests/kernels) check the kernel code in Triton's CPU interpreter; this checks what
the compiler makes of it on the GPU, at the bench's shapes and at awkward ones (row counts that
are not a multiple of the tile, non-power-of-two widths, wide layers). Tolerances as in the tests:
fp32 1e-5, fp16 2e-2, relative to the output's scale (gradients: to each gradient's scale).
Exits non-zero when any check fails.

    python bench/kernels_parity.py
    python bench/kernels_parity.py --fp16-only     # the shipped precision; fp32 kernels compile slowly
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from kernels import _material, _ntc_container

from neuralbake.bakes.neural_material.model import NeuralMaterial, relative_l1
from neuralbake.bakes.ntc.decode import decode_texels
from neuralbake.kernels.fused import FusedForwardBackward, FusedNTC, PackedMLP, mlp_forward
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.trainer import AutogradForwardBackward, Batch

FAILURES: list[str] = []


def check(name: str, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    scale = max(1e-6 if actual.dim() else 1.0, float(expected.detach().float().abs().max()))
    error = float((actual.float() - expected.detach().float()).abs().max()) / scale
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    ok = error <= tolerance
    print(f"{'ok  ' if ok else 'FAIL'} {name:60s} relative error {error:.2e} (tolerance {tolerance:.0e})", flush=True)
    if not ok:
        FAILURES.append(name)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("bench/kernels_parity.py checks the compiled kernels; run it on a machine with an NVIDIA GPU.")
    device = torch.device("cuda")
    torch.manual_seed(0)
    dtypes = (torch.float16,) if "--fp16-only" in sys.argv[1:] else (torch.float32, torch.float16)
    for dtype in dtypes:
        for hidden, layers, act, out_act in ((64, 3, "relu", "none"), (48, 2, "leaky_relu", "sigmoid"), (128, 2, "tanh", "none"), (16, 1, "clamped_gelu", "exp")):
            mlp = MLP(MLPConfig(inputs=12, hidden=hidden, layers=layers, outputs=5, hidden_activation=act, output_activation=out_act)).to(device).to(dtype)
            for n in (1000, 1 << 18):
                x = torch.rand(n, 12, device=device).to(dtype)
                check(f"mlp {dtype} 12-{hidden}x{layers}-5 {act}/{out_act} n={n}", mlp_forward(PackedMLP.from_mlp(mlp), x), mlp(x), dtype)
        net = CoordinateNetwork(CoordinateNetworkConfig(outputs=3)).to(device).to(dtype)
        uv = torch.rand(77777, 2, device=device)
        check(f"coordinate network {dtype}", mlp_forward(PackedMLP.from_mlp(net.mlp), uv, frequencies=3), net.mlp(net.encoding(uv).to(dtype)), dtype)

    material = _material(device)
    for directions in (("wi", "wo"), ("half", "wo", "wi")):
        decoder = MLP(MLPConfig(inputs=8 + 3 * len(directions), hidden=64, layers=3, outputs=3, hidden_activation="relu", output_activation="none"))
        neural = NeuralMaterial(material.latents, decoder.to(device).half(), directions)
        fused = NeuralMaterial(material.latents, neural.decoder, directions)
        fused.kernels = "triton"
        for n in (333, 1 << 20):
            uv = torch.rand(n, 2, device=device) * 4 - 2
            wi = torch.nn.functional.normalize(torch.randn(n, 3, device=device), dim=1)
            wo = torch.nn.functional.normalize(torch.randn(n, 3, device=device), dim=1)
            lod = torch.rand(n, device=device) * 12 - 1
            check(f"neural material {directions} bilinear n={n}", fused.decode(uv, wi, wo), neural.decode(uv, wi, wo), torch.float16)
            check(f"neural material {directions} trilinear n={n}", fused.decode(uv, wi, wo, lod), neural.decode(uv, wi, wo, lod), torch.float16)

    container = _ntc_container(device)
    for dtype in (torch.float16,):
        fused_ntc = FusedNTC(container, dtype)
        for level_index in (0, 1, 5, 11):
            width, height = container.layout.level_sizes[level_index]
            n = min(width * height, 1 << 18)
            x = torch.randint(0, width, (n,), device=device)
            y = torch.randint(0, height, (n,), device=device)
            level = torch.full_like(x, level_index)
            check(f"ntc {dtype} random access level {level_index}", fused_ntc.texels(level, x, y), decode_texels(container, level, x, y), dtype)
        width, height = container.layout.level_sizes[3]
        yy, xx = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij")
        expected = decode_texels(container, torch.full((width * height,), 3, device=device), xx.reshape(-1), yy.reshape(-1)).reshape(height, width, -1)
        check(f"ntc {dtype} whole level 3", fused_ntc.level(3), expected, dtype)
    # int8 arithmetic against its PyTorch arithmetic (the same integer sums; a rare one-step rounding difference allowed,
    # hence the fp16 tolerance)
    from neuralbake.bakes.ntc.int8 import calibrate_int8, decode_texels_int8

    calibration = calibrate_int8(container)
    fused_int8 = FusedNTC(container, torch.int8, calibration)
    for level_index in (0, 5):
        width, height = container.layout.level_sizes[level_index]
        n = min(width * height, 1 << 18)
        x = torch.randint(0, width, (n,), device=device)
        y = torch.randint(0, height, (n,), device=device)
        level = torch.full_like(x, level_index)
        check(f"ntc int8 random access level {level_index}", fused_int8.texels(level, x, y), decode_texels_int8(container, calibration, level, x, y), torch.float16)

    # FusedMLP: an MLP's forward and backward inside autograd (the neural-material bake's encoder and decoder)
    for dtype in reversed(dtypes):
        for inputs, hidden, layers, outputs in ((24, 64, 2, 8), (17, 64, 3, 3)):
            reference = MLP(MLPConfig(inputs=inputs, hidden=hidden, layers=layers, outputs=outputs, hidden_activation="relu", output_activation="none"))
            reference = reference.to(device).to(dtype)
            fused = MLP(reference.config).to(device).to(dtype)
            fused.load_state_dict(reference.state_dict())
            fused.kernels = "triton"
            for n in (1000, 1 << 16):
                x = (torch.rand(n, inputs, device=device) * 2 - 1).to(dtype)
                upstream = torch.randn(n, outputs, device=device)
                results = []
                for model in (reference, fused):
                    rows = x.clone().requires_grad_()
                    y = model(rows)
                    (y.float() * upstream).sum().backward()
                    results.append((y, rows.grad, [p.grad.clone() for p in model.parameters()]))
                    model.zero_grad(set_to_none=True)
                (y_ref, dx_ref, g_ref), (y_fused, dx_fused, g_fused) = results
                name = f"fused mlp {dtype} {inputs}-{hidden}x{layers}-{outputs} n={n}"
                check(f"{name} values", y_fused, y_ref, dtype)
                check(f"{name} input gradient", dx_fused, dx_ref, dtype)
                worst = max(range(len(g_ref)), key=lambda i: float((g_fused[i].float() - g_ref[i].float()).abs().max() / g_ref[i].float().abs().max().clamp(min=1e-12)))
                check(f"{name} worst weight gradient", g_fused[worst], g_ref[worst], dtype)

    losses = {"mse": torch.nn.functional.mse_loss, "l1": torch.nn.functional.l1_loss, "relative_l1": relative_l1}
    for dtype in dtypes:
        for hidden, act, out_act, loss in ((64, "leaky_relu", "sigmoid", "mse"), (128, "relu", "none", "relative_l1"), (32, "tanh", "exp", "l1")):
            if True:
                model = CoordinateNetwork(CoordinateNetworkConfig(hidden=hidden, layers=4, outputs=3, hidden_activation=act, output_activation=out_act)).to(device)
                compute = CoordinateNetwork(model.config).to(device).to(dtype)
                compute.load_state_dict(model.state_dict())
                params = dict(compute.named_parameters())
                for n in (1000, 1 << 16):
                    batch = Batch(inputs=torch.rand(n, 2, device=device), targets=torch.rand(n, 3, device=device))
                    scale = 256.0 if dtype == torch.float16 else 1.0
                    ref_loss, ref_grads = AutogradForwardBackward(compute, losses[loss])(params, batch, scale)
                    fused_loss, grads = FusedForwardBackward(model, loss, dtype=dtype)(params, batch, torch.tensor(scale, device=device))
                    check(f"train {dtype} {hidden} {act}/{out_act} {loss} n={n} loss", fused_loss, ref_loss, dtype)
                    worst = max(range(len(grads)), key=lambda i: float((grads[i].float() - ref_grads[i].float()).abs().max() / ref_grads[i].float().abs().max().clamp(min=1e-12)))
                    check(f"train {dtype} {hidden} {act}/{out_act} {loss} n={n} worst gradient", grads[worst], ref_grads[worst], dtype)
    print(f"\n{len(FAILURES)} failed" if FAILURES else "\nall checks passed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
