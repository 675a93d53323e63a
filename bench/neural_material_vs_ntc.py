"""A glTF asset's neural material against neural texture compression (NTC) of its maps at the same bytes.

    python bench/neural_material_vs_ntc.py MODEL.gltf BUNDLE --out DIR [--size 128 --spp 32 --steps N]

``BUNDLE`` is a ``neuralbake material bake MODEL.gltf`` folder. This re-runs the bake's verdict
(:mod:`neuralbake.bakes.neural_material.verdict`) on the bundle with other render settings and
NTC trained as long as ``ntc compress`` trains by default (``--steps`` to choose): NTC compresses
the material's maps so that they ship in the bundle's bytes (8-bit latents, fp16 decoder and the
occlusion and emission maps it keeps as BC1/BC7), and the asset comparison
renders the reference, the neural material, the BC set and the NTC-decoded maps with the same
views, lights and samples. Writes ``ntc/`` (the compressed set), ``renders/asset_comparison.png``
(per view reference | neural | FLIP | BC set | FLIP | NTC | FLIP) and ``vs_ntc.json`` (the
verdict block, with the device and date).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from neuralbake.bakes.neural_material.asset import load_asset_bundle
from neuralbake.bakes.neural_material.asset_scoring import asset_comparison
from neuralbake.bakes.neural_material.verdict import map_texels, ntc_at_bytes, verdict_block
from neuralbake.bakes.ntc.bake import compress_texture_set
from neuralbake.bakes.ntc.config import CPU_STEPS, GPU_STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("asset", type=Path)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--spp", type=int, default=32)
    parser.add_argument("--steps", type=int, default=0, help="NTC's main-phase steps (0: ntc compress's default for the device, more than the bake's verdict trains)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    material, neural = load_asset_bundle(args.asset, args.bundle, device=device)
    report = json.loads((args.bundle / "report.json").read_text())
    parts = report["asset"]["bytes"]["neural"]
    ntc = ntc_at_bytes(
        material, int(report["asset"]["bytes"]["neural_total"]), args.out / "ntc", lambda c, folder: compress_texture_set(c, folder, progress=False),
        device=device, steps=args.steps or (GPU_STEPS if device.type == "cuda" else CPU_STEPS),
    )
    asset = asset_comparison(
        args.out, material, neural, size=args.size, spp=args.spp, latent_bytes=parts["latents_u8"], decoder_bytes=parts["decoder_fp16"],
        ntc_scene=ntc.scene,
    )
    result = {
        "asset": args.asset.name, "material": material.name, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "date": time.strftime("%Y-%m-%d"), "size": args.size, "spp": args.spp,
        "verdict": verdict_block(asset, ntc, texels=map_texels(material)),
        "asset_comparison": asset,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vs_ntc.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["verdict"], indent=2))


if __name__ == "__main__":
    main()
