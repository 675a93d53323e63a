"""The skin bake's body on the one run path: transfer the original's skin weights onto the LOD,
fit them over the original's animation, prune to glTF's four influences, judge transferred against
fitted weights on held-out frames, write the skinned LOD, the frame strip and the report."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun
from neuralbake.bakes.skin.config import SkinConfig, device_defaults, skin_footprint
from neuralbake.core.metrics import psnr
from neuralbake.errors import InputError
from neuralbake.io.gltf import Scene, load_bake_input, write_gltf
from neuralbake.io.images import save_png
from neuralbake.nn.convergence import curve_record
from neuralbake.render.camera import fibonacci_orbit, framing_radius, random_orbit
from neuralbake.render.deferred import DirectionalLight, Lighting, render
from neuralbake.render.gbuffer import interpolate
from neuralbake.render.pictures import panel_grid
from neuralbake.render.posing import Posable
from neuralbake.render.skinning import blend_matrices, pose_scene, skin_normals, skin_positions
from neuralbake.render.visibility import closest_points

__all__ = ["SKIN", "skin_lod"]

STRIP_FRAMES = 4


def _inputs(config: SkinConfig) -> tuple[Scene, Scene]:
    # see-through materials render with their layers (the image term compares composited frames)
    reference = pose_scene(load_bake_input(config.reference, field="reference", max_triangles=config.max_triangles, see_through=True))
    skins = {m.skin for m in reference.meshes if m.skin is not None}
    if not skins:
        raise InputError("the reference has no skin: there are no joints to bind the LOD to.", path=config.reference, field="reference",
                         fix="pass the skinned original (a glTF with a skin, JOINTS_0 and WEIGHTS_0).")
    if len(skins) > 1:
        raise InputError("the reference's meshes use several skins; skin fits one skeleton at a time.", path=config.reference, field="reference",
                         fix="export the character with one skin.")
    if not reference.rig.clips or reference.rig.clips[0].duration <= 0:
        raise InputError("the reference has no animation clip to fit the weights over.", path=config.reference, field="reference",
                         fix="export the original with at least one animation.")
    lod = pose_scene(load_bake_input(config.lod, field="lod", max_triangles=config.max_triangles, see_through=True))
    return lod, reference


def _rest_positions(scene: Scene) -> np.ndarray:
    """Every mesh's rest-pose positions (a skinned LOD is posed at rest), merged in mesh order."""
    return np.concatenate([m.positions for m in scene.meshes]).astype(np.float32)


def _dense_weights(reference: Posable) -> torch.Tensor:
    """``[V, J + 1]`` per-vertex weights of every joint of the reference (the last: its identity joint)."""
    joints, weights = reference.joints, reference.weights.to(torch.float32)
    dense = torch.zeros(joints.shape[0], int(reference.matrices(None).shape[0]), device=joints.device)
    dense.scatter_add_(1, joints, weights)
    return dense


def _top(weights: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest weights per row, renormalised, and their joint indices."""
    values, index = torch.topk(weights, min(k, weights.shape[1]), dim=1)
    values = values.clamp(min=0)
    if values.shape[1] < k:  # fewer joints than slots: the rest stay empty
        pad = k - values.shape[1]
        values = torch.cat((values, values.new_zeros(values.shape[0], pad)), 1)
        index = torch.cat((index, index.new_zeros(index.shape[0], pad)), 1)
    return index, values / values.sum(1, keepdim=True).clamp(min=1e-12)


NEIGHBOUR_LOGIT = -7.0
"""Starting logit of a skeleton-neighbour candidate (a weight of about e^-7 = 0.1 % next to a transferred weight of 1)."""


def _candidates(reference: Posable, dense: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per vertex, ``count`` candidate joints: its transferred joints (weights > 0, strongest first), then
    the skeleton neighbours (parent, children) of the strongest one, marked by weight -1; unused slots 0."""
    skin = reference.rig.skins[reference.skin]
    joints = [int(j) for j in skin.joints]
    slot = {node: k for k, node in enumerate(joints)}
    neighbours = []
    for k, node in enumerate(joints):
        near = [slot[c] for c, n in enumerate(reference.rig.nodes) if n.parent == node and c in slot]
        parent = reference.rig.nodes[node].parent
        if parent in slot:
            near.append(slot[parent])
        neighbours.append(near)
    width = max(1, max(len(n) for n in neighbours))
    table = torch.full((dense.shape[1], width), -1, dtype=torch.int64)
    for k, near in enumerate(neighbours):
        table[k, : len(near)] = torch.tensor(near, dtype=torch.int64)
    values, index = torch.topk(dense, min(count, dense.shape[1]), dim=1)
    values = torch.where(values > 0, values / values.clamp(min=0).sum(1, keepdim=True).clamp(min=1e-12), torch.zeros_like(values))
    table = table.to(dense.device)
    extra = table[index[:, 0]]  # neighbours of the strongest transferred joint
    used = (values > 0).sum(1, keepdim=True)
    for c in range(extra.shape[1]):
        column = extra[:, c : c + 1]
        free = (used < index.shape[1]) & (column >= 0) & ~(index == column).any(1, keepdim=True)
        position = used.clamp(max=index.shape[1] - 1)
        index = torch.where(free & (torch.arange(index.shape[1], device=index.device)[None] == position), column.expand_as(index), index)
        values = torch.where(free & (torch.arange(index.shape[1], device=index.device)[None] == position), torch.full_like(values, -1.0), values)
        used = used + free.long()
    index = torch.where(values == 0, torch.zeros_like(index), index)  # empty slots point at joint 0 (their weight stays 0)
    return index, values


def _vertex_error(bind: torch.Tensor, joints: torch.Tensor, weights: torch.Tensor, matrices: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean distance of the skinned LOD vertices from their targets ``[F, V, 3]`` over frames (``[F]``;
    ``matrices`` ``[F, J, 4, 4]``: every frame skinned at once)."""
    return (skin_positions(bind, joints, weights, matrices) - targets).norm(dim=-1).mean(-1)


def _body(run: BakeRun) -> BakeOutcome:
    started = time.perf_counter()
    config: SkinConfig = run.config
    device = run.device
    lod_scene, reference_scene = _inputs(config)
    reference = Posable(reference_scene, device)
    clip = reference.rig.clips[0]
    diagonal = float(np.linalg.norm(np.subtract(*reference_scene.bounds())))

    # transfer: each LOD vertex takes the weights of the closest point of the original's rest surface
    rest = torch.from_numpy(_rest_positions(lod_scene)).to(device)
    with run.task("transferring weights", 1) as advance:
        triangle, bary = closest_points(reference.rs.positions.detach().float(), reference.rs.faces, rest)
        dense = interpolate(_dense_weights(reference), reference.rs.faces, triangle, bary.float())
        advance(1)
    candidates, candidate_weights = _candidates(reference, dense, config.candidates)
    transferred_joints, transferred_weights = _top(dense, config.influences)
    identity = reference.matrices(None).shape[0] - 1
    rest_blend = blend_matrices(transferred_joints, transferred_weights, reference.matrices(None).float())
    bind = (torch.linalg.inv(rest_blend.double()) @ torch.cat((rest.double(), torch.ones_like(rest[:, :1]).double()), 1)[..., None])[:, :3, 0].float()

    def targets_at(times: list[float | None]) -> tuple[torch.Tensor, torch.Tensor]:
        matrices, targets = [], []
        for t in times:
            matrices.append(reference.matrices(t).float())
            with torch.no_grad():  # positions only: no BVH refit, no normals
                posed = skin_positions(reference.bind, reference.joints, reference.weights, reference.matrices(t)).float()
            targets.append(interpolate(posed, reference.rs.faces, triangle, bary.float()))
        return torch.stack(matrices), torch.stack(targets)

    train_times = [None] + [clip.duration * k / config.frames for k in range(config.frames)]
    held_times = [clip.duration * (k + 0.5) / config.held_out_frames for k in range(config.held_out_frames)]
    train_matrices, train_targets = targets_at(train_times)
    held_matrices, held_targets = targets_at(held_times)

    # image term and judgement: the LOD (its own materials) against the original at orbit views
    lod = Posable(lod_scene, device)
    lo, hi = reference_scene.bounds()
    centre = tuple(float(v) for v in (lo + hi) / 2)
    radius = framing_radius(0.5 * diagonal, config.fov_y_deg)
    cameras = fibonacci_orbit(config.views, radius, target=centre, fov_y_deg=config.fov_y_deg)
    held_cameras = random_orbit(max(1, config.views // 2), radius, seed=config.seed + 7919, target=centre, fov_y_deg=config.fov_y_deg)
    lighting = Lighting(directional=[DirectionalLight(direction=(-0.45, 0.75, 0.5), irradiance=2.0), DirectionalLight(direction=(0.45, -0.75, -0.5), irradiance=0.8)],
                        shadows=False, background=(0.18, 0.18, 0.18))
    size = config.render_size

    def reference_image(camera: Any, t: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            out = render(reference.show(t), camera, size, size, lighting, antialias=True)
        return out.ldr, out.alpha

    def lod_render(camera: Any, t: float | None, joints: torch.Tensor, weights: torch.Tensor, matrices: torch.Tensor) -> Any:
        rs = lod.rs
        rs.set_positions(skin_positions(bind, joints, weights, matrices).to(rs.dtype))
        rs.normals = skin_normals(lod_bind_normals, joints, weights, matrices).detach().to(rs.dtype)
        return render(rs, camera, size, size, lighting, antialias=True)

    # the LOD's bind normals: its rest normals pulled back through the rest blend (cofactor of the inverse)
    rest_normals = torch.from_numpy(np.concatenate([m.normals if m.normals is not None else np.tile([0.0, 0.0, 1.0], (len(m.positions), 1)) for m in lod_scene.meshes]).astype(np.float32)).to(device)
    lod_bind_normals = torch.nn.functional.normalize((rest_blend[:, :3, :3].transpose(1, 2) @ rest_normals[..., None])[..., 0], dim=1)

    image_pairs = [(c, t) for c in cameras for t in train_times[1:]] if config.image_weight > 0 else []
    with run.task("rendering the original", len(image_pairs) + len(held_cameras) * len(held_times), unit="views") as advance:
        references = {}
        for index, (camera, t) in enumerate(image_pairs):
            references[("train", index)] = reference_image(camera, t)
            advance(1)
        for c, camera in enumerate(held_cameras):
            for f, t in enumerate(held_times):
                references[("held", c, f)] = reference_image(camera, t)
                advance(1)

    # transferred joints start at their weights, the skeleton neighbours of the strongest one just
    # above zero (so the fit can blend across a joint), padding slots stay out (-inf: softmax gives 0)
    logits = torch.where(candidate_weights > 0, torch.log(candidate_weights.clamp(min=1e-4)), torch.full_like(candidate_weights, -torch.inf))
    logits = torch.where(candidate_weights < 0, torch.full_like(logits, NEIGHBOUR_LOGIT), logits)
    logits = logits.detach().requires_grad_(True)
    optimiser = torch.optim.Adam([logits], lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    curve = []
    fit_started = time.perf_counter()
    assert config.steps is not None
    def image_term(index: int, weights: torch.Tensor) -> torch.Tensor:
        camera, t = image_pairs[index]
        out = lod_render(camera, t, candidates, weights, reference.matrices(t).float())
        ref_image, ref_alpha = references[("train", index)]
        return (out.ldr - ref_image).abs().mean() + (out.alpha - ref_alpha).abs().mean()

    # Both terms are measured relative to where the transfer left them (the vertex term over the training
    # frames, the image term per view and frame), so image_weight is their ratio whatever the asset's
    # scale or the renders' size; raw, the image term would outweigh the vertex term several times over.
    with torch.no_grad():
        start = torch.softmax(logits, dim=1)
        vertex_start = _vertex_error(bind, candidates, start, train_matrices, train_targets).mean().clamp(min=1e-12)
        image_start = [image_term(i, start).clamp(min=1e-6) for i in range(len(image_pairs))]
    with run.task("fitting the weights", config.steps, unit="steps") as advance:
        for step in range(config.steps):
            optimiser.zero_grad()
            weights = torch.softmax(logits, dim=1)
            loss = _vertex_error(bind, candidates, weights, train_matrices, train_targets).mean() / vertex_start
            if image_pairs:
                index = int(torch.randint(len(image_pairs), (1,), generator=generator))
                loss = loss + config.image_weight * image_term(index, weights) / image_start[index]
            loss.backward()
            optimiser.step()
            curve.append(loss.detach())  # kept on the device: a float() here would wait for every step
            advance(1)
    curve = torch.stack(curve).tolist() if curve else []
    fit_seconds = time.perf_counter() - fit_started

    with torch.no_grad():
        fitted = torch.softmax(logits, dim=1)
        dense_fit = torch.zeros_like(dense).scatter_add_(1, candidates, fitted)
        pruned_joints, pruned_weights = _top(dense_fit, config.influences)
        errors = {
            "transferred": float(_vertex_error(bind, transferred_joints, transferred_weights, held_matrices, held_targets).mean()) / diagonal,
            "fitted": float(_vertex_error(bind, candidates, fitted, held_matrices, held_targets).mean()) / diagonal,
            "fitted_pruned": float(_vertex_error(bind, pruned_joints, pruned_weights, held_matrices, held_targets).mean()) / diagonal,
        }

        def judge(joints: torch.Tensor, weights: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
            scores, images = [], []
            for c, camera in enumerate(held_cameras):
                for f, t in enumerate(held_times):
                    out = lod_render(camera, t, joints, weights, reference.matrices(t).float())
                    scores.append(psnr(out.ldr, references[("held", c, f)][0]))
                    if c == 0:
                        images.append(out.ldr)
            return float(np.mean(scores)), images

        transferred_psnr, transferred_images = judge(transferred_joints, transferred_weights)
        fitted_psnr, fitted_images = judge(pruned_joints, pruned_weights)

    # the skinned LOD: the reference's rig, the LOD's meshes in their bind pose with the pruned weights
    out = run.stage
    skin = next(m.skin for m in reference_scene.meshes if m.skin is not None)
    padded_joints = torch.zeros(bind.shape[0], 4, dtype=torch.int64, device=device)
    padded_weights = torch.zeros(bind.shape[0], 4, device=device)
    padded_joints[:, : config.influences], padded_weights[:, : config.influences] = pruned_joints, pruned_weights
    padded_joints[padded_weights <= 0] = 0  # unused slots point at joint 0, inside the skin
    if bool((padded_joints[padded_weights > 0] == identity).any()):
        raise InputError("part of the LOD lies closest to an unskinned part of the reference.", path=config.lod, field="lod",
                         fix="skin the whole original, or split the static parts off the LOD.")
    cuts = np.cumsum([len(m.positions) for m in lod_scene.meshes])[:-1]
    split = lambda t: np.split(t.detach().float().cpu().numpy(), cuts)  # noqa: E731
    meshes = []
    for m, b, n, j, w in zip(lod_scene.meshes, split(bind), split(lod_bind_normals), np.split(padded_joints.cpu().numpy(), cuts), split(padded_weights)):
        meshes.append(replace(m, skin=skin, bind_positions=np.ascontiguousarray(b), bind_normals=np.ascontiguousarray(n), bind_tangents=None, tangents=None,
                              joints=j.astype(np.uint16), weights=np.ascontiguousarray(w)))
    skinned = pose_scene(replace(lod_scene, meshes=meshes, rig=reference_scene.rig))
    write_gltf(out / "lod.glb", skinned)
    with torch.no_grad():
        rows = []
        for f, t in enumerate(held_times[:STRIP_FRAMES]):
            rows.append([references[("held", 0, f)][0].cpu().numpy(), transferred_images[f].cpu().numpy(), fitted_images[f].cpu().numpy()])
    save_png(out / "frames.png", panel_grid(rows))
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    metrics = {"vertex_error": errors["fitted_pruned"], "transferred_vertex_error": errors["transferred"], "psnr_db": fitted_psnr, "transferred_psnr_db": transferred_psnr}
    fields = {
        "vertex_error_before_pruning": errors["fitted"],
        "pruning_cost": errors["fitted_pruned"] - errors["fitted"],
        "influences": config.influences,
        "candidates": int(candidates.shape[1]),
        "frames": config.frames,
        "held_out_frames": config.held_out_frames,
        "clip": clip.name,
        "vertices": int(bind.shape[0]),
        "steps": config.steps,
        "loss_curve": curve[:: max(1, len(curve) // 100)],
        "training": curve_record(curve, 1, phase="weights", seconds=fit_seconds, smooth=max(1, len(curve) // 50)),
        "loss_definition": "vertex term / its value with the transferred weights + image_weight x image term / its value with them (1 + image_weight at the start)",
        "ms_per_step": 1000.0 * fit_seconds / max(1, config.steps),
        "seconds": time.perf_counter() - started,
        "peak_gpu_memory_bytes": peak,
        "learned_initialisation": "not used: no skinning network (SkinNet) is trained or shipped here; the weights start from the transfer",
        "metrics_definition": (
            "vertex_error: mean distance (fraction of the original's bounding-box diagonal) between each skinned LOD vertex and the point of "
            "the original's surface it was bound to, both posed, over held-out frames (between the fitted ones); pruned to `influences` joints. "
            "psnr_db: renders of the skinned LOD against the original at held-out views and frames"
        ),
    }
    return BakeOutcome(metrics, fields, curve_title=None)


SKIN = Bake("skin", SkinConfig, _body, device_defaults=device_defaults, title="skin", footprint=skin_footprint)
"""Skin-weight transfer and fitting, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def skin_lod(config: SkinConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Skin ``config.lod`` like ``config.reference`` into ``out_dir`` (see :mod:`neuralbake.bakes.skin`); return the report."""
    return SKIN.run(config, out_dir, **options)
