"""What int8 arithmetic costs an NTC texture set: the fp32 decode against the int8 one, on a real container.

Decodes every mip level of an ``ntc compress`` folder twice, in fp32 (the dequantised int8
weights, what ``ntc decompress`` writes) and in int8 arithmetic (int8 activations x the container's
int8 weights, int32 sums; :mod:`neuralbake.bakes.ntc.int8`, activation steps from a calibration
decode), and scores both against the source maps (PSNR over mip 0 and over every level, per
channel group) and against each other. On a GPU the int8 decode runs the fused kernel
(``FusedNTC(container, torch.int8, int8_factors(container, calibration))``), elsewhere its PyTorch arithmetic.

    python bench/ntc_int8.py out/crate_ntc examples/crate/crate.gltf --out out/ntc_int8.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from neuralbake.bakes.ntc.container import open_container
from neuralbake.bakes.ntc.decode import decode_all_levels, set_quality
from neuralbake.bakes.ntc.int8 import CALIBRATION_QUANTILE, calibrate_int8, decode_texels_int8, int8_factors
from neuralbake.bakes.ntc.texture_set import load_texture_set
from timing import Stopwatch


def _int8_levels(container, calibration, device) -> list[np.ndarray]:
    fused = None
    if device.type == "cuda":
        from neuralbake.kernels.decoders import FusedNTC  # imports Triton, on CUDA machines only

        fused = FusedNTC(container, torch.int8, int8_factors(container, calibration))
    levels = []
    for index, (width, height) in enumerate(container.layout.level_sizes):
        if fused is not None:
            levels.append(fused.level(index).float().cpu().numpy())
            continue
        yy, xx = torch.meshgrid(torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij")
        level = torch.full((width * height,), index, device=device)
        levels.append(decode_texels_int8(container, calibration, level, xx.reshape(-1), yy.reshape(-1)).reshape(height, width, -1).cpu().numpy())
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="an `ntc compress` output folder")
    parser.add_argument("sources", nargs="+", help="the sources it was compressed from (images or a glTF)")
    parser.add_argument("--material", default="0", help="the glTF material, as for `ntc compress`")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quantile", type=float, default=CALIBRATION_QUANTILE, help="of each layer's input magnitudes that its step covers")
    args = parser.parse_args()
    device = torch.device(args.device)
    container = open_container(args.folder).to(device)
    layout = container.layout
    texture_set = load_texture_set(args.sources, material=args.material)
    if (texture_set.width, texture_set.height) != (layout.width, layout.height):
        texture_set = texture_set.resized(layout.width)
    reference = texture_set.mip_chain()
    watch = Stopwatch().start()
    fp32 = decode_all_levels(container)
    calibration = calibrate_int8(container, quantile=args.quantile)
    int8 = _int8_levels(container, calibration, device)
    result = {
        "folder": str(args.folder),
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "date": time.strftime("%Y-%m-%d"),
        "latent_shape": layout.shape.name,
        "decoder_widths": list(layout.layer_widths),
        "calibration": {"texels": calibration.texels, "quantile": args.quantile, "steps": list(calibration.steps)},
        "fp32_vs_source": set_quality(fp32, reference, layout.groups),
        "int8_vs_source": set_quality(int8, reference, layout.groups),
        "int8_vs_fp32": set_quality(int8, fp32, layout.groups),
        "int8_path": "triton kernel" if device.type == "cuda" else "pytorch arithmetic",
        "seconds": round(watch.stop(), 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for key in ("fp32_vs_source", "int8_vs_source", "int8_vs_fp32"):
        q = result[key]
        groups = ", ".join(f"{name} {g['mip0_db']}" for name, g in q["groups"].items())
        print(f"{key:15s} mip 0 {q['overall_db']} dB, every level {q['overall_all_mips_db']} dB ({groups})")


if __name__ == "__main__":
    main()
