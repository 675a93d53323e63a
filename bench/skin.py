"""Benchmark: skin weights fitted over the original's animation against the transferred ones.

Runs ``neuralbake skin LOD --reference ORIGINAL`` (the bake, through its Python API; device defaults
unless given) and prints one JSON line: the held-out animated vertex error (fraction of the
original's size) and the renders' PSNR, transferred against fitted, what pruning to 4 influences
cost, ms per step, seconds and peak GPU memory; ``--image-weights`` repeats it per image weight.

    neuralbake simplify ../shared/assets/BrainStem/BrainStem.glb --ratio 0.1 --out out/brainstem_lod10
    python bench/skin.py out/brainstem_lod10/lod.glb ../shared/assets/BrainStem/BrainStem.glb
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from neuralbake.bakes.skin import SkinConfig, skin_lod


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lod", type=Path)
    parser.add_argument("original", type=Path)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--image-weights", type=float, nargs="+", default=[0.1])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=None, help="Keep each run's output folder under this folder.")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-skin-"))
    for weight in args.image_weights:
        config = SkinConfig(lod=str(args.lod), reference=str(args.original), steps=args.steps, image_weight=weight, device=args.device)
        report = skin_lod(config, root / f"image_weight_{weight:g}", progress=False)
        print(json.dumps({
            "lod": args.lod.name, "device": report["device"]["name"], "vertices": report["vertices"], "steps": report["steps"], "image_weight": weight,
            "transferred_vertex_error_pct": round(100 * report["transferred_vertex_error"], 4), "vertex_error_pct": round(100 * report["vertex_error"], 4),
            "vertex_error_change": round(report["vertex_error"] / report["transferred_vertex_error"] - 1.0, 4),
            "transferred_psnr_db": round(report["transferred_psnr_db"], 3), "psnr_db": round(report["psnr_db"], 3),
            "pruning_cost_pct": round(100 * report["pruning_cost"], 5), "ms_per_step": round(report["ms_per_step"], 1), "seconds": round(report["seconds"], 1),
            "peak_gpu_memory_mib": None if report["peak_gpu_memory_bytes"] is None else round(report["peak_gpu_memory_bytes"] / 2**20),
        }), flush=True)


if __name__ == "__main__":
    main()
