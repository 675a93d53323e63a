"""Importance sampling of a neural material at equal samples per pixel: cosine against the sampling head.

Renders a baked neural material that has a sampling head (``neuralbake material bake ...
--sampling-steps N``) on the preview scenes under the environment light (light samples from the
environment map and BSDF samples, combined by MIS: what a path tracer does at one bounce) three
ways at each of ``--spp`` samples per pixel:

- the neural material with cosine BSDF samples (what it had before the head);
- the neural material with its sampling head (``NeuralMaterialLayer.sample`` / ``pdf``);
- the reference material (the bundle's source, a ``.json`` / ``.mtlx`` layered material) with its own
  sampler, against its own converged image: how far the head is from the analytic sampling.

Each neural render is compared with a converged render of the neural material (``--reference-spp``,
another seed), so the error is Monte Carlo noise only: RMSE (the root of the mean squared error of
``--repeats`` renders with different seeds: rare bright samples, which cosine sampling of a sharp
highlight gives, dominate a single render's error) and PSNR over the pixels the objects cover entirely, and the ratio of the cosine sampling's RMSE to the head's. (The preview renderer
draws scrambled Sobol samples, so errors need not fall as 1/sqrt(spp); rows at several spp show how
each converges.) Writes ``sampling.json`` and ``sampling.png``
(per scene: converged | cosine | head at the smallest spp).

    python bench/neural_material_sampling.py out/copper --out out/sampling --size 128
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
from neuralbake.io.bundle import read_bundle
from neuralbake.io.images import save_png
from neuralbake.material.loader import load_material
from neuralbake.render.pictures import panel_grid
from neuralbake.render.preview import SCENES, render_preview
from timing import Stopwatch


def _mse(images: dict, reference: dict, coverage: dict) -> float:
    """Mean squared error over every scene's fully covered pixels."""
    diff = torch.cat([(images[s] - reference[s])[coverage[s] > 0.999].flatten() for s in SCENES])
    return float((diff**2).mean())


def _psnr(rmse: float, reference: dict, coverage: dict) -> float:
    """PSNR with the converged image's brightest covered pixel as the peak."""
    peak = max(float(reference[s][coverage[s] > 0.999].max()) for s in SCENES)
    return 20 * math.log10(peak / max(rmse, 1e-12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle", type=Path, help="a `material bake ... --sampling-steps N` folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--spp", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--reference-spp", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=4, help="renders (seeds) per row whose squared errors are averaged")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    neural = load_neural_material(args.bundle, device=device)
    if neural.sampler is None:
        sys.exit(f"{args.bundle}: this neural material has no sampling head; bake it with --sampling-steps 500 (or more).")
    cosine = neural.to(torch.float32)
    cosine.sampler = None
    source = Path(read_bundle(args.bundle).manifest["material"]["source"])
    reference_material = load_material(source, device=device) if source.suffix in (".json", ".mtlx") and source.is_file() else None
    options = {"size": args.size, "light": "environment", "device": device}
    watch = Stopwatch().start()
    converged = render_preview(neural, spp=args.reference_spp, seed=1000, **options)
    coverage = converged.coverage
    result = {"bundle": str(args.bundle), "size": args.size, "reference_spp": args.reference_spp, "repeats": args.repeats, "device": str(device),
              "light": "environment (light + BSDF samples, MIS)", "scenes": list(SCENES), "rows": []}
    own_converged = render_preview(reference_material, spp=args.reference_spp, seed=1000, **options) if reference_material is not None else None
    shown = {}
    for spp in args.spp:
        row = {"spp": spp}
        for name, material, target in (("cosine", cosine, converged), ("head", neural, converged), ("reference_own", reference_material, own_converged)):
            if material is None:
                continue
            mse = []
            for repeat in range(args.repeats):
                images = render_preview(material, spp=spp, seed=7 + repeat, **options)
                mse.append(_mse(images, target, coverage))
                if spp == min(args.spp) and repeat == 0:
                    shown[name] = images
            rmse = math.sqrt(sum(mse) / len(mse))
            row[name] = {"rmse": rmse, "psnr_db": _psnr(rmse, target, coverage), "rmse_per_seed": [math.sqrt(v) for v in mse]}
        row["rmse_cosine_over_head"] = round(row["cosine"]["rmse"] / row["head"]["rmse"], 2)
        result["rows"].append(row)
        print(f"spp {spp:4d}  cosine {row['cosine']['psnr_db']:6.2f} dB  head {row['head']['psnr_db']:6.2f} dB"
              + (f"  reference own {row['reference_own']['psnr_db']:6.2f} dB" if "reference_own" in row else "")
              + f"  (RMSE cosine / head {row['rmse_cosine_over_head']})", flush=True)
    result["seconds"] = round(watch.stop(), 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sampling.json").write_text(json.dumps(result, indent=2))
    rows = []
    for scene in SCENES:  # one row per scene: converged | cosine | head, at the smallest spp
        inside = coverage[scene] > 0.999
        exposure = 0.8 / max(float(torch.quantile(converged[scene][inside].flatten(), 0.95)), 1e-6)
        cpu = lambda t, exposure=exposure: (t.detach() * exposure).clamp(0, 1).cpu().numpy()
        rows.append([cpu(converged[scene]), cpu(shown["cosine"][scene]), cpu(shown["head"][scene])])
    save_png(args.out / "sampling.png", panel_grid(rows))
    print(f"-> {args.out / 'sampling.json'}, {args.out / 'sampling.png'} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
