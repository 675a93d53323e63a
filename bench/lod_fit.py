"""Benchmark: the LOD's appearance fitted alone against jointly with its shape (``fit --shape``).

Runs ``neuralbake fit --reference ORIGINAL`` on a simplified LOD twice, without and with ``shape``
(the bake, through its Python API; device defaults unless sizes are given), and prints one JSON line
each: held-out PSNR over the pixels the original or the LOD covers (the union: a LOD that misses
the original's silhouette is scored for it), over the LOD's hits, SSIM, ms per epoch, seconds, peak
GPU memory, and how far the vertices moved; then the shape fit's gain in dB and its time ratio.

    python bench/lod_fit.py ../shared/assets/DamagedHelmet/DamagedHelmet.gltf out/helmet_lod10/lod.glb --no-shadows
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from neuralbake.bakes.fit import FitConfig, fit_lod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("original", type=Path)
    parser.add_argument("lod", type=Path, help="A simplified version of the original (neuralbake simplify's lod.glb, or QEM alone with --epochs 0).")
    parser.add_argument("--render-size", type=int, default=None)
    parser.add_argument("--views", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--no-shadows", action="store_true", help="No shadow rays in the reference renders (without warp-lang).")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=None, help="Keep each run's output folder under this folder.")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-lod-fit-"))
    reports = {}
    for shape in (False, True):
        config = FitConfig(asset=str(args.lod), reference=str(args.original), shape=shape, render_size=args.render_size, views=args.views,
                           epochs=args.epochs, shadows=not args.no_shadows, device=args.device)
        report = reports[shape] = fit_lod(config, root / ("shape" if shape else "appearance"), progress=False)
        print(json.dumps({
            "lod": args.lod.name, "shape": shape, "device": report["device"]["name"], "triangles": report["triangles"],
            "render_size": report["render_size"], "views": report["views"], "epochs": report["epochs"],
            "start_psnr_union_db": round(report["initial_psnr_union_db"], 3), "psnr_union_db": round(report["psnr_union_db"], 3),
            "psnr_db": round(report["psnr_db"], 3), "ssim": round(report["ssim"], 4), "ms_per_epoch": round(report["ms_per_epoch"], 1),
            "seconds": round(report["seconds"], 1),
            "peak_gpu_memory_mib": None if report["peak_gpu_memory_bytes"] is None else round(report["peak_gpu_memory_bytes"] / 2**20),
            "mean_displacement": None if report.get("shape") is None else round(report["shape"]["mean_displacement"], 5),
        }), flush=True)
    print(json.dumps({
        "shape_gain_db": round(reports[True]["psnr_union_db"] - reports[False]["psnr_union_db"], 3),
        "shape_time_ratio": round(reports[True]["ms_per_epoch"] / reports[False]["ms_per_epoch"], 2),
    }), flush=True)


if __name__ == "__main__":
    main()
