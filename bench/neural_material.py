"""Neural material vs its reference: evaluation throughput on one device, and bake quality.

For each example material (or those given), bakes a neural material (or reuses a bake folder),
then times, on the same device and the same random (uv, wi, wo):

* reference: the layered material graph, ``material(uv, normal).eval(wi, wo)``;
* neural: the latent lookup (bilinear, mip 0) + decoder, ``NeuralMaterial.evaluate``, in fp16 on a
  GPU (as a shader would run it) and fp32 on the CPU (where PyTorch's fp16 matmuls are slow);

and prints samples/s of both and their ratio (the seed's goal: more than 10x), with the bake's
quality (tone-mapped PSNR and HDR FLIP of preview renders against the reference) and its bytes.
Times with device synchronisation after a warm-up, median of several repeats, all in one run.

    python bench/neural_material.py --device cpu --steps 300 --resolution 64
    python bench/neural_material.py --device cuda --compile --steps 10000 --batch-size 16384 --out docs/results/neural-material_h100_YYYY-MM-DD_COMMIT.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes.neural_material import NeuralMaterialConfig, bake_neural_material, load_neural_material  # noqa: E402
from neuralbake.core.device import describe_device, resolve_device  # noqa: E402
from neuralbake.errors import NeuralbakeError  # noqa: E402
from neuralbake.material.loader import load_material  # noqa: E402

import timing  # noqa: E402  (bench/timing.py)


def _directions(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    v = torch.randn(n, 3, generator=generator, device=device)
    v[:, 2] = v[:, 2].abs() + 0.05
    return torch.nn.functional.normalize(v, dim=1)


def _rate(run, batch: int, repeats: int, device: torch.device) -> float:
    with torch.no_grad():
        result = timing.measure(run, repeats=repeats, device=device)
    assert torch.isfinite(result.value).all()
    return result.rate(batch, best=False)


def measure(path: Path, bake_dir: Path, device: torch.device, batch: int, repeats: int, compile_neural: bool = False) -> dict:
    reference = load_material(path, device=device)
    neural = load_neural_material(bake_dir, device=device)
    if device.type == "cuda":
        neural = neural.to(torch.float16)
    generator = torch.Generator(device=device).manual_seed(0)
    uv = torch.rand(batch, 2, generator=generator, device=device)
    normal = torch.tensor([[0.0, 1.0, 0.0]], device=device).expand(batch, 3)
    wi, wo = _directions(batch, generator, device), _directions(batch, generator, device)
    ref_rate = _rate(lambda: reference(uv, normal).eval(wi, wo), batch, repeats, device)
    neural_rate = _rate(lambda: neural.evaluate(neural.latent_at(uv), wi, wo), batch, repeats, device)
    compiled_rate = None
    if compile_neural:
        fused = torch.compile(lambda uv, wi, wo: neural.evaluate(neural.latent_at(uv), wi, wo), dynamic=False)
        compiled_rate = _rate(lambda: fused(uv, wi, wo), batch, repeats, device)
    report = json.loads((bake_dir / "report.json").read_text())
    return {
        "material": path.name,
        "reference_samples_per_second": ref_rate,
        "neural_samples_per_second": neural_rate,
        "speedup": neural_rate / ref_rate,
        "neural_compiled_samples_per_second": compiled_rate,
        "speedup_compiled": None if compiled_rate is None else compiled_rate / ref_rate,
        "neural_precision": "fp16" if device.type == "cuda" else "fp32",
        "psnr_db": report["psnr_db"],
        "flip": report["flip"],
        "scenes": report["renders"]["scenes"],
        "train_seconds": report["seconds"],
        "steps": report["steps"],
        "bytes": report["bundle"]["bytes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("materials", nargs="*", type=Path)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--resolution", type=int, default=NeuralMaterialConfig.texture_size)
    parser.add_argument("--batch-size", type=int, default=4096, help="training batch")
    parser.add_argument("--batch", type=int, default=1 << 18, help="evaluation batch for the throughput measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("out/bench_neural_material"), help="bake folders (reused when present)")
    parser.add_argument("--compile", action="store_true", help="also time the neural path under torch.compile (fused kernels)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    device = resolve_device(args.device)
    paths = args.materials or sorted(p for p in (ROOT / "examples" / "materials").iterdir() if p.suffix in (".json", ".mtlx"))
    rows = []
    for path in paths:
        bake_dir = args.work / path.stem
        try:
            if not (bake_dir / "report.json").is_file():
                config = NeuralMaterialConfig(material=str(path), texture_size=args.resolution, batch_size=args.batch_size, device=str(device))
                config.train = dataclasses.replace(config.train, steps=args.steps, checkpoint_every=0)
                bake_neural_material(config, bake_dir, progress=False)
            row = measure(path, bake_dir, device, args.batch, args.repeats, args.compile)
        except NeuralbakeError as exc:
            print(f"{path.name}: skipped ({exc})")
            continue
        rows.append(row)
        views = json.loads((bake_dir / "report.json").read_text())["texture_views"]["psnr_per_view_db"]
        row["texture_views_db"] = views
        print(f"{path.name:28s} texture views (4 random pairs, then the mirror pair): {', '.join(f'{v:.1f}' for v in views)} dB", flush=True)
        print(
            f"{path.name:28s} reference {row['reference_samples_per_second'] / 1e6:9.3f} M/s  neural {row['neural_samples_per_second'] / 1e6:9.3f} M/s"
            f"  x{row['speedup']:6.1f}" + (f"  compiled {row['neural_compiled_samples_per_second'] / 1e6:9.3f} M/s x{row['speedup_compiled']:6.1f}" if args.compile else "") + f"   PSNR {row['psnr_db']:.2f} dB  FLIP {row['flip']:.3f}",
            flush=True,
        )
    name = describe_device(device)["name"]
    print(f"\n{'material':28s} {'ref M/s':>9s} {'neural M/s':>11s} {'speed-up':>9s} {'PSNR dB':>8s} {'FLIP':>6s}   ({name}, eval batch {args.batch})")
    for row in rows:
        print(f"{row['material']:28s} {row['reference_samples_per_second'] / 1e6:9.3f} {row['neural_samples_per_second'] / 1e6:11.3f} "
              f"{row['speedup']:9.1f} {row['psnr_db']:8.2f} {row['flip']:6.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"device": describe_device(device), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                                        "steps": args.steps, "resolution": args.resolution, "batch_size": args.batch_size,
                                        "eval_batch": args.batch, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
