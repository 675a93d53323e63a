"""Benchmark: learned mipmaps vs box filtering vs Toksvig on the DamagedHelmet texture set.

Bakes the helmet's normal map with its base colour and glTF metallicRoughness map (roughness from
G, metallic from B), resampled to ``--size`` (default 512 on a CPU, 2048 on a GPU), and prints the
shaded error of every level on the held-out directions for box / Toksvig / learned, with the time
and device; the full report is written as JSON.

    python bench/mipmap.py                       # CPU: 512^2, GPU: 2048^2
    python bench/mipmap.py --size 128 --steps 200 --device cpu --json bench-mipmap.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from neuralbake.bakes.mipmap import METHODS, MipmapConfig, bake_mipmap
from neuralbake.core.device import resolve_device
from timing import Stopwatch

HELMET = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "DamagedHelmet"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, default=HELMET, help="folder holding Default_albedo/normal/metalRoughness.jpg")
    parser.add_argument("--size", type=int, default=None, help="map side (power of two); default 512 on CPU, 2048 on GPU")
    parser.add_argument("--steps", type=int, default=None, help="optimisation steps (default: the bake's)")
    parser.add_argument("--directions", type=int, default=None, help="(light, view) pairs per step (default: the bake's)")
    parser.add_argument("--held-out", type=int, default=None, help="held-out (light, view) pairs for the report")
    parser.add_argument("--init", choices=("box", "toksvig"), default=None, help="starting point of the learned texels")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--out", type=Path, default=None, help="keep the bake's outputs in this folder")
    parser.add_argument("--json", type=Path, default=Path("bench-mipmap.json"), help="where to write the report JSON")
    args = parser.parse_args(argv)

    maps = {name: args.assets / f"Default_{name}.jpg" for name in ("albedo", "normal", "metalRoughness")}
    missing = [str(path) for path in maps.values() if not path.is_file()]
    if missing:
        print(f"missing assets: {', '.join(missing)} (pass --assets)", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    config = MipmapConfig(
        base_color=str(maps["albedo"]),
        normal=str(maps["normal"]),
        roughness_map=str(maps["metalRoughness"]),
        texture_size=args.size or (2048 if device.type == "cuda" else 512),
        device=str(device),
    )
    for field, value in (("directions_per_step", args.directions), ("held_out_directions", args.held_out), ("init", args.init)):
        if value is not None:
            setattr(config, field, value)
    if args.steps is not None:
        config.train.steps = args.steps

    watch = Stopwatch().start()
    with tempfile.TemporaryDirectory() as scratch:
        report = bake_mipmap(config, args.out or scratch, progress=sys.stderr.isatty())
    wall = watch.stop()

    print(
        f"device {report['device']['name']} ({report['device']['type']}), {torch.get_num_threads()} threads; "
        f"{config.texture_size}^2 maps, {report['steps']} steps x {config.directions_per_step} directions, init {config.init}"
    )
    header = f"{'level':>5} {'side':>5} " + " ".join(f"{name:>13}" for name in METHODS)
    print("PSNR (dB) of tone-mapped shading on", report["held_out_directions"], "held-out directions")
    print(header)
    for row in report["per_level"]:
        print(f"{row['level']:>5} {row['side']:>5} " + " ".join(f"{row[name]['psnr_db']:>13.2f}" for name in METHODS))
    print(f"{'mean':>11} " + " ".join(f"{report[f'mean_psnr_{name}_db']:>13.2f}" for name in METHODS))
    print(f"{'mirror':>11} " + " ".join(f"{report[f'mean_mirror_psnr_{name}_db']:>13.2f}" for name in METHODS) + "  (exact mirror pairs)")
    print(
        f"training {report['seconds']:.1f} s, wall {wall:.1f} s; learned beats box / toksvig / toksvig_phong on every level: "
        f"{report['learned_beats_box_every_level']} / {report['learned_beats_toksvig_every_level']} / "
        f"{report['learned_beats_toksvig_phong_every_level']}"
    )
    args.json.write_text(
        json.dumps({"bench": "mipmap", "size": config.texture_size, "wall_seconds": round(wall, 3), "report": report}, indent=2) + "\n"
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
