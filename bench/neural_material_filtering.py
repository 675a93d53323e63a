"""Latent filtering of a baked neural material on a receding floor: aliasing with and without it.

Renders the preview renderer's ``plane`` scene (a floor seen at 12 degrees, the material repeating
every 2 units, about 31 repeats to the far edge; directional light, so only the texture aliases) with
the neural material three ways: level-0 latents (what renders did before), latents filtered
trilinearly at each sample's footprint (``NeuralMaterial.filtering``: the uv derivatives by offset
rays, ``lod_from_derivatives``, ``latent_filtered``), both at 1 and 4 samples per pixel, against a
supersampled render (``--reference-spp``, level 0: the pixel's average of the decoded material).
Errors are RMSE and PSNR over the pixels the floor covers entirely (its edges and the horizon
alias in every render alike). Also written: ``filtering.png`` (reference | level 0 | filtered at
1 spp, then the errors x4) and ``filtering.json``.

    python bench/neural_material_filtering.py out/copper --out out/filtering --size 128
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes.neural_material import load_neural_material
from neuralbake.io.images import save_png
from neuralbake.render.pictures import comparison_row, panel_grid
from neuralbake.render.preview import render_preview
from timing import Stopwatch


def _lod_map(material, size: int):
    """The level of detail at each pixel centre, grey from 0 (black) to the last level (white)."""
    from neuralbake.bakes.neural_material.model import lod_from_derivatives
    from neuralbake.render.preview import pixel_footprints

    geo, _, _ = pixel_footprints("plane", size)
    level0 = material.latents[0]
    lod = lod_from_derivatives(geo["duv_dx"], geo["duv_dy"], (int(level0.shape[1]), int(level0.shape[0])))
    grey = (lod.clamp(0, len(material.latents) - 1) / (len(material.latents) - 1)) * geo["hit"]
    return grey.reshape(size, size, 1).repeat(1, 1, 3).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--reference-spp", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    material = load_neural_material(args.bundle, device=device)
    options = {"size": args.size, "light": "directional", "scenes": ("plane",), "seed": 7, "device": device}
    watch = Stopwatch().start()
    rendered = render_preview(material, spp=args.reference_spp, **options)
    reference = rendered["plane"]
    inside = rendered.coverage["plane"] > 0.999
    result = {"bundle": str(args.bundle), "size": args.size, "reference_spp": args.reference_spp, "device": str(device), "rows": []}
    images = {}
    for spp in (1, 4):
        for filtering in (False, True):
            material.filtering = filtering
            image = render_preview(material, spp=spp, **options)["plane"]
            rmse = math.sqrt(float(((image - reference) ** 2)[inside].mean()))
            peak = float(reference[inside].max())
            row = {"spp": spp, "latents": "filtered" if filtering else "level 0", "rmse": rmse, "psnr_db": 20 * math.log10(peak / max(rmse, 1e-12))}
            result["rows"].append(row)
            images[(spp, filtering)] = image
            print(f"spp {spp:3d}  {row['latents']:9s}  RMSE {rmse:.5f}  PSNR {row['psnr_db']:6.2f} dB (peak {peak:.3f})", flush=True)
    material.filtering = False
    result["seconds"] = watch.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "filtering.json").write_text(json.dumps(result, indent=2))
    exposure = 0.8 / max(float(torch.quantile(reference[inside].flatten(), 0.99)), 1e-6)  # linear radiance, scaled to show
    cpu = lambda t: (t.detach() * exposure).clamp(0, 1).cpu().numpy()
    level0 = comparison_row(cpu(reference), cpu(images[(1, False)]), error="signed", error_gain=4.0)[0]
    filtered = comparison_row(cpu(reference), cpu(images[(1, True)]), error="signed", error_gain=4.0)[0]
    save_png(args.out / "filtering.png", panel_grid([[level0[0], level0[1], filtered[1]], [_lod_map(material, args.size), level0[2], filtered[2]]]))
    print(f"-> {args.out / 'filtering.png'}")


if __name__ == "__main__":
    main()
