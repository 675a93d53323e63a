"""Neural texture compression of DamagedHelmet's full material set: the rate-distortion curve against BCn.

Loads the helmet's glTF material (base colour RGB, normal XY, occlusion / roughness / metallic,
emissive RGB: 11 channels), resamples it to ``--size`` (default 256 on the CPU, 2048 on a GPU),
round-trips it through the BC1 set (BC1 colour + BC5 normal) and the BC7 set (BC7 + BC5), then
compresses it with NTC at every ``--bpp``. Every figure counts the full mip chain: bits per texel
of mip 0 = 8 * stored bytes of all levels / (width * height).

Printed and written to ``--out/rd.json`` (+ ``rd.png``, and one folder per rate with its report):
PSNR per rate (mip 0, all channels; per group; all mips), NTC's PSNR at the BC1 and BC7 sets'
rates, the rate at which NTC matches the BC7 set's PSNR, compression seconds and peak memory per
rate (GPU allocator peak on CUDA, process peak RSS on the CPU), and decode throughput: texels per
second and milliseconds for a 3840x2160 frame of mip-0 texels decoded by random access
(coordinates wrap over the texture), at the highest rate.

    python bench/ntc.py --device cpu --size 256
    python bench/ntc.py --device cuda --size 2048 --bpp 1 2 4 8 20 28 44
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from neuralbake.bakes.ntc import NTCConfig, compress_rate_distortion, decode_texels, open_container
from neuralbake.core.device import describe_device, resolve_device
from neuralbake.io.files import atomic_write_json
from timing import Stopwatch, measure

DEFAULT_GLTF = ROOT.parent / "shared" / "assets" / "DamagedHelmet" / "DamagedHelmet.gltf"
FRAME = (3840, 2160)


def decode_throughput(folder: Path, device: torch.device, repeats: int) -> dict:
    """Decode a 4K frame's worth of mip-0 texels (random access through decode_texels); best of ``repeats``."""
    container = open_container(folder).to(device)
    width, height = container.layout.width, container.layout.height
    frame_x = torch.arange(FRAME[0], device=device).repeat(FRAME[1]) % width
    frame_y = torch.arange(FRAME[1], device=device).repeat_interleave(FRAME[0]) % height
    level = torch.zeros_like(frame_x)
    best = measure(lambda: decode_texels(container, level, frame_x, frame_y, chunk=1 << 20), repeats=repeats, warmup=0, device=device).best
    texels = FRAME[0] * FRAME[1]
    return {"frame": list(FRAME), "texels": texels, "seconds": round(best, 4), "ms_per_frame": round(best * 1000, 2), "texels_per_second": round(texels / best)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gltf", type=Path, default=DEFAULT_GLTF)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--size", type=int, default=None, help="larger side after resampling (default 256 on CPU, 2048 on GPU)")
    parser.add_argument("--bpp", type=float, nargs="+", default=None, help="NTC rates (default 2 4 8 20 at 256, 1 2 4 8 20 larger)")
    parser.add_argument("--steps", type=int, default=None, help="main-phase steps (default: the bake's for the device)")
    parser.add_argument("--finetune-steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None, help="default: the bake's for the device")
    parser.add_argument("--lr", type=float, default=None, help="default: the bake's for the device")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--hidden", type=int, nargs="+", default=None, help="decoder hidden widths (default the bake's 64 48 32)")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats of the 4K decode")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ntc")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()

    if not args.gltf.is_file():
        raise SystemExit(f"{args.gltf} is absent (the team's ../shared asset folder)")
    device = resolve_device(args.device)
    gpu = device.type == "cuda"
    size = args.size or (2048 if gpu else 256)
    bpps = args.bpp or ([2.0, 4.0, 8.0, 20.0] if size <= 256 else [1.0, 2.0, 4.0, 8.0, 20.0])
    base = NTCConfig(sources=[str(args.gltf)])
    config = replace(
        base,
        texture_size=size,
        device=str(device),
        batch_size=args.batch_size,
        **({"hidden": tuple(args.hidden)} if args.hidden else {}),
        finetune_steps=args.finetune_steps,
        train=replace(base.train, steps=args.steps, learning_rate=args.lr, precision=args.precision, checkpoint_every=0, log_every=100),
    )
    out = args.out / f"{device.type}_{size}"
    wall = Stopwatch(device).start()
    summary = compress_rate_distortion(config, bpps, out, progress=not args.quiet)
    reports = [json.loads((out / f"bpp_{b:g}" / "report.json").read_text()) for b in sorted(bpps)]
    summary["runs"] = [
        {
            "bpp_target": r["bpp_target"],
            "bpp": r["bpp_measured"],
            "latent_shape": r["latent_shape"]["name"],
            "psnr_db": r["ntc"]["overall_db"],
            "groups_db": {k: v["mip0_db"] for k, v in r["ntc"]["groups"].items()},
            "per_mip_db": r["ntc"]["per_mip_db"],
            "compress_seconds": r["wall_seconds"],
            "train_seconds": r["train_seconds"],
            **{k: v for k, v in r.items() if k.startswith("peak_")},
        }
        for r in reports
    ]
    summary["bcn_groups_db"] = {family: {k: v["mip0_db"] for k, v in reports[0]["bcn"][family]["quality"]["groups"].items()} for family in reports[0]["bcn"]}
    summary["decode"] = decode_throughput(out / f"bpp_{max(bpps):g}", device, args.repeats)
    chosen = json.loads((out / "report.json").read_text())["device_defaults"]
    summary["settings"] = {"size": size, "steps": reports[0]["steps"], "device_defaults": chosen, "precision": args.precision, "hidden": list(config.hidden)}
    summary["device"] = describe_device(device)
    summary["wall_seconds"] = round(wall.stop(), 1)
    atomic_write_json(out / "rd.json", summary)

    print(f"DamagedHelmet {size}x{size}, 11 channels, {describe_device(device)['name']} ({device.type})")
    for family, point in summary["bcn"].items():
        print(f"  {family.upper()} set: {point['bpp']:.2f} bpp  {point['psnr_db']:.2f} dB  groups {summary['bcn_groups_db'][family]}")
    for run in summary["runs"]:
        memory = {k: v for k, v in run.items() if k.startswith("peak_")}
        print(f"  NTC {run['bpp']:.2f} bpp ({run['latent_shape']}): {run['psnr_db']:.2f} dB  groups {run['groups_db']}  {run['compress_seconds']:.0f} s  {memory}")
    for key, value in summary["comparison"].items():
        if key not in ("what", "rows"):  # the table's rows: NTC->BC7 below, the rest above
            print(f"  {key}: {'n/a (outside the NTC curve)' if value is None else value if isinstance(value, dict) else round(value, 2)}")
    for point in summary.get("ntc_to_bc7", []):
        gpu, download = point["bpp"], point["download_bpp"]
        print(f"  NTC {point['bpp_target']:g} bpp -> BC7: {gpu:.2f} bpp in GPU memory ({download:.2f} download)  {point['psnr_db']:.2f} dB")
    decode = summary["decode"]
    print(f"  decode: {decode['texels_per_second'] / 1e6:.2f} M texels/s, {decode['ms_per_frame']:.1f} ms per 3840x2160 frame")
    print(f"  -> {out / 'rd.json'}, {out / 'rd.png'}")


if __name__ == "__main__":
    main()
