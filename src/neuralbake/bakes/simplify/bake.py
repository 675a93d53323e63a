"""The simplify bake's body on the one run path: render the original, decimate (optionally twice,
the second time guided by where the first result's renders differ), fit the decimated shape to the
original's renders with large steps, judge QEM alone against the fitted LOD on held-out views,
locate the LOD's high-error regions, write the LOD, the triptych and the report."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.bakes.simplify.config import SimplifyConfig, device_defaults, simplify_footprint
from neuralbake.bakes.simplify.decimate import Decimated, decimate_scene, non_manifold_edges, triangle_budget, weld
from neuralbake.bakes.simplify.shape import ShapeView, fit_shape
from neuralbake.core.metrics import psnr
from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene, load_bake_input, write_gltf
from neuralbake.io.images import load_image, save_png
from neuralbake.nn.convergence import curve_record
from neuralbake.render.camera import Camera, fibonacci_orbit, framing_radius, random_orbit
from neuralbake.render.compare import flip_error_ldr
from neuralbake.render.deferred import DirectionalLight, Lighting, render
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.pictures import error_heat_map, panel_grid
from neuralbake.render.posing import Posable
from neuralbake.render.scene import RenderScene
from neuralbake.render.skinning import pose_scene

__all__ = ["SIMPLIFY", "simplify_lod"]

TRIPTYCH_MAX_PIXELS = 33_554_432
"""Largest triptych.png: past it every panel is shrunk by a whole factor (64 held-out views at 4096² would be 4.3 G pixels)."""
HIGH_ERROR_REGIONS = 5


def _load(config: SimplifyConfig) -> Scene:
    path = Path(config.asset)
    if path.is_file() and config.protect_mask is not None and not Path(config.protect_mask).is_file():
        raise InputError("the protect mask does not exist.", path=config.protect_mask, field="protect_mask", fix="pass a greyscale PNG in uv0 space.")
    scene = pose_scene(load_bake_input(path, max_triangles=config.max_triangles, see_through=True))
    if len({m.skin for m in scene.meshes if m.skin is not None}) > 1:
        raise InputError(
            "the asset's meshes use several skins; simplify fits one skeleton at a time.", path=path, field="skins",
            fix="export the character with one skin (e.g. Blender: one armature), or simplify its parts separately.",
        )
    names = {m.name for m in scene.materials}
    unknown = sorted(set(config.protect_materials) - names)
    if unknown:
        raise InputError(
            f"protect_materials names {unknown[0]!r}, which the asset does not have.", path=path, field="protect_materials",
            fix=f"use the asset's material names: {', '.join(sorted(names))}.",
        )
    if config.protect_mask is not None and any(m.uv0 is None for m in scene.meshes):
        raise InputError("the protect mask lives in uv0 space, but a mesh has no TEXCOORD_0.", path=path, field="protect_mask", fix="drop the mask or unwrap uv0.")
    return scene


def _load_lod(config: SimplifyConfig, original: Scene) -> Scene:
    path = Path(str(config.lod))
    lod = pose_scene(load_bake_input(path, field="lod", max_triangles=config.max_triangles, problem="the given lod does not exist.",
                                     fix="pass a .gltf or .glb, or leave lod unset to decimate.", see_through=True))
    if any(m.skin is not None for m in lod.meshes) and not any(m.skin is not None for m in original.meshes):
        raise InputError("the given lod is skinned but the asset is not.", path=path, field="lod", fix="pass a static LOD of a static asset.")
    return lod


def _protect(scene: Scene, config: SimplifyConfig) -> list[np.ndarray | None] | None:
    """Per mesh, the vertices an artist protects (by material name or by the uv0 mask)."""
    if not config.protect_materials and config.protect_mask is None:
        return None
    mask = None
    if config.protect_mask is not None:
        image, _ = load_image(config.protect_mask)
        mask = image[..., :3].mean(-1) if image.shape[2] >= 3 else image[..., 0]
    out = []
    for mesh in scene.meshes:
        keep = np.full(len(mesh.positions), scene.materials[mesh.material].name in config.protect_materials)
        if mask is not None:
            h, w = mask.shape
            uv = np.mod(mesh.uv0, 1.0)
            keep |= mask[np.minimum((uv[:, 1] * h).astype(int), h - 1), np.minimum((uv[:, 0] * w).astype(int), w - 1)] > 0.5
        out.append(keep)
    return out


def _views(original: Posable, cameras: list[Camera], times: list[float | None], size: int, lighting: Lighting, advance: Any) -> list[ShapeView]:
    views = []
    for camera, at in zip(cameras, times):
        view = ShapeView(camera, torch.empty(0), torch.empty(0), at)
        with torch.no_grad():
            out = render(original.show(view.time), camera, size, size, lighting, antialias=True)
        view.image, view.alpha = out.ldr.detach(), out.alpha.detach()
        views.append(view)
        advance(1)
    return views


def _vertex_error(original: Posable, lod: Posable, views: list[ShapeView], lighting: Lighting, lod_positions: torch.Tensor | None = None) -> np.ndarray:
    """Per vertex of the original, the mean render difference (display + coverage) of ``lod`` over
    the pixels where the original shows that vertex's triangles (barycentric shares)."""
    total = torch.zeros(original.rs.positions.shape[0], dtype=torch.float64)
    weight = torch.zeros_like(total)
    for view in views:
        height, width = view.alpha.shape
        with torch.no_grad():
            ours = render(lod.show(view.time, lod_positions), view.camera, width, height, lighting, antialias=True)
            seen = render(original.show(view.time), view.camera, width, height, lighting).gbuffer
        error = ((ours.ldr - view.image).abs().mean(-1) + (ours.alpha - view.alpha).abs()).reshape(-1)[seen.pixel].double().cpu()
        corners = original.rs.faces[seen.triangle].cpu()
        bary = seen.barycentrics.detach().double().cpu()
        shares = torch.stack((1 - bary.sum(1), bary[:, 0], bary[:, 1]), 1)
        total.index_add_(0, corners.reshape(-1), (shares * error[:, None]).reshape(-1))
        weight.index_add_(0, corners.reshape(-1), shares.reshape(-1))
    return torch.where(weight > 0, total / weight.clamp(min=1e-12), torch.zeros_like(total)).numpy()


def _per_mesh(scene: Scene, values: np.ndarray) -> list[np.ndarray]:
    cuts = np.cumsum([len(m.positions) for m in scene.meshes])[:-1]
    return np.split(values, cuts)


def _judge(lod: Posable, views: list[ShapeView], lighting: Lighting, positions: torch.Tensor | None = None) -> tuple[dict[str, float], list[torch.Tensor]]:
    images, psnrs, flips = [], [], []
    for view in views:
        height, width = view.alpha.shape
        with torch.no_grad():
            out = render(lod.show(view.time, positions), view.camera, width, height, lighting, antialias=True)
        images.append(out.ldr)
        psnrs.append(psnr(out.ldr, view.image))
        flips.append(flip_error_ldr(view.image, out.ldr))
    return {"psnr_db": float(np.mean(psnrs)), "flip": float(np.mean(flips))}, images


def _joint_weights(scene: Scene, weight: float) -> list[np.ndarray] | None:
    """Decimation weights: ``weight`` where a skinned vertex's influence is shared between joints (where it bends)."""
    if weight <= 1.0 or not any(m.skin is not None for m in scene.meshes):
        return None
    return [np.where(m.weights.max(1) < 0.9, weight, 1.0) if m.skin is not None else np.ones(len(m.positions)) for m in scene.meshes]


def _regions(original: RenderScene, error: np.ndarray, count: int = HIGH_ERROR_REGIONS) -> list[dict[str, Any]]:
    """The ``count`` worst places: greedy picks of the highest-error vertices, each region taking the
    vertices within a tenth of the asset's size around its seed."""
    positions = original.positions.detach().cpu().double().numpy()
    radius = 0.1 * float(np.linalg.norm(positions.max(0) - positions.min(0)))
    left = error.copy()
    regions = []
    for _ in range(count):
        seed = int(np.argmax(left))
        if left[seed] <= 0:
            break
        near = np.linalg.norm(positions - positions[seed], axis=1) < radius
        regions.append({"centre": positions[seed].round(4).tolist(), "vertices": int(near.sum()), "mean_error": float(error[near].mean()), "peak_error": float(error[seed])})
        left[near] = 0.0
    return regions


def _body(run: BakeRun) -> BakeOutcome:
    started = time.perf_counter()
    config: SimplifyConfig = run.config
    device = run.device
    scene = _load(config)
    target = triangle_budget(scene.num_triangles, ratio=config.ratio, triangles=config.triangles or None)
    lo, hi = scene.bounds()
    diagonal = float(np.linalg.norm(hi - lo))
    centre = tuple(float(v) for v in (lo + hi) / 2)
    radius = framing_radius(float(max(np.linalg.norm(m.positions - (lo + hi) / 2, axis=1).max() for m in scene.meshes)), config.fov_y_deg)
    train_cameras = fibonacci_orbit(config.views, radius, target=centre, fov_y_deg=config.fov_y_deg)
    held_cameras = random_orbit(config.held_out_views, radius, seed=config.seed + 7919, target=centre, fov_y_deg=config.fov_y_deg)
    env = EnvironmentLight.from_map(default_environment(128, 64, device=device)) if config.environment else None
    lighting = Lighting(
        # a key light and a dimmer fill from the other side: noise-free, and no side of the asset left black
        directional=[DirectionalLight(direction=tuple(config.light_direction), irradiance=2.0),
                     DirectionalLight(direction=tuple(-v for v in config.light_direction), irradiance=0.8)], environment=env,
        environment_samples=config.environment_samples, shadows=False, seed=config.seed, background=(0.18, 0.18, 0.18),
    )
    original = Posable(scene, device)
    clip = scene.rig.clips[0] if original.rig is not None and scene.rig.clips else None
    if clip is not None and clip.duration > 0:
        # training views cycle through frames spread over the first clip; held-out views fall between them
        train_times = [clip.duration * (k % config.frames) / config.frames for k in range(len(train_cameras))]
        held_times = [clip.duration * ((k % config.frames) + 0.5) / config.frames for k in range(len(held_cameras))]
    else:
        train_times, held_times = [None] * len(train_cameras), [None] * len(held_cameras)
    size = config.render_size
    with run.task("rendering the original", len(train_cameras) + len(held_cameras), unit="views") as advance:
        train_views = _views(original, train_cameras, train_times, size, lighting, advance)
        held_views = _views(original, held_cameras, held_times, size, lighting, advance)

    protect = _protect(scene, config)
    joint = _joint_weights(scene, config.joint_weight) if config.lod is None else None
    if config.lod is not None:
        given = _load_lod(config, scene)
        qem = Decimated(scene=given, source_vertex=[], triangles_before=scene.num_triangles, triangles_after=given.num_triangles)
    else:
        qem = decimate_scene(scene, target, vertex_weights=joint, protect=protect)
    chosen: Decimated = qem
    guided = None
    if config.image_guidance > 0:
        error = _vertex_error(original, Posable(qem.scene, device), train_views, lighting)
        relative = error / max(float(error[error > 0].mean()) if (error > 0).any() else 1.0, 1e-12)
        weights = [w * (1.0 if joint is None else j) for w, j in zip(_per_mesh(scene, 1.0 + config.image_guidance * relative), joint or [1.0] * len(scene.meshes))]
        guided = chosen = decimate_scene(scene, target, vertex_weights=weights, protect=protect)

    qem_scores, qem_images = _judge(Posable(qem.scene, device), held_views, lighting)
    lod = Posable(chosen.scene, device)
    rest = lod.rs.positions.detach() if lod.bind is None else lod.bind
    group_np, _ = weld(rest.cpu().numpy())
    group = torch.from_numpy(group_np).to(device)
    shape_started = time.perf_counter()
    fitted, best = None, rest
    if config.epochs:
        with run.task("fitting the shape", config.epochs * len(train_views), unit="steps") as advance:
            fitted, best = fit_shape(
                lod.rs, group, group[lod.rs.faces], train_views, lighting, epochs=config.epochs, learning_rate=config.learning_rate * diagonal,
                lam=config.smoothness, seed=config.seed, advance=advance, start=rest, deform=None if lod.rig is None else (lambda positions, view: lod.deform(positions, view.time)),
                patience=config.patience,
            )
    shape_seconds = time.perf_counter() - shape_started
    ours_scores, ours_images = _judge(lod, held_views, lighting, best)
    regions = _regions(original.rs, _vertex_error(original, lod, held_views, lighting, best))

    out = run.stage
    fitted_positions = _per_mesh(chosen.scene, best.detach().float().cpu().numpy())
    meshes = []
    for m, p in zip(chosen.scene.meshes, fitted_positions):
        if m.skin is not None and m.bind_positions is not None:
            meshes.append(replace(m, bind_positions=np.ascontiguousarray(p)))
        else:
            meshes.append(replace(m, positions=np.ascontiguousarray(p)))
    result = replace(chosen.scene, meshes=meshes)
    if lod.rig is not None:
        result = pose_scene(result)  # the rest pose of the fitted bind pose
    write_gltf(out / "lod.glb", result if lod.rig is not None else replace(result, rig=None))
    # every held-out view: target | QEM | ours | error, one row each
    size = held_views[0].image.shape[0] * held_views[0].image.shape[1] if held_views else 0
    shrink = max(1, math.ceil(math.sqrt(len(held_views) * 4 * size / TRIPTYCH_MAX_PIXELS)))
    rows = []
    for view, q, o in zip(held_views, qem_images, ours_images):
        panels = [view.image.cpu().numpy(), q.cpu().numpy(), o.cpu().numpy(), np.asarray(error_heat_map(view.image, o, scale=0.25))]
        rows.append([panel[::shrink, ::shrink] for panel in panels])
    save_png(out / "triptych.png", panel_grid(rows))
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    metrics = {"psnr_db": ours_scores["psnr_db"], "flip": ours_scores["flip"], "start_psnr_db": qem_scores["psnr_db"], "start_flip": qem_scores["flip"]}
    fields: dict[str, Any] = {
        "triangles_original": scene.num_triangles,
        "triangles_target": target,
        "non_manifold_edges": sum(non_manifold_edges(m) for m in scene.meshes),
        "triangles": chosen.triangles_after,
        "start": "the given lod" if config.lod is not None else "QEM decimation",
        "start_triangles": qem.triangles_after,
        "image_guidance": config.image_guidance,
        "skinned": original.rig is not None,
        "clip": None if clip is None else clip.name,
        "frames": None if clip is None else config.frames,
        "joint_weighted_vertices": None if joint is None else int(sum(int((w > 1).sum()) for w in joint)),
        "guided_triangles": None if guided is None else guided.triangles_after,
        "views": config.views,
        "held_out_views": config.held_out_views,
        "render_size": size,
        "epochs": config.epochs,
        "steps": 0 if fitted is None else fitted.steps,
        "backtracks": 0 if fitted is None else fitted.backtracks,
        "shape_stopped_by": None if fitted is None else fitted.stopped_by,
        "patience": config.patience,
        "train_loss_curve": [] if fitted is None else fitted.losses,
        # the kept state is the best so far (an epoch that raised the loss is undone), so convergence reads that curve
        "training": {"converged": None} if fitted is None else curve_record(
            list(itertools.accumulate(fitted.losses, min)), len(train_views), phase="shape", seconds=shape_seconds),
        "shape_seconds": shape_seconds,
        "ms_per_step": 1000.0 * shape_seconds / max(1, 0 if fitted is None else fitted.steps),
        "seconds": time.perf_counter() - started,
        "peak_gpu_memory_bytes": peak,
        "high_error_regions": regions,
        "protected_vertices": None if protect is None else int(sum(int(p.sum()) for p in protect if p is not None)),
        "metrics_definition": (
            "held-out views (a seeded random orbit, same light scene), display space, antialiased silhouettes: psnr_db / flip of the "
            "fitted LOD, start_psnr_db / start_flip of what the fit started from (QEM decimation alone at the same budget, or the given lod); "
            "skinned assets: each view at its own animation time (mean over views; FLIP: NVIDIA FLIP, LDR, on the display images)"
        ),
        "high_error_regions_definition": "greedy picks of the original's vertices with the largest mean render difference of the LOD (radius: a tenth of the asset)",
    }
    return BakeOutcome(metrics, fields, curve_title=None)


SIMPLIFY = Bake("simplify", SimplifyConfig, _body, device_defaults=device_defaults, title="simplify", footprint=simplify_footprint)
"""Appearance-driven simplification, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def simplify_lod(config: SimplifyConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Simplify ``config.asset`` into ``out_dir`` (see :mod:`neuralbake.bakes.simplify`); return the report."""
    return SIMPLIFY.run(config, out_dir, **options)
