"""The neural material of a glTF asset scored on renders of the asset itself.

:func:`asset_comparison` scores the bake on held-out views of the asset (the deferred renderer's
G-buffer and per-pixel material inputs; a sun with BVH shadows and the procedural sky with MIS,
:func:`neuralbake.render.layer_shading.shade_layer`), the reference and the neural material lit
with the same samples so that their difference is the material's: PSNR and FLIP over the asset's
pixels, per view, and the same for the source textures block-compressed (BC7 colour, BC5 normal,
BC1 occlusion). The neural material filters its latents over each pixel's footprint (ray
differentials), as the reference's textures are filtered trilinearly. Occlusion and emission stay
textures: the size comparison counts them (as BC1 and BC7) on the neural side, and the neural
renders use them block-compressed. The report's ``asset.bytes`` compares the latents + decoder
(+ the kept occlusion and emission) with the textures as stored (JPEG/PNG) and as the BC set.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.neural_material.asset import AssetMaterial, AssetSurface, GltfLayer, PlacedMaterial
from neuralbake.core.metrics import psnr
from neuralbake.io.bcn import bc_roundtrip, mip_chain_bytes, pad_to_blocks
from neuralbake.io.gltf import Scene
from neuralbake.io.gltf.document import GltfDocument
from neuralbake.io.gltf.reader import DEFAULT_MAX_JSON_BYTES
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize
from neuralbake.render.camera import Camera, bounds_framing, random_orbit
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import GBuffer, evaluate_materials, render_gbuffer
from neuralbake.render.layer_shading import shade_layer, vertex_frame
from neuralbake.render.pictures import panel_grid
from neuralbake.render.scene import RenderScene, prepare_scene
from neuralbake.render.tonemap import tone_map
from neuralbake.render.visibility import warp_available

__all__ = ["asset_comparison", "asset_views", "stored_texture_bytes", "view_radiance"]

_SLOT_FORMATS = {"base_color": "bc7", "metallic_roughness": "bc7", "normal": "bc5", "occlusion": "bc1", "emissive": "bc7"}
"""The block-compressed texture set the bake is compared with: the usual format per glTF slot (BC1
stands in for BC4 for the single-channel occlusion: both are 4 bits per texel)."""


def asset_views(rs: RenderScene, count: int, *, seed: int = 7919, fov_y_deg: float = 40.0) -> list[Camera]:
    """``count`` held-out cameras at random directions around the asset, framing its bounding sphere."""
    target, distance = bounds_framing(rs.positions, fov_y_deg)
    return random_orbit(count, distance, seed=seed, target=target, fov_y_deg=fov_y_deg)


def _block_compressed(scene: Scene, index: int) -> tuple[Scene, dict[str, int]]:
    """``scene`` with material ``index``'s textures replaced by their block-compressed round trips, and
    the bytes per slot (full mip chains). An image in several slots (occlusion packed with
    metal/rough) is compressed once, in the first slot's format, and counted once (0 bytes after)."""
    out = copy.copy(scene)
    out.materials = list(scene.materials)
    material = out.materials[index] = copy.copy(scene.materials[index])
    sizes: dict[str, int] = {}
    done: dict[int, np.ndarray] = {}
    for attr, ref in material.textures().items():
        slot = attr.removesuffix("_texture")
        fmt = _SLOT_FORMATS[slot]
        if id(ref.image) in done:
            sizes[slot] = 0
        else:
            image = ref.image
            h, w = image.shape[:2]
            pad = pad_to_blocks(image)
            if fmt == "bc5":
                xy, _ = bc_roundtrip(pad[..., :2], "bc5")
                n = xy * 2.0 - 1.0
                z = np.sqrt(np.clip(1.0 - (n * n).sum(-1, keepdims=True), 0.0, 1.0))
                decoded = np.concatenate([xy, z * 0.5 + 0.5], axis=-1)
            elif fmt == "bc1" and image.shape[2] < 3:
                decoded, _ = bc_roundtrip(np.repeat(pad[..., :1], 3, axis=2), "bc1")
            else:
                channels = 4 if image.shape[2] == 4 and slot == "base_color" else 3
                rgb = pad[..., :channels] if pad.shape[2] >= 3 else np.repeat(pad[..., :1], 3, axis=2)
                decoded, _ = bc_roundtrip(rgb, fmt)
            done[id(ref.image)] = np.ascontiguousarray(decoded[:h, :w], np.float32)
            sizes[slot] = mip_chain_bytes(h, w, fmt)
        setattr(material, attr, dataclasses.replace(ref, image=done[id(ref.image)]))
    return out, sizes


def stored_texture_bytes(material: AssetMaterial) -> dict[str, int]:
    """Bytes of the material's images as the asset stores them (PNG/JPEG files or embedded), per slot."""
    doc = GltfDocument(material.path, DEFAULT_MAX_JSON_BYTES)
    gltf = doc.gltf
    if material.index >= len(gltf.materials or []):
        return {}  # the reader's default material of a primitive without one: no images
    m = gltf.materials[material.index]
    pbr = m.pbrMetallicRoughness
    infos = {
        "base_color": pbr.baseColorTexture if pbr else None,
        "metallic_roughness": pbr.metallicRoughnessTexture if pbr else None,
        "normal": m.normalTexture,
        "occlusion": m.occlusionTexture,
        "emissive": m.emissiveTexture,
    }
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    for slot, info in infos.items():
        if info is None or info.index is None:
            continue
        source = gltf.textures[info.index].source
        if source in seen:  # one image in several slots (occlusion packed with metal/rough): stored once
            continue
        seen.add(source)
        image = gltf.images[source]
        if image.uri and not image.uri.startswith("data:"):
            nbytes = doc.local_file(image.uri, "images[].uri", "texture image").stat().st_size
        elif image.uri:
            nbytes = len(doc.uri_bytes(image.uri, "images[].uri", "image"))
        else:
            nbytes = int(gltf.bufferViews[image.bufferView].byteLength)
        sizes[slot] = int(nbytes)
    return sizes


def _flip_ldr(reference: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LDR FLIP error per pixel ``[H, W]`` and its magma picture ``[H, W, 3]`` of two display images."""
    import flip_evaluator

    ref, tst = np.ascontiguousarray(reference.clip(0, 1), np.float32), np.ascontiguousarray(test.clip(0, 1), np.float32)
    error, _, _ = flip_evaluator.evaluate(ref, tst, "LDR", inputsRGB=True, applyMagma=False)
    picture, _, _ = flip_evaluator.evaluate(ref, tst, "LDR", inputsRGB=True, applyMagma=True)
    return np.asarray(error, np.float32).reshape(ref.shape[:2]), np.asarray(picture, np.float32)


def view_radiance(
    reference: AssetSurface, g: GBuffer, neural: Any, environment: EnvironmentLight, spp: int, *, seed: int, shadows: bool,
    compressed_scene: RenderScene | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Radiance of a G-buffer's rows with the reference, with the neural material (on the
    reference's triangles; the asset's other materials as they are) and, for a glTF material,
    with the block-compressed textures (``compressed_scene``), all lit with the same samples."""
    rs, index = reference.render_scene, reference.index
    frame = vertex_frame(g)
    s = evaluate_materials(rs, g)
    gltf = GltfLayer(s.base_color, s.metallic, s.roughness, normalize(frame.local(s.normal)))
    mine = torch.nonzero(g.material_id == index).reshape(-1)
    others = torch.nonzero(g.material_id != index).reshape(-1)
    occlusion, emissive = s.occlusion.clone(), s.emissive.clone()
    if isinstance(reference, PlacedMaterial):  # the layered material replaces the asset's own: no occlusion or emission maps
        occlusion[mine], emissive[mine] = 1.0, 0.0

    def shade(rows: torch.Tensor, layer: Any, occ: torch.Tensor, emi: torch.Tensor) -> torch.Tensor:
        return shade_layer(rs, g, rows, frame.rows(rows), layer, occ[rows], emi[rows], environment, spp, seed=seed, shadows=shadows)

    ref = torch.zeros_like(s.emissive)
    if others.numel():
        ref[others] = shade(others, gltf.rows(others), occlusion, emissive)
    net = ref.clone()
    if mine.numel():
        ref[mine] = shade(mine, reference.render_layer(g, frame, s, mine), occlusion, emissive)
    bc = None
    if compressed_scene is not None:
        s_bc = evaluate_materials(compressed_scene, g)
        every = torch.arange(g.pixel.shape[0], device=rs.device)
        bc = shade(every, GltfLayer(s_bc.base_color, s_bc.metallic, s_bc.roughness, normalize(frame.local(s_bc.normal))), s_bc.occlusion, s_bc.emissive)
        occlusion, emissive = s_bc.occlusion, s_bc.emissive  # the neural material ships them block-compressed
    if mine.numel():
        layer = neural(g.uv[0][mine], None, footprint=(g.uv_dx[0][mine], g.uv_dy[0][mine]))
        net[mine] = shade(mine, layer, occlusion, emissive)
    return ref, net, bc


def asset_comparison(
    out: Path,
    material: AssetSurface,
    neural: Any,
    *,
    size: int,
    spp: int,
    views: int = 4,
    progress: Callable[[int], None] | None = None,
    latent_bytes: int = 0,
    decoder_bytes: int = 0,
) -> dict[str, Any]:
    """Render ``views`` held-out views of the asset with the reference and the neural material
    (and, for a glTF material, its block-compressed textures); write
    ``renders/asset_comparison.png`` (per view reference | neural | FLIP [| BC set | FLIP]) and
    return the scores and the size table (see the module docstring)."""
    rs = material.render_scene
    device = rs.device
    textured = isinstance(material, AssetMaterial)
    bc_bytes: dict[str, int] = {}
    compressed = None
    if textured:
        bc_scene, bc_bytes = _block_compressed(material.scene, material.index)
        compressed = prepare_scene(bc_scene, device=device)
    environment = EnvironmentLight.from_map(default_environment(128, 64, device=device))
    shadows = warp_available()  # sun shadows need Warp's BVH; primary visibility does not
    background = torch.full((3,), 0.18, device=device)
    filtering = neural.filtering
    neural.filtering = True
    scores: dict[str, list[float]] = {"psnr": [], "flip": [], "bc_psnr": [], "bc_flip": []}
    rows_out: list[list[np.ndarray]] = []
    pixels: list[int] = []
    started = time.perf_counter()
    try:
        for view, camera in enumerate(asset_views(rs, views)):
            g = render_gbuffer(rs, camera, size, size)
            with torch.no_grad():
                radiance = view_radiance(material, g, neural, environment, spp, seed=view, shadows=shadows, compressed_scene=compressed)
            # scored over the baked material's pixels only (an asset's other materials are the same in every image)
            mine = (g.material_id == material.index).to(radiance[0].dtype)[:, None]
            covered = (g.image(mine, 0.0)[..., 0] > 0.5).cpu().numpy()
            pixels.append(int(covered.sum()))
            mask = torch.from_numpy(covered)
            pictures = {key: tone_map(g.image(r, background)).float().cpu().numpy() for key, r in zip(("ref", "net", "bc"), radiance, strict=True) if r is not None}
            row = [pictures["ref"]]
            for prefix, key in (("", "net"), ("bc_", "bc")):
                if key not in pictures:
                    continue
                error, picture = _flip_ldr(pictures["ref"], pictures[key])
                visible = bool(covered.any())
                scores[f"{prefix}psnr"].append(psnr(torch.from_numpy(pictures[key])[mask], torch.from_numpy(pictures["ref"])[mask]) if visible else None)
                scores[f"{prefix}flip"].append(float(error[covered].mean()) if visible else None)
                row += [pictures[key], picture]
            rows_out.append(row)
            if progress is not None:
                progress(size * size)
    finally:
        neural.filtering = filtering
    save_png(out / "renders" / "asset_comparison.png", panel_grid(rows_out, gap=2))

    def mean(values: list[float | None]) -> float | None:  # over the views that show the material; None if none does
        seen = [v for v in values if v is not None and math.isfinite(v)]
        return round(float(np.mean(seen)), 3) if seen else None

    def each(values: list[float | None], digits: int) -> list[float | None]:
        return [None if v is None or not math.isfinite(v) else round(v, digits) for v in values]

    result: dict[str, Any] = {
        "asset": str(material.path.name),
        "material": material.name,
        "material_index": material.index,
        "reference": "the asset's glTF metal/rough material" if textured else f"layered material {material.source} placed on the asset",
        "uv_coverage": round(material.uv_coverage, 4),
        "views": views,
        "size": size,
        "spp": spp,
        "sun_shadows": shadows,
        "seconds": round(time.perf_counter() - started, 3),
        "psnr_db": mean(scores["psnr"]),
        "flip": mean(scores["flip"]),
        "psnr_per_view_db": each(scores["psnr"], 3),
        "flip_per_view": each(scores["flip"], 4),
        "material_pixels_per_view": pixels,
        "picture": "renders/asset_comparison.png: per view reference | neural | FLIP" + (" | BC set | FLIP" if textured else ""),
        "method": "deferred G-buffer of held-out random views; sun (BVH shadow) + procedural sky (light + cosine samples, power heuristic), "
        "the same samples for every image; the neural material filters its latents over ray-differential footprints; "
        "PSNR of ACES-tone-mapped sRGB and mean LDR FLIP over the baked material's pixels (views that do not show it are left out)"
        + ("; occlusion and emission from the BC1/BC7 textures in the neural render." if textured else "."),
    }
    neural_bytes = {"latents_u8": latent_bytes, "decoder_fp16": decoder_bytes}
    if isinstance(material, PlacedMaterial):
        result["normal_map_texel_coverage"] = round(material.texel_coverage, 4)
    if not textured:
        result["bytes"] = {"neural": neural_bytes, "neural_total": latent_bytes + decoder_bytes}
        return result
    stored = stored_texture_bytes(material)
    bc_material = bc_bytes
    kept = {slot: bc_material[slot] for slot in ("occlusion", "emissive") if slot in bc_material}
    neural_total = latent_bytes + decoder_bytes + sum(kept.values())
    result["bc"] = {"psnr_db": mean(scores["bc_psnr"]), "flip": mean(scores["bc_flip"]), "formats": {k: _SLOT_FORMATS[k] for k in bc_material}}
    result["bytes"] = {
        "source_stored": stored,
        "source_stored_total": sum(stored.values()),
        "bc_set": bc_material,
        "bc_set_total": sum(bc_material.values()),
        "neural": {**neural_bytes, "kept_textures_bc": kept},
        "neural_total": neural_total,
        "ratio_bc_set_to_neural": round(sum(bc_material.values()) / max(neural_total, 1), 3),
        "ratio_stored_to_neural": round(sum(stored.values()) / max(neural_total, 1), 3),
    }
    return result
