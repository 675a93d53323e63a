"""ControlNet conditions taken from a render and its true passes (seed 004's structure channel).

Seed 004's public add-on estimates structure from the finished image. A 3D renderer knows the
real depth, normals and object ids, so here the conditions are built from render passes:

- **edges**: Canny edges of the render (OpenCV's ``Canny``: the detector ControlNet's canny models
  were trained on), white on black;
- **depth**: the Z pass as normalised inverse depth over the covered pixels, near white, far dark,
  background black (the convention of ControlNet's depth models, whose training maps came from
  monocular estimators giving relative inverse depth);
- **normals**: the normal pass turned into view space (x right, y up, z towards the camera) and
  mapped from [-1, 1] to [0, 1]; background is (0.5, 0.5, 1), a surface facing the camera;
- **ids**: the object or material index pass as one boolean mask per id (for composing several
  passes) and as a segmentation picture (a fixed colour per id).

Passes come from OpenEXR files (Blender writes them: single-layer ``Z`` / ``X, Y, Z`` files, or one
multilayer file whose channels are ``<ViewLayer>.Depth.Z``, ``<ViewLayer>.Normal.X`` ...,
``<ViewLayer>.IndexOB.X``), read with the ``OpenEXR`` package, or from neuralbake's own renderer
for a glTF scene (:func:`render_passes`). A missing or malformed pass is an
:class:`~neuralbake.errors.InputError` that names the file, the pass and how to turn it on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.errors import ConfigError, InputError
from neuralbake.io.files import atomic_write_json, prepare_output_dir
from neuralbake.io.gltf import load_bake_input
from neuralbake.io.images import MAX_IMAGE_SIDE, load_image, save_png
from neuralbake.render.camera import framing_radius, look_at
from neuralbake.render.deferred import DirectionalLight, Lighting
from neuralbake.render.deferred import render as deferred_render
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.scene import prepare_scene
from neuralbake.render.skinning import pose_scene

__all__ = [
    "PASS_FIXES",
    "RenderPasses",
    "canny_condition",
    "depth_condition",
    "id_masks",
    "load_render",
    "normal_condition",
    "pick_channels",
    "read_exr_channels",
    "read_exr_passes",
    "render_passes",
    "scene_passes",
    "segmentation_condition",
    "write_conditions",
]

BACKGROUND_DEPTH = 1e9
"""Z values at or above this (Blender writes 1e10 where nothing is hit) count as background."""

PASS_FIXES = {
    "depth": "render with the Z pass on (Blender: View Layer Properties > Passes > Data > Z) and save it as OpenEXR.",
    "normal": "render with the Normal pass on (Blender: View Layer Properties > Passes > Data > Normal) and save it as OpenEXR.",
    "ids": "render with the Object Index (or Material Index) pass on (Blender: View Layer Properties > Passes > Data > Indexes).",
}


@dataclass
class RenderPasses:
    """A render and its passes, all ``[H, W, ...]`` float32 numpy arrays of one size."""

    image: np.ndarray | None = None
    """``[H, W, 3]`` display image in [0, 1]."""
    depth: np.ndarray | None = None
    """``[H, W]`` distance from the camera (background: ``inf`` or >= :data:`BACKGROUND_DEPTH`)."""
    normal: np.ndarray | None = None
    """``[H, W, 3]`` world-space unit normals (zero on background)."""
    ids: np.ndarray | None = None
    """``[H, W]`` int32 object or material index (0 on background)."""
    world_to_view: np.ndarray | None = None
    """``[3, 3]`` rotation taking world directions to view space (rows: right, up, towards the camera);
    ``None``: the normals are already in view space."""


def _need(module: str, package: str, field: str) -> Any:
    """Import ``module``, or say which package to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{module} cannot be imported ({exc}).", field=field, fix=f"pip install {package} (neuralbake's set-up installs it).") from exc


def read_exr_channels(path: str | Path, *, field: str = "passes") -> dict[str, np.ndarray]:
    """Every channel of an OpenEXR file (all its parts) as ``{name: [H, W] float32}``."""
    OpenEXR = _need("OpenEXR", "OpenEXR==3.5.3", field)

    path = Path(path)
    if not path.is_file():
        raise InputError("the pass file does not exist.", path=path, field=field, fix="pass an OpenEXR file written by the renderer.")
    try:
        header = OpenEXR.File(str(path), header_only=True).header()
        low, high = header["dataWindow"]
        width, height = int(high[0] - low[0] + 1), int(high[1] - low[1] + 1)
    except Exception as exc:  # the binding raises RuntimeError or others for damaged files
        raise InputError(f"the file is not a readable OpenEXR image ({exc}).", path=path, field=field, fix="save the pass as OpenEXR.") from exc
    if not (1 <= width <= MAX_IMAGE_SIDE and 1 <= height <= MAX_IMAGE_SIDE):
        raise InputError(f"the pass is {width} x {height}; at most {MAX_IMAGE_SIDE} per side is read.", path=path, field=field,
                         fix="render the pass at the render's own size.")
    try:
        parts = OpenEXR.File(str(path), separate_channels=True).parts
    except Exception as exc:
        raise InputError(f"the OpenEXR pixels cannot be read ({exc}).", path=path, field=field, fix="save the pass again.") from exc
    # Blender 5 writes a multilayer EXR as one part per pass; older writers put every channel in one part.
    channels: dict[str, np.ndarray] = {}
    for part in parts:
        for name, channel in part.channels.items():
            pixels = np.asarray(channel.pixels, dtype=np.float32)
            if pixels.size != height * width:
                raise InputError(f"the part {part.name()!r} is not {width} x {height} like the file's first part.", path=path, field=field,
                                 fix="write every pass of the render at one size.")
            channels.setdefault(name, pixels.reshape(height, width))
    return channels


def pick_channels(channels: dict[str, np.ndarray], names: list[list[str]]) -> list[np.ndarray] | None:
    """The first group of channels that all exist, matched exactly or as a ``.``-separated suffix."""
    for group in names:
        found = []
        for name in group:
            match = channels.get(name)
            if match is None:
                suffix = [v for k, v in channels.items() if k.endswith("." + name)]
                match = suffix[0] if len(suffix) == 1 else None
            if match is None:
                break
            found.append(match)
        else:
            return found
    return None


def read_exr_passes(
    *, depth: str | Path | None = None, normal: str | Path | None = None, ids: str | Path | None = None, world_to_view: np.ndarray | None = None
) -> RenderPasses:
    """The passes asked for, read from OpenEXR files (one file may hold several: pass the same path).

    Depth: a ``Depth.Z``, ``Z`` or ``Y`` (single-channel) channel; normals: ``Normal.X/Y/Z``, ``X/Y/Z``
    or ``R/G/B``; ids: ``IndexOB.X`` / ``Object Index.X`` (Blender 4 / 5), ``IndexMA.X`` / ``Material Index.X``, ``X``, ``Y`` or ``R``."""
    out = RenderPasses(world_to_view=world_to_view)
    sizes = {}
    if depth is not None:
        found = pick_channels(read_exr_channels(depth, field="depth"), [["Depth.Z"], ["Z"], ["Y"], ["V"]])
        if found is None:
            raise InputError("the file has no depth channel (Depth.Z, Z or Y).", path=depth, field="depth", fix=PASS_FIXES["depth"])
        out.depth = found[0]
        sizes["depth"] = out.depth.shape
    if normal is not None:
        found = pick_channels(read_exr_channels(normal, field="normal"), [["Normal.X", "Normal.Y", "Normal.Z"], ["X", "Y", "Z"], ["R", "G", "B"]])
        if found is None:
            raise InputError("the file has no normal channels (Normal.X/Y/Z, X/Y/Z or R/G/B).", path=normal, field="normal", fix=PASS_FIXES["normal"])
        out.normal = np.stack(found, -1)
        sizes["normal"] = out.normal.shape[:2]
    if ids is not None:
        found = pick_channels(read_exr_channels(ids, field="ids"),
                      [["IndexOB.X"], ["Object Index.X"], ["IndexMA.X"], ["Material Index.X"], ["X"], ["Y"], ["R"]])
        if found is None:
            raise InputError("the file has no index channel (IndexOB.X or Object Index.X, IndexMA.X or Material Index.X, X, Y or R).", path=ids,
                             field="ids", fix=PASS_FIXES["ids"])
        value = found[0]
        if not np.all(np.isfinite(value)) or np.any(value < 0) or np.any(np.abs(value - np.round(value)) > 1e-3):
            raise InputError("the index pass holds values that are not whole non-negative numbers.", path=ids, field="ids", fix=PASS_FIXES["ids"])
        out.ids = np.round(value).astype(np.int32)
        sizes["ids"] = out.ids.shape
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{k} {v[1]}x{v[0]}" for k, v in sizes.items())
        raise InputError(f"the passes differ in size ({listed}).", field="passes", fix="render every pass in one render, at one size.")
    return out


def _check_image(image: np.ndarray, field: str) -> np.ndarray:
    array = np.asarray(image, dtype=np.float32)
    if array.ndim != 3 or array.shape[2] < 3:
        raise InputError(f"expected an [H, W, 3] image, got shape {array.shape}.", field=field, fix="pass the RGB render.")
    return np.clip(np.nan_to_num(array[..., :3]), 0.0, 1.0)


def canny_condition(image: np.ndarray, *, low: int = 100, high: int = 200) -> np.ndarray:
    """Canny edges of a display image ``[H, W, 3]`` in [0, 1]: ``[H, W, 3]`` float32, 1 on edges, 0 elsewhere
    (OpenCV, thresholds on the 8-bit luminance gradient as ControlNet's canny annotator uses)."""
    cv2 = _need("cv2", "opencv-python-headless==5.0.0.93", "canny")

    if not 0 <= low <= high:
        raise InputError(f"Canny thresholds must satisfy 0 <= low <= high, got {low} and {high}.", field="canny", fix="pass e.g. 100 and 200.")
    rgb = (_check_image(image, "image") * 255.0 + 0.5).astype(np.uint8)
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    edges = cv2.Canny(grey, int(low), int(high)).astype(np.float32) / 255.0
    return np.repeat(edges[..., None], 3, axis=2)


def _covered(depth: np.ndarray) -> np.ndarray:
    return np.isfinite(depth) & (depth > 0) & (depth < BACKGROUND_DEPTH)


def depth_condition(depth: np.ndarray) -> np.ndarray:
    """Normalised inverse depth ``[H, W, 3]``: the nearest covered pixel 1, the farthest 0.1 (so the
    far surface stays apart from the background), background 0."""
    depth = np.asarray(depth, dtype=np.float64)
    if depth.ndim != 2:
        raise InputError(f"expected an [H, W] depth pass, got shape {depth.shape}.", field="depth", fix=PASS_FIXES["depth"])
    covered = _covered(depth)
    out = np.zeros(depth.shape, np.float32)
    if covered.any():
        inverse = 1.0 / depth[covered]
        lo, hi = float(inverse.min()), float(inverse.max())
        scaled = (inverse - lo) / (hi - lo) if hi > lo else np.ones_like(inverse)
        out[covered] = (0.1 + 0.9 * scaled).astype(np.float32)
    return np.repeat(out[..., None], 3, axis=2)


def normal_condition(normal: np.ndarray, world_to_view: np.ndarray | None = None) -> np.ndarray:
    """View-space normals mapped to colours ``[H, W, 3]``: ``(n + 1) / 2`` with x right, y up, z towards
    the camera; background (zero normals) is (0.5, 0.5, 1)."""
    n = np.asarray(normal, dtype=np.float64)
    if n.ndim != 3 or n.shape[2] != 3:
        raise InputError(f"expected an [H, W, 3] normal pass, got shape {n.shape}.", field="normal", fix=PASS_FIXES["normal"])
    n = np.nan_to_num(n)
    if world_to_view is not None:
        n = n @ np.asarray(world_to_view, dtype=np.float64).T
    length = np.linalg.norm(n, axis=2, keepdims=True)
    hit = length[..., 0] > 1e-6
    unit = np.where(hit[..., None], n / np.maximum(length, 1e-12), np.array([0.0, 0.0, 1.0]))
    return ((unit + 1.0) / 2.0).astype(np.float32)


def id_masks(ids: np.ndarray) -> dict[int, np.ndarray]:
    """One boolean ``[H, W]`` mask per index in the pass, background (0) excluded."""
    ids = np.asarray(ids)
    return {int(k): ids == k for k in np.unique(ids) if k != 0}


def _colour(index: int) -> np.ndarray:
    digest = hashlib.sha256(f"neuralbake-id-{index}".encode()).digest()
    return 0.2 + 0.8 * np.frombuffer(digest[:3], np.uint8).astype(np.float32) / 255.0


def segmentation_condition(ids: np.ndarray) -> np.ndarray:
    """A fixed colour per index ``[H, W, 3]`` (the same index gets the same colour in every frame), background black."""
    ids = np.asarray(ids)
    out = np.zeros((*ids.shape, 3), np.float32)
    for index, mask in id_masks(ids).items():
        out[mask] = _colour(index)
    return out


def render_passes(scene: Any, camera: Any, width: int, height: int, lighting: Any = None, *, tone_map: str = "aces") -> RenderPasses:
    """A render of a glTF scene (a :class:`~neuralbake.render.scene.RenderScene`) by neuralbake's
    deferred renderer, with its true passes: camera distance, world normals and material index + 1. Each pass shows the
    first surface along the ray that covers at least half of what is behind it: a ``MASK`` card's cut-outs show what is
    behind them (a ``BLEND`` surface under alpha 0.5 too), as in the image."""
    with torch.no_grad():
        out = deferred_render(scene, camera, width, height, lighting, tone_map=tone_map)
        layers = out.layers if out.layers is not None else [(out.gbuffer, out.gbuffer.visibility.mask.to(out.hdr.dtype))]
        depth = torch.full((height * width,), float("inf"), dtype=torch.float64)
        normal = torch.zeros((height * width, 3), dtype=torch.float64)
        ids = torch.zeros(height * width, dtype=torch.int32)
        origin = torch.as_tensor(np.asarray(camera.position), dtype=out.gbuffer.position.dtype, device=out.gbuffer.position.device)
        for g, cover in reversed(layers):  # front layers written last: the first solid surface wins
            solid = (cover.reshape(-1)[g.pixel] >= 0.5).cpu()
            pixel = g.pixel.cpu()[solid]
            depth[pixel] = (g.position - origin).norm(dim=1).double().cpu()[solid]
            normal[pixel] = g.normal.double().cpu()[solid]
            ids[pixel] = (g.material_id + 1).int().cpu()[solid]
    right, up, forward = camera.basis()
    return RenderPasses(
        image=out.ldr.float().cpu().numpy(),
        depth=depth.reshape(height, width).numpy().astype(np.float32),
        normal=normal.reshape(height, width, 3).numpy().astype(np.float32),
        ids=ids.reshape(height, width).numpy(),
        world_to_view=np.stack((right, up, -forward)),
    )


def load_render(path: Path) -> np.ndarray:
    """A render as a display image: PNG/JPEG as they are, OpenEXR (linear) through the sRGB curve, clamped."""
    if path.suffix.lower() != ".exr":
        image, _ = load_image(path)
        if image.shape[2] < 3:
            image = np.repeat(image[..., :1], 3, axis=2)
        return image[..., :3]
    found = pick_channels(read_exr_channels(path, field="render"), [["Combined.R", "Combined.G", "Combined.B"], ["R", "G", "B"]])
    if found is None:
        raise InputError("the render has no colour channels (Combined.R/G/B or R/G/B).", path=path, field="render", fix="save the render with its colour.")
    linear = np.clip(np.nan_to_num(np.stack(found, -1)), 0.0, 1.0)
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * np.power(linear, 1.0 / 2.4) - 0.055).astype(np.float32)


def scene_passes(path: Path, size: int) -> RenderPasses:
    """Render a glTF asset with neuralbake's renderer from the front (the orbit's first view), sun and sky."""
    scene = pose_scene(load_bake_input(path, field="render", see_through=True))
    lo, hi = scene.bounds()
    centre = (lo + hi) / 2
    extent = max(float(np.sqrt(((m.positions - centre) ** 2).sum(-1)).max()) for m in scene.meshes)
    distance = framing_radius(extent, 40.0)
    direction = np.array([0.35, 0.25, 1.0]) / np.linalg.norm([0.35, 0.25, 1.0])
    camera = look_at(tuple(centre + distance * direction), tuple(centre), fov_y_deg=40.0)
    lighting = Lighting(
        directional=[DirectionalLight(direction=(-0.45, 0.75, 0.5), irradiance=2.0)],
        environment=EnvironmentLight.from_map(default_environment(128, 64)),
        environment_samples=16,
        background=(0.18, 0.18, 0.18),
    )
    return render_passes(prepare_scene(scene), camera, size, size, lighting)


def write_conditions(
    render: str | Path, out: str | Path, *, depth: str | Path | None = None, normal: str | Path | None = None, ids: str | Path | None = None,
    size: int = 512, canny: tuple[int, int] = (100, 200),
) -> dict[str, Any]:
    """Build every condition the inputs allow and write them as PNGs into ``out``; return what was written.

    ``render``: the render (PNG, JPEG or OpenEXR) with optional pass files, or a glTF asset that
    neuralbake renders itself at ``size`` (then every pass is its own and ``render.png`` is written too).
    Writes ``canny.png``, ``depth.png``, ``normal.png``, ``segmentation.png``, ``masks/id_<k>.png`` and
    ``conditions.json``; each file appears whole (written to a temporary name, then renamed).
    """
    render = Path(render)
    if not render.is_file():
        raise InputError("the render does not exist.", path=render, field="render", fix="pass the rendered image (PNG, JPEG, EXR) or a .gltf/.glb scene.")
    if render.suffix.lower() in (".gltf", ".glb"):
        if any(p is not None for p in (depth, normal, ids)):
            raise InputError("a glTF scene brings its own passes.", path=render, field="render", fix="drop --depth / --normal / --ids, or pass a rendered image.")
        passes = scene_passes(render, size)
        image = passes.image
    else:
        image = load_render(render)
        files = {"depth": depth, "normal": normal, "ids": ids}
        passes = read_exr_passes(**files)
        for name, path in files.items():
            value = getattr(passes, name)
            if value is not None and value.shape[:2] != image.shape[:2]:
                raise InputError(f"the {name} pass is {value.shape[1]}x{value.shape[0]} but the render is {image.shape[1]}x{image.shape[0]}.",
                                 path=path, field=name, fix="render the passes in the same render as the image.")
    folder = prepare_output_dir(out)
    written: dict[str, Any] = {"width": int(image.shape[1]), "height": int(image.shape[0])}
    if render.suffix.lower() in (".gltf", ".glb"):
        save_png(folder / "render.png", image)
        written["render"] = "render.png"
    save_png(folder / "canny.png", canny_condition(image, low=canny[0], high=canny[1]))
    written["canny"] = "canny.png"
    if passes.depth is not None:
        save_png(folder / "depth.png", depth_condition(passes.depth))
        written["depth"] = "depth.png"
    if passes.normal is not None:
        save_png(folder / "normal.png", normal_condition(passes.normal, passes.world_to_view))
        written["normal"] = "normal.png"
        written["normal_space"] = "view" if passes.world_to_view is not None else "as given (view space assumed)"
    if passes.ids is not None:
        save_png(folder / "segmentation.png", segmentation_condition(passes.ids))
        (folder / "masks").mkdir(exist_ok=True)
        masks = {}
        for index, mask in id_masks(passes.ids).items():
            save_png(folder / "masks" / f"id_{index}.png", mask.astype(np.float32))
            masks[str(index)] = {"file": f"masks/id_{index}.png", "pixels": int(mask.sum())}
        written["segmentation"], written["masks"] = "segmentation.png", masks
    atomic_write_json(folder / "conditions.json", written)
    return written
