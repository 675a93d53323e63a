"""The exported neural material shader on a real device: parity with PyTorch and throughput.

Exports a baked neural material (``neuralbake material export``'s code path), compiles the Slang
module with slangpy on the chosen device (``cuda`` on the lent GPU, ``cpu`` here), dispatches its
compute kernel over N random (uv, wi, wo) at mip 0, checks the result against the PyTorch neural
material on the same data (fp32 weights, fp16 latents: max abs error < 1e-4 expected) and times
the dispatches (device idle before and after each, median of several). For the ratio it also times
the reference material graph in PyTorch on the same points (CUDA when the shader device is cuda).

    python bench/neural_material_shader.py out/bench_neural_material/antique_copper_tray --device cpu --points 65536
    python bench/neural_material_shader.py BUNDLE --device cuda --points 4194304
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import slangpy
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes.neural_material import load_neural_material  # noqa: E402
from neuralbake.export.neural_material import export_neural_material_shader  # noqa: E402
from neuralbake.export.neural_material_codegen import POINT_FLOATS  # noqa: E402
from neuralbake.material.loader import load_material  # noqa: E402
from timing import measure  # noqa: E402


def _directions(n: int, generator: torch.Generator) -> torch.Tensor:
    v = torch.randn(n, 3, generator=generator)
    v[:, 2] = v[:, 2].abs() + 0.05
    return torch.nn.functional.normalize(v, dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--points", type=int, default=1 << 16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "fp16"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = slangpy.create_device(type=getattr(slangpy.DeviceType, args.device))
    torch_device = torch.device("cuda" if args.device == "cuda" else "cpu")
    rows = []
    for bundle in args.bundles:
        with tempfile.TemporaryDirectory() as tmp:
            written = export_neural_material_shader(bundle, tmp, precision=args.precision, latent_format="fp16")
            source = written.slang.read_text()
            weights, latents = written.weights.read_bytes(), written.latents.read_bytes()
        m = written.module
        module = device.load_module_from_source(f"nb_bench_{m}_{len(rows)}", source)
        kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(f"nb_{m}_kernel")]))
        generator = torch.Generator().manual_seed(0)
        n = args.points
        uv, wi, wo = torch.rand(n, 2, generator=generator), _directions(n, generator), _directions(n, generator)
        usage = slangpy.BufferUsage.shader_resource
        values = device.create_buffer(element_count=n * 3, struct_size=4, usage=slangpy.BufferUsage.unordered_access)
        bindings = {
            f"nb_{m}_weights": device.create_buffer(data=np.frombuffer(weights, dtype=np.uint8).copy(), usage=usage),
            f"nb_{m}_latents": device.create_buffer(data=np.frombuffer(latents, dtype=np.uint8).copy(), usage=usage),
            f"nb_{m}_points": device.create_buffer(data=torch.cat([uv, wi, wo], 1).numpy().astype(np.float32).reshape(-1), struct_size=4, usage=usage),
            f"nb_{m}_mips": device.create_buffer(data=np.zeros(n, dtype=np.uint32), struct_size=4, usage=usage),
            f"nb_{m}_values": values,
            f"nb_{m}_constants": {f"nb_{m}_point_count": n},
        }
        assert POINT_FLOATS == 8
        kernel.dispatch(thread_count=[n, 1, 1], vars=bindings)
        device.wait_for_idle()
        shader = torch.from_numpy(values.to_numpy().view(np.float32).reshape(n, 3).copy())
        neural = load_neural_material(bundle)
        check = min(n, 1 << 16)
        with torch.no_grad():
            expected = neural.evaluate(neural.latent_at(uv[:check]), wi[:check], wo[:check])
        error = float((shader[:check] - expected).abs().max())
        relative = float(((shader[:check] - expected).abs() / expected.abs().clamp(min=1.0)).max())
        shader_rate = measure(lambda: kernel.dispatch(thread_count=[n, 1, 1], vars=bindings), repeats=args.repeats, warmup=0, sync=device.wait_for_idle).rate(n, best=False)  # noqa: B023
        manifest = json.loads((bundle / "network.json").read_text())
        reference = load_material(manifest["material"]["source"], device=torch_device)
        normal = torch.tensor([[0.0, 1.0, 0.0]], device=torch_device).expand(n, 3)
        tuv, twi, two = uv.to(torch_device), wi.to(torch_device), wo.to(torch_device)
        with torch.no_grad():
            ref_rate = measure(lambda: reference(tuv, normal).eval(twi, two), repeats=max(2, args.repeats // 2), device=torch_device).rate(n, best=False)  # noqa: B023
        row = {"bundle": str(bundle), "module": m, "points": n, "max_abs_error_vs_pytorch": error, "max_error_relative_to_max_1_value": relative,
               "max_value": float(expected.abs().max()), "shader_samples_per_second": shader_rate,
               "reference_samples_per_second": ref_rate, "speedup": shader_rate / ref_rate, "precision": args.precision}
        rows.append(row)
        print(f"{m:24s} shader {shader_rate / 1e6:10.2f} M/s  reference (PyTorch graph) {ref_rate / 1e6:8.2f} M/s  x{row['speedup']:7.1f}"
              f"  max |shader - pytorch| {error:.2e} (relative {relative:.1e}, values up to {row['max_value']:.1f})", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        info = torch.cuda.get_device_name() if torch_device.type == "cuda" else "cpu"
        args.out.write_text(json.dumps({"slang_device": args.device, "device_name": info, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
