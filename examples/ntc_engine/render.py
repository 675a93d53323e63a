"""An engine's use of an exported NTC set: sample it in a shader at a mesh's uv, where the texture is read.

    python examples/ntc_engine/render.py SHADER_DIR --asset examples/crate/crate.gltf --out out/ntc_engine

``SHADER_DIR`` is what ``neuralbake ntc export`` wrote (``<name>.slang`` + buffers + ``<name>.json``). The
script does what a deferred renderer does with it:

1. renders the asset's G-buffer with neuralbake's rasteriser: per covered pixel the uv and its
   derivatives along the screen axes (one pixel right, one down);
2. binds the two buffers the manifest names and dispatches an engine-side compute kernel (appended
   to the exported module below) that calls ``ntc_<name>_lod(duv_dx, duv_dy)`` and
   ``ntc_<name>_sample(uv, lod)`` (or ``_sample_stochastic`` with a random number per pixel, or, with
   ``--kernel tensor``, the module's tensor-core batch kernel over the pixels' (uv, lod)) and
   writes every channel group;
3. renders the same G-buffer from the source textures (the glTF material's maps, at the set's size,
   their box-filtered mip chain) with the same trilinear filter in PyTorch
   (:func:`neuralbake.bakes.ntc.decode.sample_levels`), and prints the PSNR between the two per filter
   and per channel group.

It writes ``ntc_<filter>.png`` (one panel per channel group: base colour, normal, ...), ``source.png``
and ``result.json`` into ``--out``. slangpy's CPU device by default (Slang compiled to C++; a
256x144 frame of the crate takes seconds on a 2-core CPU), ``--device cuda`` on an NVIDIA GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import slangpy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from neuralbake.bakes.ntc import load_texture_set
from neuralbake.bakes.ntc.decode import sample_levels
from neuralbake.io.gltf import load_gltf
from neuralbake.io.images import save_png
from neuralbake.render.camera import bounds_framing, look_at
from neuralbake.render.gbuffer import render_gbuffer
from neuralbake.render.mip import mip_level
from neuralbake.render.pictures import display_rgb
from neuralbake.render.scene import prepare_scene

FILTERS = {"trilinear": 0, "bilinear": 1, "stochastic": 2}
BACKGROUND = 0.25


def engine_kernel(manifest: dict) -> str:
    """The engine's shading kernel: one thread per covered pixel, the set sampled at its uv and footprint's lod."""
    n = manifest["name"]
    writes = []
    for group in manifest["set"]["groups"]:
        count, field, offset = len(group["channels"]), group["field"], group["offset"]
        parts = [f"c.{field}"] if count == 1 else [f"c.{field}.{'xyzw'[k]}" for k in range(count)]
        writes += [f"    engine_out[p * {manifest['set']['channels']}u + {offset + k}u] = {part};" for k, part in enumerate(parts)]
    return f"""
// ---- the engine's side: shade a G-buffer with the NTC set ----
StructuredBuffer<float> engine_gbuffer;   // per pixel: u, v, du/dx, dv/dx, du/dy, dv/dy, random
RWStructuredBuffer<float> engine_out;     // per pixel: every channel of the set
cbuffer engine_constants {{ uint engine_pixels; uint engine_filter; }};

[shader("compute")]
[numthreads(64, 1, 1)]
void engine_shade(uint3 id : SV_DispatchThreadID)
{{
    uint p = id.x;
    if (p >= engine_pixels)
        return;
    uint b = p * 7u;
    float2 uv = float2(engine_gbuffer[b], engine_gbuffer[b + 1u]);
    float lod = ntc_{n}_lod(float2(engine_gbuffer[b + 2u], engine_gbuffer[b + 3u]), float2(engine_gbuffer[b + 4u], engine_gbuffer[b + 5u]));
    ntc_{n}_channels c;
    if (engine_filter == 2u)
        c = ntc_{n}_sample_stochastic(uv, lod, engine_gbuffer[b + 6u]);
    else if (engine_filter == 1u)
        c = ntc_{n}_sample_bilinear(uv, lod);
    else
        c = ntc_{n}_sample(uv, lod);
{chr(10).join(writes)}
}}
"""


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(1.0 / mse)


def panels(g, values: np.ndarray, groups: list[dict]) -> np.ndarray:
    """The frame's channel groups side by side as RGB pictures (``values`` ``[pixels, channels]`` at the covered pixels), grey elsewhere."""
    image = g.image(torch.from_numpy(values), 0.0).numpy()
    covered = g.image(torch.ones(len(values), 1), 0.0).numpy() > 0
    pictures = [display_rgb(image[..., gr["offset"] : gr["offset"] + len(gr["channels"])], kind=gr["kind"]) for gr in groups]
    return np.concatenate([np.where(covered, picture, BACKGROUND) for picture in pictures], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shader_dir", type=Path, help="a folder written by `neuralbake ntc export`")
    parser.add_argument(
        "--asset",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "crate" / "crate.gltf",
        help="the mesh (and its material's source textures)",
    )
    parser.add_argument("--material", default="0", help="the glTF material the set was compressed from")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--height", type=int, default=144)
    parser.add_argument("--filters", default="trilinear,stochastic", help="comma-separated: trilinear, bilinear, stochastic")
    parser.add_argument(
        "--kernel",
        default="scalar",
        choices=["scalar", "tensor"],
        help="the engine's per-pixel kernel, or the module's tensor-core batch kernel",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="slangpy device")
    args = parser.parse_args()
    filters = [f.strip() for f in args.filters.split(",") if f.strip()]
    if any(f not in FILTERS for f in filters):
        parser.error(f"--filters takes {', '.join(FILTERS)}")
    manifests = [p for p in sorted(args.shader_dir.glob("*.json")) if json.loads(p.read_text()).get("format") == "neuralbake.ntc_shader"]
    if not manifests:
        parser.error(f"{args.shader_dir} holds no `neuralbake ntc export` manifest")
    manifest = json.loads(manifests[0].read_text())
    n, groups, channels = manifest["name"], manifest["set"]["groups"], manifest["set"]["channels"]
    args.out.mkdir(parents=True, exist_ok=True)

    # 1. the G-buffer: uv and its screen derivatives at every covered pixel
    scene = prepare_scene(load_gltf(args.asset))
    target, distance = bounds_framing(scene.positions, 40.0)
    camera = look_at((target[0] + 0.4 * distance, target[1] + 0.25 * distance, target[2] + 0.5 * distance), target, fov_y_deg=40.0)
    g = render_gbuffer(scene, camera, args.width, args.height)
    uv, dx, dy = g.uv[0].float(), g.uv_dx[0].float(), g.uv_dy[0].float()
    pixels = len(uv)
    random = torch.rand(pixels, generator=torch.Generator().manual_seed(0))
    levels = len(manifest["set"]["levels"])
    lod = mip_level(dx, dy, manifest["set"]["height"], manifest["set"]["width"], levels)  # ntc_<name>_lod, clamped as the sampler clamps

    # 2. the shader: bind the manifest's buffers, dispatch
    device = slangpy.create_device(type=getattr(slangpy.DeviceType, args.device))
    source = (args.shader_dir / manifest["files"]["slang"]["file"]).read_text() + engine_kernel(manifest)
    module = device.load_module_from_source(f"ntc_engine_{n}", source)
    usage = slangpy.BufferUsage.shader_resource

    def raw(binding: str):
        return device.create_buffer(data=np.fromfile(args.shader_dir / manifest["bindings"][binding]["file"], dtype=np.uint8), usage=usage)

    def floats(array: torch.Tensor):
        return device.create_buffer(data=np.ascontiguousarray(array.numpy(), dtype=np.float32).reshape(-1), struct_size=4, usage=usage)

    buffers = {f"ntc_{n}_weights": raw(f"ntc_{n}_weights"), f"ntc_{n}_latents": raw(f"ntc_{n}_latents")}
    out = device.create_buffer(element_count=pixels * channels, struct_size=4, usage=slangpy.BufferUsage.unordered_access)
    if args.kernel == "scalar":
        kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point("engine_shade")]))
        gbuffer = floats(torch.cat([uv, dx, dy, random[:, None]], 1))
    else:
        entry = next(e for e in manifest["entry_points"] if e["name"] == f"ntc_{n}_tensor_sample_kernel")
        kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(entry["name"])]))
        queries = floats(torch.cat([uv, lod[:, None], random[:, None]], 1))

    # 3. the same frame from the source textures, trilinear in PyTorch
    texture_set = load_texture_set([str(args.asset)], material=args.material)
    if (texture_set.width, texture_set.height) != (manifest["set"]["width"], manifest["set"]["height"]):
        texture_set = texture_set.resized(max(manifest["set"]["width"], manifest["set"]["height"]))
    if [(gr.name, len(gr.channels)) for gr in texture_set.groups] != [(gr["name"], len(gr["channels"])) for gr in groups]:
        parser.error(f"{args.asset} material {args.material} does not hold the set's channel groups {[gr['name'] for gr in groups]}")
    reference = sample_levels(texture_set.mip_chain(), uv, lod).numpy()
    save_png(args.out / "source.png", panels(g, reference, groups))

    result = {
        "asset": str(args.asset),
        "set": n,
        "device": args.device,
        "kernel": args.kernel,
        "width": args.width,
        "height": args.height,
        "covered_pixels": pixels,
        "lod_range": [round(float(lod.min()), 3), round(float(lod.max()), 3)],
        "filters": {},
    }
    print(
        f"{args.width}x{args.height}, {pixels} covered pixels, lod {lod.min():.2f} to {lod.max():.2f}; {args.kernel} kernel on slangpy's {args.device} device"
    )
    for name in filters:
        start = time.perf_counter()
        if args.kernel == "scalar":
            kernel.dispatch(
                thread_count=[pixels, 1, 1],
                vars={
                    **buffers,
                    "engine_gbuffer": gbuffer,
                    "engine_out": out,
                    "engine_constants": {"engine_pixels": pixels, "engine_filter": FILTERS[name]},
                },
            )
        else:
            per_group = entry["queries_per_group"][name]
            kernel.dispatch(
                thread_count=[-(-pixels // per_group) * entry["threads_per_group"][0], 1, 1],
                vars={
                    **buffers,
                    f"ntc_{n}_sample_queries": queries,
                    f"ntc_{n}_values": out,
                    f"ntc_{n}_constants": {f"ntc_{n}_count": pixels, f"ntc_{n}_filter": FILTERS[name]},
                },
            )
        device.wait_for_idle()
        seconds = time.perf_counter() - start  # the first dispatch includes the kernel's compile
        shaded = out.to_numpy().view(np.float32).reshape(pixels, channels).copy()
        save_png(args.out / f"ntc_{name}.png", panels(g, shaded, groups))
        per_group = {
            gr["name"]: round(
                psnr(
                    shaded[:, gr["offset"] : gr["offset"] + len(gr["channels"])],
                    reference[:, gr["offset"] : gr["offset"] + len(gr["channels"])],
                ),
                2,
            )
            for gr in groups
        }
        result["filters"][name] = {
            "psnr_db": round(psnr(shaded, reference), 2),
            "psnr_db_per_group": per_group,
            "seconds": round(seconds, 3),
        }
        print(
            f"  {name:10s} PSNR {result['filters'][name]['psnr_db']:6.2f} dB vs the source textures ({', '.join(f'{k} {v:.1f}' for k, v in per_group.items())}); {seconds:.2f} s"
        )
    (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
