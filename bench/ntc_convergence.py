"""NTC training length and model choices, measured as a user runs ``ntc compress``: one line per run.

Each run compresses one set at one rate through :func:`neuralbake.bakes.ntc.compress_texture_set`
(baselines off) with one training length and one variant, and prints one JSON line: the set, the
variant, the steps asked (``default`` is the device's default), the steps run per phase, the
measured bpp, the latent shape, mip-0 PSNR of the decoded file, training seconds, the report's
convergence verdict and the share of latents at the clamp bound. At the end a table: per set
and variant, PSNR by training length, and the default's distance to the longest run (the issue's
"within 0.3 dB of 100,000 steps").

A variant is ``NAME:FIELD=VALUE,...`` over :class:`~neuralbake.bakes.ntc.NTCConfig` fields
(dotted for ``train.*``; ``shape=HxFxB`` forces one latent shape, in this process only;
``hidden=64x64x64``). Each line also gives the stored int8 scale of every layer and its ratio to
the layer's RMS (what ``weight_clip`` bounds).

    python bench/ntc_convergence.py --device cuda --sets helmet crate --steps default 100000
    python bench/ntc_convergence.py --device cpu --sets crate --size 64 --steps 200 400 --bpp 8
    python bench/ntc_convergence.py --device cuda --sets helmet --steps 30000 \
        --variant f11b4:shape=4x11x4 --variant wide:hidden=128x128x64
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import neuralbake.bakes.ntc.layout as ntc_layout  # noqa: E402
from neuralbake.bakes.ntc import NTCConfig, compress_texture_set, open_container  # noqa: E402
from neuralbake.core.config import config_from_dict  # noqa: E402
from neuralbake.core.device import describe_device, resolve_device  # noqa: E402

SETS = {
    "crate": ROOT / "examples" / "crate" / "crate.gltf",
    "helmet": ROOT.parent / "shared" / "assets" / "DamagedHelmet" / "DamagedHelmet.gltf",
}


def parse_variant(text: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``NAME:FIELD=VALUE,...`` -> (name, nested config overrides, experiments: ``shape``)."""
    name, _, body = text.partition(":")
    overrides: dict[str, Any] = {}
    experiments: dict[str, Any] = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        if key == "shape":
            experiments["shape"] = ntc_layout.LatentShape(*(int(v) for v in value.split("x")))
            continue
        parsed: Any = [int(v) for v in value.split("x")] if key == "hidden" else json.loads(value)
        node = overrides
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parsed
    return name, overrides, experiments


def clamp_share(folder: Path) -> tuple[float, list[dict[str, float]]]:
    """Share of stored latent codes at either end of their range, and each layer's int8 scale against its RMS."""
    container = open_container(folder)
    latents = np.concatenate([container.latents_high.numpy().ravel(), container.latents_low.numpy().ravel()])
    layers = [
        {"scale": float(scale), "scale_over_rms": round(float(scale) / max(float(weight.pow(2).mean().sqrt()), 1e-12), 4)}
        for scale, weight in zip(container.scales, container.weights())
    ]
    return float(np.mean(np.abs(latents) > 0.999)), layers


def run_one(source: Path, bpp: float, steps: str, overrides: dict[str, Any], experiments: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    base = config_from_dict(NTCConfig, {"sources": [str(source)], "bpp": [bpp], "baselines": False, "device": args.device, **overrides})
    train = base.train if steps == "default" else replace(base.train, steps=int(steps))
    config = replace(base, train=train, texture_size=args.size if args.size else base.texture_size)
    saved = ntc_layout.LATENT_SHAPES
    if "shape" in experiments:  # this process only: the rate table holds the one shape
        ntc_layout.LATENT_SHAPES = (experiments["shape"],)
    out = Path(tempfile.mkdtemp(prefix="ntc_convergence_"))
    try:
        start = time.perf_counter()
        report = compress_texture_set(config, out, progress=False)
        wall = time.perf_counter() - start
        share, layers = clamp_share(out)
    finally:
        ntc_layout.LATENT_SHAPES = saved
        shutil.rmtree(out, ignore_errors=True)
    return {
        "steps_asked": steps,
        "steps": report["steps"],
        "stopped_by": report["training"]["stopped_by"],
        "bpp": round(report["bpp_measured"], 3),
        "shape": report["latent_shape"]["name"],
        "hidden": report["decoder"]["widths"][1:-1],
        "psnr_db": report["ntc"]["overall_db"],
        "groups_db": {name: g["mip0_db"] for name, g in report["ntc"]["groups"].items()},
        "train_seconds": report["train_seconds"],
        "wall_seconds": round(wall, 1),
        "convergence": {k: report["training"][k] for k in ("converged", "last_quarter_gain", "gain_per_1000_steps")},
        "clamped_share": round(share, 4),
        "weight_scales": layers,
        "psnr_curve": report["psnr_curve"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", default=["crate"], help="crate, helmet, or .gltf paths")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--bpp", type=float, default=4.0)
    parser.add_argument("--size", type=int, default=None, help="resample to this side (default: the device's)")
    parser.add_argument("--steps", nargs="+", default=["default"], help="main-phase steps per run; 'default' is the device's")
    parser.add_argument("--variant", action="append", default=[], help="NAME:FIELD=VALUE,... (repeatable); none: the defaults")
    parser.add_argument("--out", type=Path, default=None, help="also write every line to this JSON-lines file")
    args = parser.parse_args()
    device = resolve_device(args.device)
    args.device = str(device)
    print(f"# {describe_device(device)}", flush=True)
    variants = [parse_variant(v) for v in args.variant] or [("defaults", {}, {})]
    rows = []
    for set_name in args.sets:
        source = SETS.get(set_name, Path(set_name))
        for name, overrides, experiments in variants:
            for steps in args.steps:
                row = {"set": set_name, "variant": name, **run_one(source, args.bpp, steps, overrides, experiments, args)}
                rows.append(row)
                line = json.dumps(row)
                print(json.dumps({k: v for k, v in row.items() if k != "psnr_curve"}), flush=True)
                if args.out is not None:
                    with args.out.open("a") as handle:
                        handle.write(line + "\n")
    print("\n| set | variant | bpp | shape | " + " | ".join(f"{s} steps" for s in args.steps) + " | longest - first |")
    print("| --- | --- | ---: | --- | " + " | ".join("---:" for _ in args.steps) + " | ---: |")
    for set_name in args.sets:
        for name, _, _ in variants:
            mine = [r for r in rows if r["set"] == set_name and r["variant"] == name]
            cells = " | ".join(f"{r['psnr_db']:.2f} dB ({r['train_seconds']:.0f} s)" for r in mine)
            print(f"| {set_name} | {name} | {mine[0]['bpp']:.2f} | {mine[0]['shape']} | {cells} | {mine[-1]['psnr_db'] - mine[0]['psnr_db']:+.2f} dB |")


if __name__ == "__main__":
    main()
