"""PSNR versus training time of the neural texture bake, with peak memory, on one device.

Trains each requested network on a real image (by default DamagedHelmet's base colour, downscaled
to 512x512) for a fixed time budget, evaluates PSNR over the whole image at regular steps, and
prints, per network: the PSNR reached, the training seconds needed to reach the target PSNR
(default 30 dB, interpolated between evaluations), samples/s, and peak memory (GPU allocator peak
on CUDA, process peak RSS on the CPU). Ratios against the first network are printed from the same
run. Curves go to ``--out`` as JSON and a PNG.

    python bench/neural_texture.py --device cuda --seconds 60
    python bench/neural_texture.py --device cpu --seconds 120 --networks 4x64f3b1024

A network spec is ``LAYERSxHIDDEN`` + ``fFREQUENCIES`` + ``bBATCH`` (+ optional ``pPRECISION``),
e.g. ``4x64f3b1024`` is the RTXNS default (4 hidden layers of 64, 2 x 6 = 12 encoded inputs,
32 x 32 samples per step, fp16).
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes.neural_texture import NeuralTextureConfig, bake_neural_texture  # noqa: E402
from neuralbake.core.device import describe_device, resolve_device  # noqa: E402
from neuralbake.io.files import atomic_path, atomic_write_json  # noqa: E402
from neuralbake.io.images import load_image, resize_image, save_png  # noqa: E402
from timing import Stopwatch  # noqa: E402

DEFAULT_IMAGE = ROOT.parent / "shared" / "assets" / "DamagedHelmet" / "Default_albedo.jpg"
SPEC = re.compile(r"^(\d+)x(\d+)f(\d+)b(\d+)(?:p(fp16|bf16|fp32))?$")


def parse_spec(text: str) -> dict:
    match = SPEC.match(text)
    if not match:
        raise SystemExit(f"bad network spec {text!r}; expected e.g. 4x64f3b1024 or 4x64f3b1024pfp32")
    layers, hidden, freq, batch, precision = match.groups()
    return {"layers": int(layers), "hidden": int(hidden), "frequencies": int(freq), "batch": int(batch), "precision": precision or "fp16"}


def make_config(image: Path, spec: dict, device: str, steps: int, lr: float, eval_every: int) -> NeuralTextureConfig:
    config = NeuralTextureConfig(image=str(image), batch_size=spec["batch"], device=device)
    config.network.layers, config.network.hidden, config.network.frequencies = spec["layers"], spec["hidden"], spec["frequencies"]
    config.train.steps, config.train.learning_rate, config.train.precision = steps, lr, spec["precision"]
    config.train.eval_every, config.train.checkpoint_every, config.train.log_every = eval_every, 0, max(eval_every // 4, 1)
    return config


def seconds_to_reach(curve: list[list[float]], target: float) -> float | None:
    for (t0, p0), (t1, p1) in zip(curve, curve[1:]):
        if p1 >= target:
            return t1 if p1 == p0 else t0 + (t1 - t0) * (target - p0) / (p1 - p0)
    return None


def peak_memory_mib(device: torch.device) -> float:
    """GPU: the allocator's peak (the bench subtracts what was held before the run); CPU: peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(args: argparse.Namespace) -> list[dict]:
    device = resolve_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    image, _ = load_image(args.image)
    prepared = out / f"reference_{args.size}.png"
    save_png(prepared, resize_image(image, args.size, args.size))
    # Warm up (CUDA context, kernels, allocator) so the first network's calibration is not skewed.
    bake_neural_texture(make_config(prepared, parse_spec(args.networks[0]), args.device, 30, args.lr, 0), out / "probe", progress=False)
    rows = []
    for text in args.networks:
        spec = parse_spec(text)
        # Calibrate: the difference of two short runs gives the steady time per step (start-up
        # and CUDA-graph capture cancel out); size the real run to the time budget with it.
        probes = [bake_neural_texture(make_config(prepared, spec, args.device, n, args.lr, 0), out / "probe", progress=False) for n in (50, 550)]
        seconds_per_step = max(probes[1]["seconds"] - probes[0]["seconds"], 1e-6) / 500
        steps = max(200, int(args.seconds / seconds_per_step))
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        watch = Stopwatch().start()
        report = bake_neural_texture(
            make_config(prepared, spec, args.device, steps, args.lr, max(steps // args.evals, 1)), out / text, progress=not args.quiet
        )
        row = {
            "network": text,
            **spec,
            "params": report["params"],
            "steps": report["steps"],
            "train_seconds": report["seconds"],
            "wall_seconds": round(watch.stop(), 2),
            "samples_per_second": report["samples_per_second"],
            "psnr_db": round(report["psnr_db"], 3),
            "psnr_lowp_db": round(report[f"psnr_{spec['precision']}_db"], 3),
            "seconds_to_target": seconds_to_reach(report["psnr_curve"], args.target),
            "peak_memory_mib": round(peak_memory_mib(device) - baseline / 2**20, 1),
            "psnr_curve": report["psnr_curve"],
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "psnr_curve"}), flush=True)
    summary = {"device": describe_device(device), "image": str(args.image), "size": args.size, "target_db": args.target,
               "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "rows": rows}
    atomic_write_json(out / f"neural_texture_{device.type}.json", summary)
    plot(rows, out / f"neural_texture_{device.type}.png", summary)
    return rows


def plot(rows: list[dict], path: Path, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5), dpi=110)
    for row in rows:
        curve = row["psnr_curve"]
        axis.plot([c[0] for c in curve], [c[1] for c in curve], label=f"{row['network']} ({row['params']} params)")
    axis.axhline(summary["target_db"], color="grey", ls="--", lw=0.8)
    axis.set_xlabel("training seconds")
    axis.set_ylabel("PSNR (dB)")
    axis.set_title(f"neural texture, {summary['size']}² helmet albedo, {summary['device']['name']}")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", type=Path, default=DEFAULT_IMAGE)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float, default=60.0, help="training-time budget per network")
    parser.add_argument("--networks", nargs="+", default=["4x64f3b1024", "4x64f6b1024", "4x64f6b16384", "4x128f8b16384", "5x256f10b16384"])
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--target", type=float, default=30.0)
    parser.add_argument("--evals", type=int, default=40, help="PSNR evaluations per run")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if not Path(args.image).is_file():
        raise SystemExit(f"{args.image}: not found; pass --image PATH (the default is the team's shared DamagedHelmet asset)")
    rows = run(args)
    base = rows[0]
    print(f"\n{'network':>18} {'params':>8} {'steps':>7} {'PSNR dB':>8} {'lowp dB':>8} {'t->' + str(args.target) + 'dB':>9} {'samples/s':>11} {'x first':>8} {'peak MiB':>9}")
    for row in rows:
        reach = "never" if row["seconds_to_target"] is None else f"{row['seconds_to_target']:.1f}s"
        ratio = row["samples_per_second"] / base["samples_per_second"]
        print(f"{row['network']:>18} {row['params']:>8} {row['steps']:>7} {row['psnr_db']:>8.2f} {row['psnr_lowp_db']:>8.2f} {reach:>9} {row['samples_per_second']:>11.0f} {ratio:>8.2f} {row['peak_memory_mib']:>9.0f}")


if __name__ == "__main__":
    main()
