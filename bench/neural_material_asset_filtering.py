"""Latent filtering on an asset seen from afar: a baked glTF material with and without it.

Renders the asset with its neural material (``neuralbake material bake MODEL.gltf``) from a few
distances, lit by the sun only (so only the texture aliases), one sample at each pixel centre:
with level-0 latents and with the latents filtered over each pixel's footprint (the G-buffer's ray
differentials, ``NeuralMaterial.latent_footprint``), against the supersampled render (``--ss`` x
``--ss`` samples per pixel, level 0, box-averaged: the pixel's average of the decoded material).
Errors are RMSE and PSNR of the tone-mapped images over the pixels the baked material covers entirely.
Also written: ``asset_filtering.png`` (per distance: reference | level 0 | filtered | errors x4) and
``asset_filtering.json``.

    python bench/neural_material_asset_filtering.py MODEL.gltf BUNDLE --out DIR [--size 128 --ss 8]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from neuralbake.bakes.neural_material.asset import load_asset_bundle
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize
from neuralbake.render.camera import bounds_framing, look_at
from neuralbake.render.gbuffer import render_gbuffer
from neuralbake.render.layer_shading import SUN, vertex_frame
from neuralbake.render.pictures import comparison_row, panel_grid
from neuralbake.render.tonemap import tone_map
from timing import Stopwatch


def _sun_image(rs, camera, size: int, neural, filtering: bool, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """HDR ``[size, size, 3]`` of the asset's material ``index`` under the sun with ``neural`` (the
    asset's other materials black), and that material's coverage ``[size, size]``."""
    g = render_gbuffer(rs, camera, size, size)
    frame = vertex_frame(g)
    sun = normalize(torch.tensor(SUN[0], dtype=g.view.dtype, device=g.view.device).reshape(1, 3)).expand_as(g.view)
    neural.filtering = filtering
    with torch.no_grad():
        layer = neural(g.uv[0], None, footprint=(g.uv_dx[0], g.uv_dy[0]))
        mine = (g.material_id == index).to(g.view.dtype)[:, None]
        value = layer.eval(frame.local(sun), frame.local(g.view)) * SUN[1] * ((sun * frame.geometric).sum(-1) > 0).to(g.view.dtype)[:, None]
    return g.image(value * mine, 0.0), g.image(mine, 0.0)[..., 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("asset", type=Path)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--ss", type=int, default=8, help="supersampling of the reference per axis")
    parser.add_argument("--distances", type=float, nargs="+", default=[1.0, 2.0, 4.0], help="camera distances in framing radii")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    material, neural = load_asset_bundle(args.asset, args.bundle, device=device)
    rs = material.render_scene
    target, framing = bounds_framing(rs.positions, 40.0)
    direction = torch.nn.functional.normalize(torch.tensor([-0.35, 0.45, 0.82]), dim=0)  # on the sun's side
    rows, results = [], {"asset": args.asset.name, "bundle": str(args.bundle), "size": args.size, "supersampling": args.ss,
                         "latent_side": int(neural.latents[0].shape[0]), "distances": []}
    watch = Stopwatch().start()
    for distance in args.distances:
        radius = framing * distance
        camera = look_at(tuple(c + radius * float(d) for c, d in zip(target, direction, strict=True)), target, fov_y_deg=40.0)
        big, big_mask = _sun_image(rs, camera, args.size * args.ss, neural, False, material.index)
        shape = (args.size, args.ss, args.size, args.ss)
        reference = big.reshape(*shape, 3).mean(dim=(1, 3))
        full = big_mask.reshape(*shape).amin(dim=(1, 3)) > 0  # pixels the asset covers entirely
        entry: dict = {"distance_radii": distance, "covered_pixels": int(full.sum())}
        ref_ldr = tone_map(reference)
        images = {}
        for name, filtering in (("level0", False), ("filtered", True)):
            hdr, _ = _sun_image(rs, camera, args.size, neural, filtering, material.index)
            ldr = tone_map(hdr)
            images[name] = ldr
            mse = float(((ldr - ref_ldr)[full] ** 2).mean()) if bool(full.any()) else float("nan")
            entry[name] = {"rmse": math.sqrt(mse), "psnr_db": 10.0 * math.log10(1.0 / max(mse, 1e-12))}
        results["distances"].append(entry)
        print(distance, entry, flush=True)
        row = comparison_row(ref_ldr, images["level0"], error="none")[0] + [images["filtered"].cpu().numpy()]
        errors = [((images[k] - ref_ldr).abs() * 4).clamp(0, 1) * full[..., None] for k in ("level0", "filtered")]
        rows.append([*row, *[e.cpu().numpy() for e in errors]])
    neural.filtering = False
    results["seconds"] = round(watch.stop(), 2)
    results["device"] = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    save_png(args.out / "asset_filtering.png", panel_grid(rows, gap=2))
    (args.out / "asset_filtering.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
