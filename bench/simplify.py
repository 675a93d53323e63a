"""Benchmark: appearance-driven simplification against QEM alone, at equal triangle counts.

Runs ``neuralbake simplify`` (the bake, through its Python API) on an asset at several ratios and
prints, as JSON per ratio: held-out PSNR and FLIP of QEM decimation alone and of the fitted LOD
(same budget, same views and light), the difference, time per shape step, total time and peak GPU
memory. Sizes are the device defaults unless given.

    python bench/simplify.py ../shared/assets/DamagedHelmet/DamagedHelmet.gltf --ratios 0.1 0.25
    python bench/simplify.py ASSET --ratios 0.1 --render-size 512 --views 48 --epochs 30 --out out/bench_simplify
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from neuralbake.bakes.simplify import SimplifyConfig, simplify_lod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("asset", type=Path)
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.1, 0.25])
    parser.add_argument("--render-size", type=int, default=None)
    parser.add_argument("--views", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--lod", type=Path, default=None, help="Fit this already decimated LOD instead of decimating (one ratio).")
    parser.add_argument("--out", type=Path, default=None, help="Keep each run's output folder under this folder.")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-simplify-"))
    for ratio in args.ratios:
        config = SimplifyConfig(asset=str(args.asset), ratio=ratio, render_size=args.render_size, views=args.views, epochs=args.epochs, device=args.device,
                                lod=None if args.lod is None else str(args.lod))
        report = simplify_lod(config, root / f"ratio_{ratio:g}", progress=False)
        print(json.dumps({
            "asset": args.asset.name, "ratio": ratio, "device": report["device"]["name"],
            "triangles": f"{report['triangles_original']} -> {report['triangles']}",
            "render_size": report["render_size"], "views": report["views"], "epochs": report["epochs"],
            "start": report["start"], "start_psnr_db": round(report["start_psnr_db"], 3), "psnr_db": round(report["psnr_db"], 3),
            "gain_db": round(report["psnr_db"] - report["start_psnr_db"], 3),
            "start_flip": round(report["start_flip"], 4), "flip": round(report["flip"], 4),
            "backtracks": report["backtracks"], "ms_per_step": round(report["ms_per_step"], 1), "seconds": round(report["seconds"], 1),
            "peak_gpu_memory_mib": None if report["peak_gpu_memory_bytes"] is None else round(report["peak_gpu_memory_bytes"] / 2**20),
        }), flush=True)


if __name__ == "__main__":
    main()
