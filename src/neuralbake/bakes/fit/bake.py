"""The fit's body on the one run path: load and check the asset, render the reference views, train
the LOD's stored values on the shared Trainer (phase ``fit``), write the LOD and the report."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from neuralbake.bakes.fit.config import CPU_DEFAULTS, GPU_DEFAULTS, FitConfig, device_defaults, steps_per_epoch
from neuralbake.bakes.fit.model import LodAppearance, evaluate_views, initialise
from neuralbake.bakes.fit.outputs import lod_alpha_mode, transfer_alpha, triptych_image, write_lod, write_triptych
from neuralbake.bakes.fit.shape import ShapeForwardBackward, ShapeParameters, ShapeTarget, shape_view
from neuralbake.bakes.fit.training import ViewForwardBackward, ViewOrderSampler, soft_temperature_at
from neuralbake.bakes.fit.views import (
    HELD_OUT_BYTES_PER_PIXEL,
    RENDER_BYTES_PER_PIXEL,
    VIEW_BYTES_PER_PIXEL,
    check_view_memory,
    display_background,
    fit_cameras,
    fit_lighting,
    load_weights,
    reference_record,
    render_views,
)
from neuralbake.bakes.footprint import ASSUMED_ASSET_BYTES, RENDERER_BASE_BYTES, TRAINED_PARAMETER_BYTES, dominant_field, footprint
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, Footprint
from neuralbake.core.events import EventSink, EventWriter
from neuralbake.errors import ConfigError, InputError
from neuralbake.io.gltf import Scene, check_opaque, load_bake_input
from neuralbake.io.gltf.model import see_through_materials
from neuralbake.nn.checkpoint import CHECKPOINT_FORMAT, checkpointed_buffers
from neuralbake.render.paint import view_uv_buffer
from neuralbake.render.scene import prepare_scene
from neuralbake.render.skinning import pose_scene
from neuralbake.render.transparency import MAX_LAYERS
from neuralbake.render.uv_raster import generate_uv1_atlas
from neuralbake.render.visibility import warp_available

__all__ = ["FIT", "fit_lod"]

PHASE = "fit"
"""The fit's one training phase (its checkpoint is ``.neuralbake/checkpoints/fit.pt``)."""


def _check_inputs(config: FitConfig) -> None:
    if config.weights is not None and not Path(config.weights).is_file():
        raise InputError(
            "the weights mask does not exist.", path=config.weights, field="weights", fix="pass a greyscale PNG in the asset's uv0 space."
        )
    if config.warm_start is not None and not Path(config.warm_start).is_file():
        raise InputError(
            "the warm-start checkpoint does not exist.",
            path=config.warm_start,
            field="warm_start",
            fix="pass a previous fit's .neuralbake/checkpoints/fit.pt, or leave warm_start unset.",
        )
    if config.shape and config.target == "luma-chroma":
        raise ConfigError(
            "shape fitting moves the vertices under the luminance texture's uv0, which luma-chroma keeps fixed.",
            field="shape",
            fix="fit the shape with --target unlit or vertex-color, or leave --shape off.",
        )
    if config.shadows:
        if not warp_available():
            raise ConfigError(
                "shadows need warp-lang's BVH ray casts, and warp-lang cannot be imported here.",
                field="shadows",
                fix="pip install warp-lang==1.19.0, or fit without shadows (--no-shadows).",
            )


def _see_through_limit(config: FitConfig) -> tuple[str, str, str] | None:
    """The setting that cannot keep a see-through asset's alpha (field, why, fix), or None."""
    if config.target != "unlit":
        return ("target", f"a {config.target} LOD cannot carry its cut-outs and blending (only the unlit texture has an alpha channel)",
                "fit it with --target unlit, which keeps the alpha in the texture and the alphaMode in lod.gltf.")
    if config.shape:
        return ("shape", "shape fitting does not yet render the LOD's see-through layers", "leave --shape off for this asset.")
    if config.tonemap == "fit":
        return ("tonemap", "a fitted tone map stores codes that a glTF viewer cannot blend", "leave --tonemap at none for this asset.")
    return None


def _load_asset(config: FitConfig) -> Scene:
    scene = pose_scene(load_bake_input(config.asset, max_triangles=config.max_triangles, see_through=True))
    limit = _see_through_limit(config)
    if limit is not None:
        field, why, fix = limit
        check_opaque(scene, path=config.asset, field=field, why=why, fix=fix)
    if config.weights is not None and any(m.uv0 is None for m in scene.meshes):
        raise InputError(
            "the weights mask lives in uv0 space, but a mesh has no TEXCOORD_0.",
            path=config.asset,
            field="weights",
            fix="drop --weights or give the asset a uv0 unwrap.",
        )
    if config.target == "luma-chroma" and any(m.uv0 is None for m in scene.meshes):
        raise InputError(
            "luma-chroma stores luminance in uv0, but a mesh has no TEXCOORD_0.",
            path=config.asset,
            field="target",
            fix="use --target unlit (uv1 is generated) or unwrap uv0 first.",
        )
    if config.shape and any(m.skin is not None for m in scene.meshes):
        raise InputError(
            "shape fitting moves a static mesh, and this LOD is skinned (the fit sees its rest pose only).",
            path=config.asset,
            field="shape",
            fix="leave --shape off: neuralbake simplify already fits a skinned LOD's shape over its animation.",
        )
    if config.target != "vertex-color" and (config.uv1 == "generate" or any(m.uv1 is None for m in scene.meshes)):
        assert config.texture_size is not None
        resolution = config.texture_size if config.target == "unlit" else config.chroma_side
        scene = generate_uv1_atlas(scene, resolution=resolution, padding=config.atlas_padding)
    return scene


def _load_reference(config: FitConfig) -> Scene | None:
    if config.reference is None:
        return None
    reference = load_bake_input(config.reference, field="reference", max_triangles=config.max_triangles, problem="the reference asset does not exist.",
                                fix="pass the original .gltf or .glb, or leave reference unset.", see_through=True)
    return pose_scene(reference)


def _compatibility(config: FitConfig) -> dict[str, Any]:
    """What a checkpoint must share with the fit that resumes it: the asset's bytes and every setting
    that shapes the views or the stored values (epochs may grow; device and cadence may change)."""
    settings = {k: v for k, v in asdict(config).items() if k not in ("device", "train", "epochs", "max_triangles")}
    digest = hashlib.sha256(Path(config.asset).read_bytes()).hexdigest()[:16]
    if config.reference is not None:
        settings["reference"] = hashlib.sha256(Path(config.reference).read_bytes()).hexdigest()[:16]
    return json.loads(json.dumps({"asset_sha256": digest, **settings}))


@contextlib.contextmanager
def _listening(events: EventWriter, sink: EventSink) -> Iterator[None]:
    events.sinks.append(sink)
    try:
        yield
    finally:
        events.sinks.remove(sink)


def _body(run: BakeRun) -> BakeOutcome:
    started = time.perf_counter()
    config: FitConfig = run.config
    device = run.device
    check_view_memory(config, device)
    _check_inputs(config)
    scene = _load_asset(config)
    rs = prepare_scene(scene, device=device)
    original = _load_reference(config)
    reference = None if original is None else prepare_scene(original, device=device)
    clear_through = see_through_materials(scene)  # the LOD's materials that let light through
    alpha_mode = lod_alpha_mode(clear_through)
    if original is not None and alpha_mode == "OPAQUE" and see_through_materials(original):
        raise InputError(
            "the reference has see-through materials (alphaMode MASK or BLEND) and this LOD has none, so the fit would learn "
            "what shows through them as the LOD's own colour.", path=config.asset, field="reference",
            fix="fit a LOD that keeps the original's materials (neuralbake simplify or lod does), or a reference without see-through materials.",
        )
    if alpha_mode != "OPAQUE":  # each view keeps every layer's rows
        check_view_memory(config, device, layers=MAX_LAYERS)
    lighting = fit_lighting(config, device)
    background = display_background(config, lighting, device)
    mask = load_weights(config, device)
    train_cams, held_cams = fit_cameras(scene if original is None else original, config)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with run.task("rendering reference views", len(train_cams) + len(held_cams), unit="views") as advance:
        train_views = render_views(
            rs, train_cams, config, lighting, mask, keep_image=config.shape, advance=advance, reference=reference, background=background,
            target_db=config.training_noise_db, layered=alpha_mode != "OPAQUE",
        )
        held_views = render_views(
            rs, held_cams, config, lighting, None, keep_image=True, advance=advance, reference=reference, background=background, first_seed=len(train_cams),
            target_db=config.reference_noise_db, layered=alpha_mode != "OPAQUE",
        )
    if sum(v.pixel.numel() for v in train_views) == 0:
        raise InputError("no training view sees the asset.", path=config.asset, field="views", fix="check the asset's scale and position.")
    precompute_seconds = time.perf_counter() - started
    weighted = [v.weight > 1.0 for v in train_views if v.weight is not None]
    artist = {
        "weights": config.weights,
        "weighted_pixel_fraction": float(torch.cat(weighted).float().mean()) if weighted else 0.0,
        "warm_start": config.warm_start,
        "reference_renders": reference_record(config, train_views, held_views),  # not the artist's, but a report field all the same
    }

    model = LodAppearance(config, rs.faces, rs.positions.shape[0], device)
    if alpha_mode != "OPAQUE":
        assert config.texture_size is not None
        model.cut_out(transfer_alpha(rs, config.texture_size, clear_through), alpha_mode)
    shape = None
    if config.shape:
        model.shape = shape = ShapeParameters(rs.positions, rs.faces, config.shape_smoothness)
        model.checkpointed_buffers = ("shape.",)  # u and its optimiser's moments: trained outside the Trainer's Adam
        start_positions = rs.positions.detach().clone()
    if config.warm_start is not None:
        warm_start(model, config)
    elif config.init == "splat":
        initialise(model, train_views, rs.positions.shape[0])
    if run.previews is not None:
        _publish_paint_views(run, scene, held_views, config)
    assert config.epochs is not None and config.views is not None
    per_epoch = steps_per_epoch(config)
    train = replace(config.train, steps=per_epoch * config.epochs, log_every=per_epoch, eval_every=per_epoch)
    sampler = ViewOrderSampler(config.views, config.views_per_step, config.train.seed)
    temperature = lambda step: soft_temperature_at(step, train.steps, config.soft_temperature)  # noqa: E731
    forward_backward: Any = ViewForwardBackward(model, train_views, temperature)
    held_now: Callable[[], list] = lambda: held_views  # noqa: E731
    on_step: Callable[[Any, int], None] = lambda trainer, step: model.project()  # noqa: E731
    if shape is not None:
        targets = [ShapeTarget(cam, v.image, v.alpha) for cam, v in zip(train_cams, train_views)]
        held_targets = [ShapeTarget(cam, v.image, v.alpha) for cam, v in zip(held_cams, held_views)]
        forward_backward = ShapeForwardBackward(model, shape, rs, targets, background, mask, config.weight_max, temperature)
        for v in train_views:  # the whole frames live on in the targets; the splat start has been taken
            v.image = v.alpha = None
        diagonal = float((rs.positions.max(0).values - rs.positions.min(0).values).norm())

        def shape_step(trainer: Any, step: int) -> None:
            model.project()
            shape.step(config.shape_learning_rate * diagonal * trainer.learning_rate / train.learning_rate)

        def refreshed() -> list:
            with torch.no_grad():
                rs.set_positions(shape.positions().to(rs.dtype))
                return [replace(shape_view(rs, t, None, config.weight_max)[0], background=background) for t in held_targets]

        on_step, held_now = shape_step, refreshed
    lr_scales = {"tonemap.": config.tonemap_learning_rate / train.learning_rate} if model.tonemap is not None else None
    with _listening(run.events, sampler):
        result = run.train(
            model,
            sampler,
            F.mse_loss,  # unused: the view losses run in ViewForwardBackward
            train,
            phase=PHASE,
            evaluate=lambda m: _evaluate_and_preview(run, m, held_now()),  # type: ignore[arg-type]
            compatibility=_compatibility(config),
            forward_backward=forward_backward,
            on_step=on_step,
            lr_scales=lr_scales,
        )
    if shape is not None:
        held_views = held_now()
        moved = (rs.positions.detach() - start_positions).norm(dim=1)
        artist["shape"] = {
            "welded_vertices": shape.welded_vertices,
            "smoothness": config.shape_smoothness,
            "learning_rate": config.shape_learning_rate,
            "mean_displacement": float(moved.mean()) / diagonal,
            "max_displacement": float(moved.max()) / diagonal,
            "displacement_definition": "vertex movement from the input LOD, as a fraction of its bounding-box diagonal",
        }
    return _outcome(run, config, model, rs, held_views, result, started, precompute_seconds, artist, scene)


WARM_START_KEYS = ("asset_sha256", "shape", "target", "texture_size", "chroma_size", "uv1", "atlas_padding", "quantize", "tonemap", "tonemap_order")
"""What a warm-start checkpoint's fit must share with this one: the asset and the stored values' layout."""

PAINT_VIEWS = 8
"""Held-out views (the first ones) that a watcher may paint weights on."""


def warm_start(model: LodAppearance, config: FitConfig) -> None:
    """Load the stored values (and tone map) of a previous fit's checkpoint into ``model``."""
    path = Path(str(config.warm_start))
    fix = "pass the fit.pt of a fit of the same asset with the same target and sizes, or leave warm_start unset."
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for damaged or foreign files
        raise InputError(f"the warm-start checkpoint cannot be read ({exc}).", path=path, field="warm_start", fix=fix) from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or not isinstance(state.get("model"), dict):
        raise InputError("the warm-start file is not a neuralbake checkpoint.", path=path, field="warm_start", fix=fix)
    theirs, ours = state.get("compatibility") or {}, _compatibility(config)
    for key in WARM_START_KEYS:
        if theirs.get(key) != ours.get(key):
            what = "a different asset" if key == "asset_sha256" else f"{key}={theirs.get(key)!r} (this fit: {ours.get(key)!r})"
            raise InputError(f"the warm-start checkpoint is of a fit with {what}.", path=path, field="warm_start", fix=fix)
    with torch.no_grad():
        for name, param in model.named_parameters():
            value = state["model"].get(name)
            if not isinstance(value, torch.Tensor) or value.shape != param.shape:
                raise InputError(f"the warm-start checkpoint has no {name} of shape {tuple(param.shape)}.", path=path, field="warm_start", fix=fix)
            param.copy_(value.to(param.device, param.dtype))
        if getattr(model, "checkpointed_buffers", ()):  # a shape fit: the moved vertices too
            for name, buffer in checkpointed_buffers(model).items():
                value = (state.get("buffers") or {}).get(name)
                if not isinstance(value, torch.Tensor) or value.shape != buffer.shape:
                    raise InputError(f"the warm-start checkpoint has no {name} of shape {tuple(buffer.shape)}.", path=path, field="warm_start", fix=fix)
                buffer.copy_(value.to(buffer.device, buffer.dtype))


def _publish_paint_views(run: BakeRun, scene: Scene, held_views: list, config: FitConfig) -> None:
    """Give a watcher the first held-out views to paint weights on: each view's reference picture
    (preview ``view<k>``) and its uv0 buffer (``view<k>.npz``, see :mod:`neuralbake.render.paint`),
    announced by a ``paint_view`` event. Skipped when a mesh has no uv0 (weights live in uv0)."""
    if any(m.uv0 is None for m in scene.meshes):
        return
    for k, view in enumerate(held_views[:PAINT_VIEWS]):
        height, width = view.image.shape[:2]
        cpu = lambda t: t.detach().float().cpu().numpy()
        n = view.targets.numel()  # a see-through view's first layer: its first rows
        buffer = view_uv_buffer(cpu(view.pixel[:n]), cpu(view.uv[0][:n]), cpu(view.uv_dx[0][:n]), cpu(view.uv_dy[0][:n]), width, height)
        data = run.preview_arrays(f"view{k}", buffer)
        picture = run.preview_image(f"view{k}", lambda view=view: view.image.float().cpu().numpy())
        run.events.emit("paint_view", view=k, picture=picture, data=data, width=width, height=height, weights=config.weights)


def _evaluate_and_preview(run: BakeRun, model: LodAppearance, held_views: list) -> dict[str, float]:
    """The per-epoch held-out evaluation, and (when watched) the live triptych of the first view."""
    metrics = evaluate_views(model, held_views, with_ssim=False)
    run.preview_image("triptych", lambda: triptych_image(model, held_views[:1]))
    return metrics


def _outcome(
    run: BakeRun, config: FitConfig, model: LodAppearance, rs: Any, held_views: list, result: Any, started: float, precompute_seconds: float,
    artist: dict[str, Any], scene: Scene | None = None,
) -> BakeOutcome:
    device = run.device
    per_epoch = steps_per_epoch(config)
    evals = [e for e in result.history if e.get("event") == "eval"]
    initial = evals[0]
    key = quality_key(config)
    curve = [(e["step"] // per_epoch, e[key], e["train_seconds"]) for e in evals if e["step"] > 0]
    final = evaluate_views(model, held_views, with_ssim=True)
    converged = next((c for c in curve if c[1] >= final[key] - 0.1), curve[-1] if curve else (0, initial[key], 0.0))
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    out = run.stage
    files = write_lod(out, model, rs, config, scene, see_through=see_through_materials(scene) if scene is not None else None)
    write_triptych(out / "triptych.png", model, held_views)
    written = sum(
        p.stat().st_size
        for p in out.iterdir()
        if p.is_file() and (p.name.startswith("lod") or p.suffix in (".png", ".bin")) and p.name not in ("triptych.png", "loss.png")
    )
    metrics = {
        "psnr_db": final["psnr_db"],
        "ssim": final["ssim"],
        "initial_psnr_db": initial["psnr_db"],
        "initial_psnr_union_db": initial["psnr_union_db"],
        "psnr_frame_db": final["psnr_frame_db"],
        "psnr_union_db": final["psnr_union_db"],
    }
    fields: dict[str, Any] = dict(
        target=config.target,
        reference=config.reference,
        judged_by=key,
        views=config.views,
        held_out_views=config.held_out_views,
        epochs=config.epochs,
        steps=result.steps,
        skipped_steps=result.skipped_steps,
        seconds=time.perf_counter() - started,
        train_seconds=result.train_seconds,
        precompute_seconds=precompute_seconds,
        ms_per_epoch=1000.0 * result.train_seconds / config.epochs,
        epoch_definition="one pass over the training views, views_per_step views per Adam step; held-out evaluation excluded",
        epochs_to_converge=converged[0],
        seconds_to_converge=converged[2],
        convergence_definition=f"first epoch whose held-out {key} is within 0.1 dB of the final",
        texture_size=config.texture_size if config.target != "vertex-color" else None,
        chroma_size=config.chroma_side if config.target == "luma-chroma" else None,
        render_size=config.render_size,
        vertices=int(rs.positions.shape[0]),
        triangles=int(rs.faces.shape[0]),
        quantize=config.quantize,
        quantizer=config.quantizer if config.quantize else None,
        tonemap=model.tonemap.parameters_named() if model.tonemap is not None else None,
        bytes=files["bytes"],
        bytes_definition="raw stored payload: texels (or vertices) x channels x bytes per value (1 for 8-bit, 2 for 16-bit PNG, 4 for float COLOR_0)",
        file_bytes=int(written),
        peak_gpu_memory_bytes=peak,
        metrics_definition=(
            "psnr_db: PSNR over the LOD's hit pixels of the held-out views (display space; the asset only); psnr_union_db: over "
            "the pixels the reference or the LOD covers (where a simplified or reshaped LOD misses its reference, its frame shows "
            "the background there); psnr_frame_db: over whole held-out frames, background included; SSIM averaged over windows "
            "centred on the covered pixels"
        ),
        psnr_curve=[{"epoch": e, key: p} for e, p, _ in curve],
        **artist,
        weighted_pixel_fraction_definition="share of the training views' hit pixels whose loss the weights mask raises",
        **{k: v for k, v in files.items() if k != "bytes"},
    )
    title = f"LOD fit ({config.target}{', shape' if config.shape else ''})"
    return BakeOutcome(metrics, fields, curve_title=title, quality_key=key)


def quality_key(config: FitConfig) -> str:
    """The held-out PSNR a fit is judged by: over the LOD's hits, or, when the LOD's silhouette may
    differ from its reference's (a reference original, a fitted shape), over both's covered pixels."""
    return "psnr_union_db" if config.shape or config.reference is not None else "psnr_db"


# -- footprint --------------------------------------------------------------------------------

STEP_BYTES_PER_HIT = 256
"""Autograd of a view's loss per hit pixel: the trilinear fetch (eight texels, weights, uv
derivatives), the decoded and displayed colours and the loss terms, kept for the backward pass."""
TEXEL_BYTES = TRAINED_PARAMETER_BYTES + 10 * 4
"""Per stored texel value: the parameter, its gradient and Adam's moments, and the copies a step
makes with autograd (the quantised store, the sRGB decode, the mip pyramid a third more)."""


def estimated_memory(config: FitConfig, device: torch.device) -> dict[str, float]:
    """Bytes by the setting that drives them: the reference views' kept hits and G-buffer rows
    (``views``, ``held_out_views``; :func:`~neuralbake.bakes.fit.views.estimated_view_bytes`), one
    render's transient G-buffer and shading (``render_size``), a step's autograd over its views'
    hits (``views_per_step``), the stored values with their optimiser state (``texture_size``) and
    the asset and its reference original (``asset``, assumed: :data:`~neuralbake.bakes.footprint.ASSUMED_ASSET_BYTES`)."""
    pixels = (config.render_size or 0) ** 2
    hits = math.pi / 4 * pixels
    views, held, per_step = config.views or 0, config.held_out_views, config.views_per_step
    size = config.texture_size or 0
    texels = {"unlit": 3 * size * size, "luma-chroma": size * size + 3 * config.chroma_side**2}.get(config.target, 0)
    shape = config.shape
    return {
        "views": hits * views * VIEW_BYTES_PER_PIXEL + (pixels * 16 * views if shape else 0),
        "held_out_views": hits * held * HELD_OUT_BYTES_PER_PIXEL,
        "render_size": pixels * RENDER_BYTES_PER_PIXEL,
        "views_per_step": per_step * (pixels * RENDER_BYTES_PER_PIXEL if shape else hits * STEP_BYTES_PER_HIT),
        "texture_size": texels * TEXEL_BYTES,
        "asset": ASSUMED_ASSET_BYTES * (2 if config.reference is not None else 1),
    }


def fit_footprint(config: FitConfig, device: torch.device) -> Footprint:
    """Peak memory of a fit (:func:`estimated_memory` on top of the renderer's base) and its steps:
    ``epochs`` x ``ceil(views / views_per_step)``."""
    terms = estimated_memory(config, device)
    total = lambda c, d: sum(estimated_memory(c, d).values())  # noqa: E731
    defaults = GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS
    knobs = {**defaults, "held_out_views": 4, "views_per_step": 1, "chroma_size": 0}
    field = dominant_field(total, config, device, knobs, fallback="render_size")
    steps = steps_per_epoch(config) * (config.epochs or 0) if config.views else 0
    return footprint(terms, steps=steps, steps_field="epochs", base=RENDERER_BASE_BYTES, field=field)


FIT = Bake("fit", FitConfig, _body, device_defaults=device_defaults, title="fit", footprint=fit_footprint)
"""The PBR-to-LOD fit, as the runner (:mod:`neuralbake.bakes.run`) runs it."""


def fit_lod(config: FitConfig, out_dir: str | Path, **options: Any) -> dict[str, Any]:
    """Fit ``config.asset`` into an unlit LOD in ``out_dir`` (see :mod:`neuralbake.bakes.fit`); return the report.

    Runs through :func:`neuralbake.bakes.run.run_bake` (validation, lock, staging, checkpoints,
    manifest). Raises :class:`~neuralbake.nn.trainer.TrainingInterrupted` when stopped with
    Ctrl-C or SIGTERM (a checkpoint is saved; ``resume=True`` continues it).
    """
    return FIT.run(config, out_dir, **options)
