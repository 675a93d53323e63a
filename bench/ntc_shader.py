"""The exported NTC shader on a device: a 4K frame of filtered samples and texel throughput, checked against PyTorch.

    python bench/ntc_shader.py NTC_FOLDER --device cuda --out result.json                 # 3840x2160, on a GPU
    python bench/ntc_shader.py NTC_FOLDER --device cpu --width 64 --height 36 --texels 4096 --repeats 1

Exports the set (``neuralbake ntc export``'s code path), compiles the Slang module with slangpy on the
device, and times, each as the median of ``--repeats`` dispatches with the device idle before and after:

- a frame of ``--width`` x ``--height`` sample queries through ``ntc_<n>_sample_kernel`` (scalar, one
  thread per sample) and ``ntc_<n>_tensor_sample_kernel`` (tensor cores), for each filter: bilinear
  (4 decodes per sample), trilinear (8; 4 where the lod is whole), stochastic (1). The frame is a
  receding textured floor: uv from a perspective view of a plane tiled 4 times, so neighbouring
  pixels read neighbouring texels and the lod runs from below 0 (magnified, near) to past the
  chain (far), as in a game's frame; each pixel's lod is ``log2`` of its uv footprint in level-0
  texels (``ntc_<n>_lod``'s rule) and its random number uniform;
- ``--texels`` random texels of every level through ``ntc_<n>_texel_kernel`` and
  ``ntc_<n>_tensor_texel_kernel``.

Every kernel's output on the first ``--check`` queries is compared with the PyTorch decode
(``sample_filtered`` / ``sample_stochastic`` / ``decode_texels``): the scalar kernels must agree to
1e-3 (fp32 both), the tensor kernels to 1e-2 (fp16 tiles); stochastic samples whose random number
lies within float rounding of a tap boundary are left out. The script exits non-zero past the
bounds: on CUDA this is the check of the tensor kernels' fragment layout. The table gives ms per
frame, samples and decodes per second.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import slangpy
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from timing import measure

from neuralbake.bakes.ntc import decode_texels, open_container
from neuralbake.bakes.ntc.decode import filter_taps, sample_filtered, sample_stochastic
from neuralbake.bakes.ntc.export import export_ntc

FILTERS = {"trilinear": 0, "bilinear": 1, "stochastic": 2}
BOUNDS = {"scalar": 1e-3, "tensor": 1e-2}
"""Largest |shader - PyTorch| of each kernel kind on values in [0, 1]."""


def floor_frame(
    width: int, height: int, size: tuple[int, int], levels: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """uv ``[P, 2]``, lod ``[P]`` and random ``[P]`` of a receding floor seen at ``width`` x ``height`` (module docstring)."""
    x = (torch.arange(width, dtype=torch.float64) + 0.5) / width - 0.5
    y = (torch.arange(height + 1, dtype=torch.float64) + 0.5) / height  # one row more for the derivative down
    horizon = 0.02 + 0.98 * y[:, None]  # screen distance below the horizon
    depth = 1.0 / horizon
    u = 4.0 * (x[None, :] * depth) + 0.5
    v = 4.0 * depth * 0.25
    uv = torch.stack(torch.broadcast_tensors(u, v), dim=-1)  # [H + 1, W, 2]
    du_dx = torch.diff(uv, dim=1, append=(2 * uv[:, -1:] - uv[:, -2:-1]))[:-1]
    du_dy = torch.diff(uv, dim=0)
    texels = torch.tensor(size, dtype=torch.float64)
    footprint = torch.maximum((du_dx * texels).norm(dim=-1), (du_dy * texels).norm(dim=-1))
    lod = torch.log2(footprint.clamp(min=1e-8))
    random = torch.rand(height * width, generator=torch.Generator().manual_seed(seed))
    return uv[:-1].reshape(-1, 2).float(), lod.reshape(-1).float(), random


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder written by `neuralbake ntc compress` (one rate)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="slangpy device (and PyTorch's for the check)")
    parser.add_argument("--width", type=int, default=3840)
    parser.add_argument("--height", type=int, default=2160)
    parser.add_argument("--texels", type=int, default=1 << 22)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check", type=int, default=1 << 14, help="queries compared with PyTorch per kernel")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = slangpy.create_device(type=getattr(slangpy.DeviceType, args.device))
    torch_device = torch.device("cuda" if args.device == "cuda" and torch.cuda.is_available() else "cpu")
    container = open_container(args.folder).to(torch_device)
    layout = container.layout
    with tempfile.TemporaryDirectory() as tmp:
        summary = export_ntc(args.folder, Path(tmp) / "shader", samples=256)
        shader_dir = Path(tmp) / "shader"
        manifest = json.loads((shader_dir / f"{summary['name']}.json").read_text())
        source = (shader_dir / manifest["files"]["slang"]["file"]).read_text()
        weights = np.fromfile(shader_dir / manifest["files"]["weights"]["file"], dtype=np.uint8)
        latents = np.fromfile(shader_dir / manifest["files"]["latents"]["file"], dtype=np.uint8)
    n, channels = manifest["name"], manifest["set"]["channels"]
    module = device.load_module_from_source(f"ntc_bench_{n}", source)
    usage = slangpy.BufferUsage.shader_resource
    buffers = {
        f"ntc_{n}_weights": device.create_buffer(data=weights, usage=usage),
        f"ntc_{n}_latents": device.create_buffer(data=latents, usage=usage),
    }
    entries = {entry["name"]: entry for entry in manifest["entry_points"] if entry["name"]}

    uv, lod, random = floor_frame(args.width, args.height, layout.level_sizes[0], layout.levels)
    frame = uv.shape[0]
    generator = torch.Generator().manual_seed(1)
    sizes = torch.tensor(layout.level_sizes)
    level = torch.randint(0, layout.levels, (args.texels,), generator=generator)
    texels = torch.stack(
        [
            level,
            (torch.rand(args.texels, generator=generator) * sizes[level, 0]).long(),
            (torch.rand(args.texels, generator=generator) * sizes[level, 1]).long(),
        ],
        1,
    )
    sample_queries = device.create_buffer(
        data=torch.cat([uv, lod[:, None], random[:, None]], 1).numpy().reshape(-1), struct_size=4, usage=usage
    )
    texel_queries = device.create_buffer(data=texels.numpy().astype(np.uint32).reshape(-1), struct_size=4, usage=usage)
    values = device.create_buffer(
        element_count=max(frame, args.texels) * channels, struct_size=4, usage=slangpy.BufferUsage.unordered_access
    )

    check = min(args.check, frame)
    cuv, clod, crandom = uv[:check].to(torch_device), lod[:check].to(torch_device), random[:check].to(torch_device)
    weights_of_taps = filter_taps(layout.level_sizes, cuv, clod)[3]
    boundary = (weights_of_taps.cumsum(dim=1) - crandom[:, None]).abs().min(dim=1).values < 1e-5
    expected = {
        "trilinear": sample_filtered(container, cuv, clod),
        "bilinear": sample_filtered(container, cuv, clod, filter="bilinear"),
        "stochastic": sample_stochastic(container, cuv, clod, crandom),
        "texel": decode_texels(container, *texels[: min(args.check, args.texels)].to(torch_device).T),
    }
    taps_per_sample = {
        "trilinear": float((filter_taps(layout.level_sizes, uv, lod)[3] > 0).sum(dim=1).float().mean()),
        "bilinear": 4.0,
        "stochastic": 1.0,
        "texel": 1.0,
    }

    rows, failures = [], []
    print(
        f"{n}: {layout.width}x{layout.height}, {layout.levels} levels, {channels} channels, {layout.shape.name}, decoder {'-'.join(map(str, layout.layer_widths))}; "
        f"frame {args.width}x{args.height} (lod {lod.min():.1f} to {lod.max():.1f}), {args.texels} texels; slangpy {args.device}",
        flush=True,
    )
    print(f"{'kernel':8s} {'filter':10s} {'ms':>9s} {'Msamples/s':>11s} {'Mdecodes/s':>11s} {'max err':>9s}")
    for kind, prefix in (("scalar", f"ntc_{n}_"), ("tensor", f"ntc_{n}_tensor_")):
        for query in ("texel", *FILTERS):
            name = f"{prefix}{'texel' if query == 'texel' else 'sample'}_kernel"
            if name not in entries:
                print(f"{kind:8s} {query:10s} no tensor kernel: {manifest['entry_points'][-1].get('reason')}")
                continue
            entry = entries[name]
            count = args.texels if query == "texel" else frame
            per_group = entry.get("queries_per_group", entry["threads_per_group"][0])
            per_group = per_group[query] if isinstance(per_group, dict) else per_group
            threads = -(-count // per_group) * entry["threads_per_group"][0]
            kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(name)]))
            bindings = {
                **buffers,
                f"ntc_{n}_values": values,
                f"ntc_{n}_constants": {f"ntc_{n}_count": count, f"ntc_{n}_filter": FILTERS.get(query, 0)},
            }
            bindings[f"ntc_{n}_texel_queries" if query == "texel" else f"ntc_{n}_sample_queries"] = (
                texel_queries if query == "texel" else sample_queries
            )
            run = lambda kernel=kernel, threads=threads, bindings=bindings: kernel.dispatch(thread_count=[threads, 1, 1], vars=bindings)
            run()
            device.wait_for_idle()
            got = torch.from_numpy(values.to_numpy().view(np.float32)[: len(expected[query]) * channels].reshape(-1, channels).copy()).to(
                torch_device
            )
            keep = ~boundary if query == "stochastic" else torch.ones(len(got), dtype=torch.bool, device=torch_device)
            error = float((got[keep] - expected[query][keep]).abs().max())
            timing = measure(run, repeats=args.repeats, warmup=0, sync=device.wait_for_idle)
            seconds = timing.median
            row = {
                "kernel": kind,
                "entry": name,
                "query": query,
                "count": count,
                "ms": 1000 * seconds,
                "samples_per_second": count / seconds,
                "decodes_per_second": count * taps_per_sample[query] / seconds,
                "max_abs_error_vs_pytorch": error,
                "checked": int(keep.sum()),
            }
            rows.append(row)
            if not error <= BOUNDS[kind]:
                failures.append(f"{name} {query}: max error {error:.2e} > {BOUNDS[kind]}")
            print(
                f"{kind:8s} {query:10s} {row['ms']:9.3f} {row['samples_per_second'] / 1e6:11.2f} {row['decodes_per_second'] / 1e6:11.2f} {error:9.1e}",
                flush=True,
            )
    result = {
        "folder": str(args.folder),
        "name": n,
        "slang_device": args.device,
        "width": args.width,
        "height": args.height,
        "texels": args.texels,
        "latent_shape": layout.shape.name,
        "decoder": layout.layer_widths,
        "gpu_bytes": manifest["gpu_bytes"],
        "stochastic": manifest["stochastic"],
        "taps_per_trilinear_sample": taps_per_sample["trilinear"],
        "device_name": torch.cuda.get_device_name() if torch_device.type == "cuda" else "cpu",
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "failures": failures,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
