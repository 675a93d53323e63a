"""Benchmark: PBR-to-LOD fitting of DamagedHelmet (``neuralbake fit``) at several render resolutions.

For each ``--render`` size and each ``--targets`` entry it runs a full fit and prints, as JSON:
ms per epoch (an epoch is one pass over the ``--views`` training views, one view per Adam step,
held-out evaluation excluded), peak GPU memory (``torch.cuda.max_memory_allocated`` over the whole
fit, reference renders included), epochs and seconds until the held-out PSNR is within 0.1 dB of
its final value, and held-out PSNR / SSIM in display space (ACES, sRGB).

    python bench/fit.py                                    # GPU: render 1024 and 2048, texture 1024
    python bench/fit.py --render 256 --texture 256 --views 8 --epochs 10 --device cpu

The seed's anchors (RTX 3090 / 2080 Ti): 30-150 ms per epoch at 2048^2, a 1024^2 single-texture
fit in about 2 minutes, 5-12 GB of GPU memory at 2048^2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from neuralbake.bakes.fit import FitConfig, fit_lod
from neuralbake.core.device import resolve_device

HELMET = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "DamagedHelmet" / "DamagedHelmet.gltf"
KEYS = (
    "psnr_db",
    "ssim",
    "initial_psnr_db",
    "psnr_frame_db",
    "ms_per_epoch",
    "epochs_to_converge",
    "seconds_to_converge",
    "train_seconds",
    "precompute_seconds",
    "seconds",
    "peak_gpu_memory_bytes",
    "bytes",
    "texture_size",
    "render_size",
    "views",
    "epochs",
    "vertices",
    "triangles",
)


def _dielectric_copy(model: Path, folder: Path) -> Path:
    """A copy of a .gltf whose materials have metallicFactor 0 (textures referenced from the original folder)."""
    if model.suffix.lower() != ".gltf":
        raise SystemExit("--dielectric needs a .gltf (JSON) asset")
    document = json.loads(model.read_text())
    for material in document.get("materials", []):
        material.setdefault("pbrMetallicRoughness", {})["metallicFactor"] = 0.0
    base = model.resolve().parent
    for entry in document.get("buffers", []) + document.get("images", []):
        if "uri" in entry and not entry["uri"].startswith("data:"):
            entry["uri"] = str(base / entry["uri"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / model.name
    path.write_text(json.dumps(document))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=HELMET, help="the PBR glTF (default: ../shared DamagedHelmet)")
    parser.add_argument("--render", type=int, nargs="+", default=None, help="render sides; default 1024 2048 on GPU, 256 on CPU")
    parser.add_argument("--texture", type=int, default=None, help="texture side; default 1024 on GPU, 256 on CPU")
    parser.add_argument("--views", type=int, default=16, help="training views (one epoch = one pass over them)")
    parser.add_argument("--held-out", type=int, default=4, help="held-out views for PSNR/SSIM")
    parser.add_argument("--epochs", type=int, default=None, help="epochs; default 100 on GPU, 10 on CPU")
    parser.add_argument("--lr", type=float, default=None, help="Adam learning rate (default: the bake's)")
    parser.add_argument("--env-samples", type=int, default=None, help="environment samples per pixel for the reference; default 32 GPU, 4 CPU")
    parser.add_argument("--no-environment", action="store_true", help="directional light only: a noise-free reference")
    parser.add_argument("--no-shadows", action="store_true", help="no directional-light shadow rays (when warp-lang is missing)")
    parser.add_argument("--quantizers", nargs="+", default=["ste"], help="ste and/or soft (with --quantize 8): one fit each")
    parser.add_argument(
        "--dielectric",
        action="store_true",
        help="also fit a copy of the asset with metallicFactor 0 (same textures): separates the metal's view-dependent reflections from the fit's own error",
    )
    parser.add_argument("--targets", nargs="+", default=["unlit", "vertex-color"], help="fit targets to run")
    parser.add_argument("--quantize", type=int, default=0, help="0 or 8")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--out", type=Path, default=None, help="keep every fit's outputs under this folder")
    parser.add_argument("--json", type=Path, default=Path("bench-fit.json"), help="where to write the results JSON")
    args = parser.parse_args(argv)
    if not args.model.is_file():
        print(f"error: {args.model} is absent (the team's shared assets); pass --model", file=sys.stderr)
        return 2
    gpu = resolve_device(args.device).type == "cuda"
    renders = args.render or ([1024, 2048] if gpu else [256])
    texture = args.texture or (1024 if gpu else 256)
    epochs = args.epochs or (100 if gpu else 10)
    env_samples = args.env_samples or (32 if gpu else 4)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        root = args.out or Path(scratch)
        assets = [("asset", args.model)]
        if args.dielectric:
            assets.append(("dielectric", _dielectric_copy(args.model, Path(scratch) / "dielectric")))
        runs = [(a, r, t, q) for a in assets for r in renders for t in args.targets for q in (args.quantizers if args.quantize else ["ste"])]
        for (variant, model), render, target, quantizer in runs:
            config = FitConfig(
                asset=str(model),
                target=target,
                texture_size=texture,
                render_size=render,
                views=args.views,
                held_out_views=args.held_out,
                epochs=epochs,
                environment_samples=env_samples,
                quantize=args.quantize,
                quantizer=quantizer,
                environment=not args.no_environment,
                shadows=not args.no_shadows,
                device=args.device,
            )
            if args.lr:
                config.train.learning_rate = args.lr
            name = f"{variant}_{target}_{render}" + (f"_q{args.quantize}{quantizer}" if args.quantize else "")
            report = fit_lod(config, root / name, progress=False)
            row = {"run": name, "variant": variant, "target": target, "quantize": args.quantize, "quantizer": quantizer if args.quantize else None, **{k: report.get(k) for k in KEYS}, "device": report["device"].get("name")}
            row["ms_per_step"] = report["ms_per_epoch"] / args.views  # one view per Adam step
            results.append(row)
            print(json.dumps(row), flush=True)
    args.json.write_text(json.dumps({"results": results, "epoch": "one pass over the training views, one view per Adam step"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
