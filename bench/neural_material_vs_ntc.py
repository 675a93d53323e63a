"""A glTF asset's neural material against neural texture compression (NTC) of its maps at the same rate.

    python bench/neural_material_vs_ntc.py MODEL.gltf BUNDLE --out DIR [--size 128 --spp 32 --steps N]

``BUNDLE`` is a ``neuralbake material bake MODEL.gltf`` folder. Its bytes as shipped (8-bit latents,
fp16 decoder, and the occlusion and emission maps it keeps as BC1/BC7, as its report counts them)
give a rate in bits per texel of the material's maps; ``neuralbake ntc compress`` then compresses
all the material's maps (base colour, normal XY, occlusion/roughness/metallic, emission) at that
rate, and the asset is rendered (the neural bake's own held-out views, lights and samples, over the
material's pixels) with the reference maps, the neural material and the NTC-decoded maps. Writes
``ntc/`` (the compressed set), ``vs_ntc.json`` and ``vs_ntc.png`` (per view reference | neural |
NTC).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from neuralbake.bakes.neural_material.asset import GltfLayer, load_asset_bundle
from neuralbake.bakes.neural_material.asset_scoring import asset_views
from neuralbake.bakes.ntc.bake import compress_texture_set
from neuralbake.bakes.ntc.config import NTCConfig
from neuralbake.bakes.ntc.container import open_container
from neuralbake.bakes.ntc.decode import decode_all_levels
from neuralbake.bakes.ntc.layout import BPP_RANGE
from neuralbake.bakes.ntc.texture_set import load_gltf_material
from neuralbake.core.metrics import psnr
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import evaluate_materials, render_gbuffer
from neuralbake.render.layer_shading import shade_layer, vertex_frame
from neuralbake.render.pictures import panel_grid
from neuralbake.render.scene import prepare_scene
from neuralbake.render.tonemap import tone_map
from neuralbake.render.visibility import warp_available
from timing import Stopwatch

NTC_MAX_BPP = BPP_RANGE[1]
"""The highest rate ``ntc compress`` takes."""


def _ntc_scene(scene, index: int, levels: list[np.ndarray], groups) -> object:
    """``scene`` with material ``index``'s maps replaced by the NTC-decoded level 0 (as stored: sRGB colour, normal XY with Z rebuilt)."""
    decoded, offset = {}, 0
    for group in groups:
        decoded[group.name] = np.clip(levels[0][..., offset : offset + len(group.channels)], 0.0, 1.0)
        offset += len(group.channels)
    out = copy.copy(scene)
    out.materials = list(scene.materials)
    material = out.materials[index] = copy.copy(scene.materials[index])

    def replace(attr: str, image: np.ndarray) -> None:
        ref = getattr(material, attr)
        if ref is not None:
            setattr(material, attr, dataclasses.replace(ref, image=np.ascontiguousarray(image, np.float32)))

    if "base_color" in decoded:
        base = material.base_color_texture.image
        replace("base_color_texture", np.concatenate([decoded["base_color"], base[..., 3:4]], -1) if base.shape[2] == 4 else decoded["base_color"])
    if "normal" in decoded:
        n = decoded["normal"] * 2.0 - 1.0
        z = np.sqrt(np.clip(1.0 - (n * n).sum(-1, keepdims=True), 0.0, 1.0))
        replace("normal_texture", np.concatenate([decoded["normal"], z * 0.5 + 0.5], -1))
    if "orm" in decoded:
        orm = decoded["orm"]
        replace("occlusion_texture", np.repeat(orm[..., 0:1], 3, axis=2))
        replace("metallic_roughness_texture", np.concatenate([np.zeros_like(orm[..., :1]), orm[..., 1:3]], -1))
    if "emissive" in decoded:
        replace("emissive_texture", decoded["emissive"])
    return out


def _view_radiance(material, g, neural, environment, spp: int, *, seed: int, shadows: bool, ntc_scene):
    """Radiance of a G-buffer's rows with the reference maps, with the neural material on the material's pixels (the
    asset's other materials as they are; its occlusion and emission from the NTC maps, as the neural material keeps
    them as textures) and with the NTC-decoded maps, all lit with the same samples (``shade_layer``)."""
    rs, index = material.render_scene, material.index
    frame = vertex_frame(g)
    s = evaluate_materials(rs, g)
    s_ntc = evaluate_materials(ntc_scene, g)
    mine = torch.nonzero(g.material_id == index).reshape(-1)
    others = torch.nonzero(g.material_id != index).reshape(-1)
    every = torch.arange(g.pixel.shape[0], device=rs.device)

    def gltf(p):
        return GltfLayer(p.base_color, p.metallic, p.roughness, normalize(frame.local(p.normal)))

    def shade(rows, layer, p):
        return shade_layer(rs, g, rows, frame.rows(rows), layer, p.occlusion[rows], p.emissive[rows], environment, spp, seed=seed, shadows=shadows)

    ref = torch.zeros_like(s.emissive)
    if others.numel():
        ref[others] = shade(others, gltf(s).rows(others), s)
    net = ref.clone()
    if mine.numel():
        ref[mine] = shade(mine, material.render_layer(g, frame, s, mine), s)
        net[mine] = shade(mine, neural(g.uv[0][mine], None, footprint=(g.uv_dx[0][mine], g.uv_dy[0][mine])), s_ntc)
    return ref, net, shade(every, gltf(s_ntc), s_ntc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("asset", type=Path)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--spp", type=int, default=32)
    parser.add_argument("--steps", type=int, default=0, help="NTC training steps (0: its device default)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    material, neural = load_asset_bundle(args.asset, args.bundle, device=device)
    report = json.loads((args.bundle / "report.json").read_text())
    neural_bytes = int(report["asset"]["bytes"]["neural_total"])
    texture_set = load_gltf_material(args.asset, material=str(material.index))
    height, width = texture_set.images[0].shape[:2]
    rate = neural_bytes * 8.0 / (height * width)
    watch = Stopwatch().start()
    asked = min(rate, NTC_MAX_BPP)  # past NTC's highest rate it is compared at that rate (the report says so)
    config = NTCConfig(sources=[str(args.asset)], material=str(material.index), bpp=[round(asked, 3)], device=device.type, baselines=False)
    if args.steps:
        config.train.steps = args.steps
    ntc_report = compress_texture_set(config, args.out / "ntc", progress=False)
    container = open_container(args.out / "ntc")
    levels = decode_all_levels(container)
    ntc_seconds = watch.stop()
    ntc_bytes = (args.out / "ntc" / "texture.ntc").stat().st_size
    rs_ntc = prepare_scene(_ntc_scene(material.scene, material.index, levels, texture_set.groups), device=device)

    environment = EnvironmentLight.from_map(default_environment(128, 64, device=device))
    background = torch.full((3,), 0.18, device=device)
    neural.filtering = True
    scores: dict[str, list[float]] = {"neural": [], "ntc": []}
    rows = []
    for view, camera in enumerate(asset_views(material.render_scene, 4)):
        g = render_gbuffer(material.render_scene, camera, args.size, args.size)
        with torch.no_grad():
            ref, net, ntc = _view_radiance(material, g, neural, environment, args.spp, seed=view, shadows=warp_available(), ntc_scene=rs_ntc)
        mine = (g.material_id == material.index).to(ref.dtype)[:, None]
        mask = g.image(mine, 0.0)[..., 0] > 0.5
        images = {k: tone_map(g.image(v, background)) for k, v in (("ref", ref), ("neural", net), ("ntc", ntc))}
        if bool(mask.any()):
            for key in ("neural", "ntc"):
                scores[key].append(psnr(images[key][mask], images["ref"][mask]))
        rows.append([images[k].float().cpu().numpy() for k in ("ref", "neural", "ntc")])
    args.out.mkdir(parents=True, exist_ok=True)
    save_png(args.out / "vs_ntc.png", panel_grid(rows, gap=2))
    result = {
        "asset": args.asset.name, "material": material.name, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "date": time.strftime("%Y-%m-%d"), "size": args.size, "spp": args.spp, "map_texels": height * width,
        "neural": {"bytes": neural_bytes, "bits_per_texel": round(rate, 3), "psnr_db": float(np.mean(scores["neural"])),
                   "psnr_per_view_db": [round(v, 3) for v in scores["neural"]]},
        "ntc": {"bytes": ntc_bytes, "bits_per_texel": round(ntc_bytes * 8.0 / (height * width), 3), "asked_bpp": round(asked, 3),
                "psnr_db": float(np.mean(scores["ntc"])), "psnr_per_view_db": [round(v, 3) for v in scores["ntc"]],
                "texture_psnr_db": ntc_report.get("psnr_db"), "seconds": round(ntc_seconds, 1)},
        "bc": report["asset"].get("bc"),
    }
    (args.out / "vs_ntc.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
