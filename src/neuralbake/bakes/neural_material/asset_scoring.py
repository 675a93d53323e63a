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
With the verdict (:mod:`.verdict`), the maps decoded from NTC at the neural material's bytes are
rendered and scored the same way (``asset.ntc``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
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

__all__ = [
    "KEPT_SLOTS",
    "asset_comparison",
    "asset_views",
    "bc_set_bytes",
    "block_compressed",
    "neural_material_bytes",
    "stored_texture_bytes",
    "view_radiance",
]

_SLOT_FORMATS = {"base_color": "bc7", "metallic_roughness": "bc7", "normal": "bc5", "occlusion": "bc1", "emissive": "bc7"}
"""The block-compressed texture set the bake is compared with: the usual format per glTF slot (BC1
stands in for BC4 for the single-channel occlusion: both are 4 bits per texel)."""
KEPT_SLOTS = ("occlusion", "emissive")
"""The slots a glTF material's neural material keeps as block-compressed textures (not reflectance)."""


def asset_views(rs: RenderScene, count: int, *, seed: int = 7919, fov_y_deg: float = 40.0) -> list[Camera]:
    """``count`` held-out cameras at random directions around the asset, framing its bounding sphere."""
    target, distance = bounds_framing(rs.positions, fov_y_deg)
    return random_orbit(count, distance, seed=seed, target=target, fov_y_deg=fov_y_deg)


def bc_set_bytes(scene: Scene, index: int) -> dict[str, int]:
    """Bytes per slot of material ``index``'s textures as the BC set (:data:`_SLOT_FORMATS`, full mip
    chains). An image in several slots (occlusion packed with metal/rough) counts once, in the first."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    for attr, ref in scene.materials[index].textures().items():
        slot = attr.removesuffix("_texture")
        h, w = ref.image.shape[:2]
        sizes[slot] = 0 if id(ref.image) in seen else mip_chain_bytes(h, w, _SLOT_FORMATS[slot])
        seen.add(id(ref.image))
    return sizes


def neural_material_bytes(material: AssetSurface, latent_bytes: int, decoder_bytes: int) -> dict[str, Any]:
    """What the neural material of ``material`` ships, in bytes: 8-bit latents, fp16 decoder and, for a glTF
    material, its occlusion and emission maps as BC1/BC7 (:data:`KEPT_SLOTS`); ``total`` sums them."""
    parts: dict[str, Any] = {"latents_u8": latent_bytes, "decoder_fp16": decoder_bytes}
    total = latent_bytes + decoder_bytes
    if isinstance(material, AssetMaterial):
        sizes = bc_set_bytes(material.scene, material.index)
        parts["kept_textures_bc"] = kept = {slot: sizes[slot] for slot in KEPT_SLOTS if slot in sizes}
        total += sum(kept.values())
    return {"parts": parts, "total": total}


def block_compressed(scene: Scene, index: int) -> Scene:
    """``scene`` with material ``index``'s textures replaced by their block-compressed round trips (the
    BC set); an image in several slots is compressed once, in the first slot's format."""
    out = copy.copy(scene)
    out.materials = list(scene.materials)
    material = out.materials[index] = copy.copy(scene.materials[index])
    done: dict[int, np.ndarray] = {}
    for attr, ref in material.textures().items():
        slot = attr.removesuffix("_texture")
        fmt = _SLOT_FORMATS[slot]
        if id(ref.image) not in done:
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
        setattr(material, attr, dataclasses.replace(ref, image=done[id(ref.image)]))
    return out


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
    compressed: Mapping[str, RenderScene] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Radiance of a G-buffer's rows with the reference, with the neural material (on the
    reference's triangles; the asset's other materials as they are) and, for a glTF material,
    with each texture set of ``compressed`` (``"bc"``: the block-compressed textures, whose
    occlusion and emission the neural material ships and is rendered with; ``"ntc"``: the
    NTC-decoded maps), all lit with the same samples."""
    rs, index = reference.render_scene, reference.index
    frame = vertex_frame(g)
    s = evaluate_materials(rs, g)
    gltf = GltfLayer(s.base_color, s.metallic, s.roughness, normalize(frame.local(s.normal)), s.extensions)
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
    every = torch.arange(g.pixel.shape[0], device=rs.device)
    sets: dict[str, torch.Tensor] = {}
    for name, scene in (compressed or {}).items():
        c = evaluate_materials(scene, g)
        sets[name] = shade(every, GltfLayer(c.base_color, c.metallic, c.roughness, normalize(frame.local(c.normal)), c.extensions), c.occlusion, c.emissive)
        if name == "bc":
            occlusion, emissive = c.occlusion, c.emissive  # the neural material ships them block-compressed
    if mine.numel():
        layer = neural(g.uv[0][mine], None, footprint=(g.uv_dx[0][mine], g.uv_dy[0][mine]))
        net[mine] = shade(mine, layer, occlusion, emissive)
    return ref, net, sets


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
    ntc_scene: RenderScene | None = None,
) -> dict[str, Any]:
    """Render ``views`` held-out views of the asset with the reference and the neural material
    (and, for a glTF material, its block-compressed textures, and ``ntc_scene``'s NTC-decoded maps
    when given: :mod:`~neuralbake.bakes.neural_material.verdict`); write
    ``renders/asset_comparison.png`` (per view reference | neural | FLIP [| BC set | FLIP [| NTC |
    FLIP]]) and return the scores and the size table (see the module docstring)."""
    rs = material.render_scene
    device = rs.device
    textured = isinstance(material, AssetMaterial)
    compressed: dict[str, RenderScene] = {}
    if textured:
        compressed["bc"] = prepare_scene(block_compressed(material.scene, material.index), device=device)
        if ntc_scene is not None:
            compressed["ntc"] = ntc_scene
    environment = EnvironmentLight.from_map(default_environment(128, 64, device=device))
    shadows = warp_available()  # sun shadows need Warp's BVH; primary visibility does not
    background = torch.full((3,), 0.18, device=device)
    filtering = neural.filtering
    neural.filtering = True
    columns = ("net", *compressed)
    scores: dict[str, dict[str, list[float | None]]] = {key: {"psnr": [], "flip": []} for key in columns}
    rows_out: list[list[np.ndarray]] = []
    pixels: list[int] = []
    started = time.perf_counter()
    try:
        for view, camera in enumerate(asset_views(rs, views)):
            g = render_gbuffer(rs, camera, size, size)
            with torch.no_grad():
                ref, net, sets = view_radiance(material, g, neural, environment, spp, seed=view, shadows=shadows, compressed=compressed)
            # scored over the baked material's pixels only (an asset's other materials are the same in every image)
            mine = (g.material_id == material.index).to(ref.dtype)[:, None]
            covered = (g.image(mine, 0.0)[..., 0] > 0.5).cpu().numpy()
            pixels.append(int(covered.sum()))
            mask = torch.from_numpy(covered)
            pictures = {key: tone_map(g.image(r, background)).float().cpu().numpy() for key, r in (("ref", ref), ("net", net), *sets.items())}
            row = [pictures["ref"]]
            for key in columns:
                error, picture = _flip_ldr(pictures["ref"], pictures[key])
                visible = bool(covered.any())
                scores[key]["psnr"].append(psnr(torch.from_numpy(pictures[key])[mask], torch.from_numpy(pictures["ref"])[mask]) if visible else None)
                scores[key]["flip"].append(float(error[covered].mean()) if visible else None)
                row += [pictures[key], picture]
            rows_out.append(row)
            if progress is not None:
                progress(size * size)
    finally:
        neural.filtering = filtering
    (out / "renders").mkdir(parents=True, exist_ok=True)
    save_png(out / "renders" / "asset_comparison.png", panel_grid(rows_out, gap=2))

    def mean(values: list[float | None]) -> float | None:  # over the views that show the material; None if none does
        seen = [v for v in values if v is not None and math.isfinite(v)]
        return round(float(np.mean(seen)), 3) if seen else None

    def each(values: list[float | None], digits: int) -> list[float | None]:
        return [None if v is None or not math.isfinite(v) else round(v, digits) for v in values]

    def scored(key: str) -> dict[str, Any]:
        return {"psnr_db": mean(scores[key]["psnr"]), "flip": mean(scores[key]["flip"]),
                "psnr_per_view_db": each(scores[key]["psnr"], 3), "flip_per_view": each(scores[key]["flip"], 4)}

    labels = {"bc": "BC set", "ntc": "NTC"}
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
        **scored("net"),
        "material_pixels_per_view": pixels,
        "picture": "renders/asset_comparison.png: per view reference | neural | FLIP" + "".join(f" | {labels[key]} | FLIP" for key in compressed),
        "method": "deferred G-buffer of held-out random views; sun (BVH shadow) + procedural sky (light + cosine samples, power heuristic), "
        "the same samples for every image; the neural material filters its latents over ray-differential footprints; "
        "PSNR of ACES-tone-mapped sRGB and mean LDR FLIP over the baked material's pixels (views that do not show it are left out)"
        + ("; occlusion and emission from the BC1/BC7 textures in the neural render." if textured else "."),
    }
    shipped = neural_material_bytes(material, latent_bytes, decoder_bytes)
    if isinstance(material, PlacedMaterial):
        result["normal_map_texel_coverage"] = round(material.texel_coverage, 4)
    if not textured:
        result["bytes"] = {"neural": shipped["parts"], "neural_total": shipped["total"]}
        return result
    stored = stored_texture_bytes(material)
    bc_material = bc_set_bytes(material.scene, material.index)
    result["bc"] = {**{k: v for k, v in scored("bc").items() if k in ("psnr_db", "flip")}, "formats": {k: _SLOT_FORMATS[k] for k in bc_material}}
    if "ntc" in compressed:
        result["ntc"] = scored("ntc")
    result["bytes"] = {
        "source_stored": stored,
        "source_stored_total": sum(stored.values()),
        "bc_set": bc_material,
        "bc_set_total": sum(bc_material.values()),
        "neural": shipped["parts"],
        "neural_total": shipped["total"],
        "ratio_bc_set_to_neural": round(sum(bc_material.values()) / max(shipped["total"], 1), 3),
        "ratio_stored_to_neural": round(sum(stored.values()) / max(shipped["total"], 1), 3),
    }
    return result
