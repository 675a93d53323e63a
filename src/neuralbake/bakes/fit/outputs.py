"""What the fit writes: ``lod.gltf`` (unlit, uv1 texture or ``COLOR_0``; luma-chroma baked into
one uv1 texture for standard viewers), the stored textures and codes, the fitted tone map, and the
triptych of held-out views (PBR reference | LOD | error)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.fit.config import FitConfig
from neuralbake.bakes.fit.model import LodAppearance, lod_image
from neuralbake.bakes.fit.views import View
from neuralbake.io.files import atomic_path, atomic_write_json
from neuralbake.io.gltf import Material, Scene, TextureRef, write_gltf
from neuralbake.io.images import resize_image, save_png
from neuralbake.material.texture import srgb_to_linear
from neuralbake.render.gbuffer import interpolate
from neuralbake.render.mip import sample_bilinear
from neuralbake.render.pictures import comparison_row, panel_grid
from neuralbake.render.skinning import pose_scene
from neuralbake.render.tonemap import tone_map
from neuralbake.render.transparency import MASK_EDGE
from neuralbake.render.uv_raster import rasterize_uv

__all__ = ["TRIPTYCH_MAX_PIXELS", "skin_of", "triptych_image", "write_lod", "write_triptych"]

TRIPTYCH_MAX_PIXELS = 1 << 25
"""Largest triptych picture (33.5 M pixels, 5,800 px square): the default 4 held-out views at a GPU's 1024 px
renders take 12.6 M; larger sets of views are shrunk by a whole factor to stay within it (all of them still shown)."""
_GAP = 4
"""White pixels between the triptychs of two views."""


def _layout(count: int, height: int, width: int, max_pixels: int) -> tuple[int, int]:
    """``(columns, shrink)`` for ``count`` triptychs of three ``height x width`` panels: the columns that keep the
    picture about as tall as wide (one for up to 4 square views), and the smallest whole factor that keeps it
    within ``max_pixels``."""
    columns = max(1, round(math.sqrt(count * height / (3.0 * width))))
    rows = math.ceil(count / columns)
    shrink = 1
    while rows * (height // shrink) * columns * 3 * (width // shrink) > max_pixels and min(height, width) // (shrink + 1) >= 1:
        shrink += 1
    return columns, shrink


@torch.no_grad()
def triptych_image(
    model: LodAppearance, views: list[View], max_rows: int | None = None, error_scale: float = 0.25, max_pixels: int = TRIPTYCH_MAX_PIXELS
) -> np.ndarray:
    """PBR reference | LOD | error heat map for every view of ``views`` (the first ``max_rows`` when given).

    One triptych per view, in columns side by side when there are many (:func:`_layout`), with a white
    gap between views; panels are shrunk by a whole factor (antialiased) where the picture would exceed
    ``max_pixels``, so every held-out view is shown whatever their number. Float32 ``[H, W, 3]``.
    """
    chosen = list(views if max_rows is None else views[:max_rows])
    if not chosen:
        raise ValueError("triptych_image: no views")
    height, width = chosen[0].image.shape[:2]
    columns, shrink = _layout(len(chosen), height, width, max_pixels)
    small = (max(1, width // shrink), max(1, height // shrink))
    triptychs = []
    for v in chosen:  # each view's panels are made and shrunk in turn: at most one view at full size in memory
        (panels,) = comparison_row(v.image, lod_image(model, v), error="heat", heat_scale=error_scale, colormap="inferno")
        triptychs.append(panel_grid([[resize_image(p, *small) if shrink > 1 else p for p in panels]], gap=0))
    blank = np.ones_like(triptychs[0])
    grid = [[triptychs[k] if k < len(triptychs) else blank for k in range(r, r + columns)] for r in range(0, len(triptychs), columns)]
    return panel_grid(grid, gap=_GAP)


def write_triptych(path: Path, model: LodAppearance, views: list[View], max_rows: int | None = None, error_scale: float = 0.25) -> None:
    """:func:`triptych_image` as a PNG."""
    save_png(path, triptych_image(model, views, max_rows, error_scale))


@torch.no_grad()
def _baked_uv1_texture(model: LodAppearance, rs: Any, config: FitConfig) -> np.ndarray:
    """Luma-chroma combined into one uv1 texture (what a standard glTF viewer can show)."""
    n = config.texture_size
    tri, bary = rasterize_uv(rs.uv1, rs.faces, n)
    covered = tri >= 0
    t = torch.where(covered, tri, torch.zeros_like(tri)).reshape(-1)
    uv0 = interpolate(rs.uv0, rs.faces, t, bary.reshape(-1, 2))
    ys, xs = torch.meshgrid(torch.arange(n, device=rs.device), torch.arange(n, device=rs.device), indexing="ij")
    uv1 = torch.stack(((xs.reshape(-1) + 0.5) / n, (ys.reshape(-1) + 0.5) / n), 1).to(rs.dtype)
    luma = sample_bilinear(model.decode(model.store(model.luma, hard=True)), uv0)
    chroma = sample_bilinear(model.decode(model.store(model.chroma, hard=True)), uv1, wrap_s="clamp", wrap_t="clamp")
    display = model.display(luma * chroma).reshape(n, n, 3)
    return display.float().cpu().numpy()


def lod_alpha_mode(see_through: dict[int, str]) -> str:
    """The LOD's one ``alphaMode`` from its see-through materials (index -> mode,
    :func:`~neuralbake.io.gltf.model.see_through_materials`): ``BLEND`` when one blends, else ``MASK`` (cut-outs at
    0.5 of the carried alpha, :func:`transfer_alpha`); ``OPAQUE`` when none lets light through."""
    modes = set(see_through.values())
    return "BLEND" if "BLEND" in modes else "MASK" if "MASK" in modes else "OPAQUE"


@torch.no_grad()
def transfer_alpha(rs: Any, size: int, see_through: dict[int, str]) -> torch.Tensor:
    """The source's alpha carried into the LOD's uv1 texture ``[size, size, 1]``: at each texel's surface point, the
    base colour factor's alpha times the vertex colours' times the base colour texture's (bilinear, in the slot's
    uv set). A ``MASK`` material's alpha is stored as its alpha test's coverage (the renderer's ramp), so a LOD
    cutoff of 0.5 cuts where the source's own cutoff did; ``BLEND`` stores alpha; materials that draw opaque (not in
    ``see_through``, index -> mode) store 1."""
    tri, bary = rasterize_uv(rs.uv1, rs.faces, size)
    covered = (tri >= 0).reshape(-1)
    t = tri.reshape(-1).clamp(min=0)
    b = bary.reshape(-1, 2)
    material = rs.material_ids[t]
    alpha = torch.ones(size * size, dtype=rs.dtype, device=rs.device)
    for index, m in enumerate(rs.materials):
        rows = torch.nonzero(covered & (material == index)).reshape(-1)
        if rows.numel() == 0 or index not in see_through:
            continue
        value = m.base_color_factor.to(rs.dtype)[3] * interpolate(rs.colors[:, 3:], rs.faces, t[rows], b[rows])[:, 0]
        slot = m.textures.get("base_color")
        if slot is not None and slot.texels.shape[-1] in (2, 4):
            uv = interpolate(rs.uv1 if slot.texcoord == 1 else rs.uv0, rs.faces, t[rows], b[rows])
            value = value * sample_bilinear(slot.texels.detach(), uv, wrap_s=slot.wrap_s, wrap_t=slot.wrap_t)[:, -1]
        if m.alpha_mode == "MASK":  # its alpha test, ramped as the renderer's coverage; in a BLEND LOD too
            value = (value - m.alpha_cutoff) / MASK_EDGE + 0.5
        alpha[rows] = torch.clamp(value, 0.0, 1.0)
    return alpha.reshape(size, size, 1).float()


SKIN_FIELDS = ("joints", "weights", "bind_positions", "bind_normals")
"""Per-vertex skinning attributes a skinned LOD keeps through the fit."""


def skin_of(scene: Scene | None) -> int | None:
    """The one skin every mesh of ``scene`` uses (its index), or ``None`` when the LOD is not skinned
    as a whole (no rig, an unskinned mesh, or several skins: then the fit writes the rest pose)."""
    if scene is None or scene.rig is None or not scene.meshes:
        return None
    skins = {m.skin for m in scene.meshes}
    if len(skins) != 1 or None in skins or any(getattr(m, f) is None for m in scene.meshes for f in SKIN_FIELDS):
        return None
    return skins.pop()


@torch.no_grad()
def write_lod(out: Path, model: LodAppearance, rs: Any, config: FitConfig, scene: Scene | None = None,
              see_through: dict[int, str] | None = None) -> dict[str, Any]:
    """Write ``lod.gltf`` and the stored textures (codes, tone map) into ``out``; return the payload sizes.

    ``scene``: the loaded LOD (after any uv1 unwrap, in :func:`~neuralbake.render.scene.prepare_scene`'s
    vertex order). When it is skinned as a whole (:func:`skin_of`), the LOD keeps its skin, joints,
    weights and animations (the fit's appearance does not change how it deforms). ``see_through``: the source
    materials that let light through (index -> mode); with alpha, their meshes get a second LOD material with the
    LOD's alphaMode and the others stay on an OPAQUE one (same texture), so a viewer sorts and depth-writes them as
    the source asked."""
    bits = config.quantize or 16
    material = Material(name="lod_unlit", metallic_factor=0.0, roughness_factor=1.0, unlit=True, double_sided=True)
    cpu = lambda t: t.detach().float().cpu().numpy()
    info: dict[str, Any] = {}
    codes: dict[str, np.ndarray] = {}
    colours = None
    if config.target == "vertex-color":
        stored = model.store(model.vertex, hard=True)
        lin = stored
        if model.tonemap is not None:  # a standard viewer shows COLOR_0 directly: store the display colour (linearised)
            lin = srgb_to_linear(tone_map(model.tonemap(stored), operator=config.display_tone_map, exposure=config.exposure))
            codes["codes_vertex"] = cpu(stored)
        colours = torch.cat((lin, torch.ones_like(lin[:, :1])), 1)
    # One mesh per source material (the vertices it uses), all on the LOD material.
    attributes = ("normals", "uv0", "colors") if config.target == "vertex-color" else ("normals", "uv0", "uv1")
    skin = skin_of(scene)
    extra = None
    if skin is not None:
        assert scene is not None
        extra = {f: np.concatenate([getattr(m, f) for m in scene.meshes]) for f in SKIN_FIELDS}
        # the rest pose is unchanged (fit --shape refuses skinned LODs), so the bind pose carries over as loaded
        info["skinned"] = True
    layered = model.alpha_mode != "OPAQUE" and config.target == "unlit"
    meshes = rs.gltf_meshes(attributes=attributes, colors=colours, material=None if layered else 0, name_prefix="lod_", extra=extra)
    if layered:
        meshes = [replace(m, material=1 if m.material in (see_through or {}) else 0) for m in meshes]
    if skin is not None:
        meshes = [replace(m, skin=skin) for m in meshes]
    if config.target == "vertex-color":
        info["bytes"] = int(model.vertex.shape[0] * 3 * (1 if config.quantize else 4))
    elif config.target == "unlit":
        stored = model.store(model.texture, hard=True)
        if model.tonemap is None:
            shown = cpu(stored)
        else:
            shown = cpu(model.display(stored))
            codes["codes_uv1"] = cpu(stored)
        if layered:  # the carried alpha rides in the texture's fourth channel
            shown = np.concatenate((shown, cpu(model.alpha)), -1)
            info["alpha_mode"] = model.alpha_mode
        material.base_color_texture = TextureRef(shown, texcoord=1, wrap_s="clamp", wrap_t="clamp", name="lod_uv1")
        info["bytes"] = int(shown.size * (1 if config.quantize else 2))
    else:
        shown = _baked_uv1_texture(model, rs, config)
        material.base_color_texture = TextureRef(shown, texcoord=1, wrap_s="clamp", wrap_t="clamp", name="lod_combined_uv1")
        save_png(out / "luma_uv0.png", cpu(model.store(model.luma, hard=True))[..., 0], bits=bits)
        save_png(out / "chroma_uv1.png", cpu(model.store(model.chroma, hard=True)), bits=bits)
        info["bytes"] = int((model.luma.numel() + model.chroma.numel()) * (1 if config.quantize else 2))
        info["combined_texture_bytes"] = int(shown.size * (1 if config.quantize else 2))
    for name, array in codes.items():
        if array.ndim == 3:
            save_png(out / f"{name}.png", array, bits=bits)
        else:
            with atomic_path(out / f"{name}.npy") as tmp:
                np.save(tmp, array)
    if model.tonemap is not None:
        atomic_write_json(
            out / "tonemap.json",
            {
                "order": model.tonemap.order,
                **model.tonemap.parameters_named(),
                "display_tone_map": config.display_tone_map,
                "exposure": config.exposure,
            },
        )
    materials = [material]
    if layered:
        materials.append(replace(material, name="lod_unlit_alpha", alpha_mode=model.alpha_mode, alpha_cutoff=0.5))
    lod = Scene(meshes=meshes, materials=materials, source=None, rig=scene.rig if skin is not None and scene is not None else None)
    write_gltf(out / "lod.gltf", pose_scene(lod) if skin is not None else lod, texture_bits=8 if config.quantize else 16)
    return info
