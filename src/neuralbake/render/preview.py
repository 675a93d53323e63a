"""Material preview renderer: a sphere and a flat tile lit by a directional light and an HDR
environment, converged with importance sampling and multiple importance sampling, written out as
linear EXR and tone-mapped PNG so an artist can judge a material before baking it.

Scenes (world up is +y), each seen by its own pinhole camera with a 33.4 degree field of view
(``tan(fov / 2) = 0.3``) looking at the origin; pixel (0, 0) is the top left:

* ``sphere``: the unit sphere at the origin, camera on +z at distance 4. ``uv`` is longitude/latitude:
  ``u = 0.5 + atan2(x, z) / (2 pi)`` (0.5 faces the camera), ``v = 0.5 + asin(y) / pi`` (0 south
  pole, 1 north pole). Tangent ``dp/du`` (horizontal, towards increasing ``u``), bitangent
  ``normal x tangent`` (towards increasing ``v``).
* ``tile``: the square ``x, z in [-1, 1]`` on the plane ``y = 0`` (normal +y), camera at distance 5
  and 45 degrees elevation above +z, so views are about 45 degrees off the normal and the sky and
  sun reflect at grazing-ish angles. ``u = (x + 1) / 2``, ``v = (1 - z) / 2`` (0 at the near edge);
  tangent +x, bitangent -z.

A material is a callable ``material(uv [N, 2], normal [N, 3]) -> Layer`` (world geometric normal,
so masks like dust on up-facing areas work: world up is +y, so use ``up_facing(normal, up=1)``). It
is called on the samples that hit the object, a chunk at a time (``N`` varies from call to call,
at most ``chunk_size``) inside ``torch.no_grad()``; the layer is shaded in the local frame (tangent,
bitangent, normal) = (+x, +y, +z) of :mod:`neuralbake.material`. Pixels are supersampled with
jittered positions, so silhouettes are antialiased and pixels partly off the object mix in the
background: the environment seen along the camera ray when the environment lights the scene,
else a flat grey of :data:`BACKGROUND_GREY`.

Light transport is direct lighting only (a convex sphere and a flat tile cannot shadow or light
themselves). Directional light: ``L = layer.eval(wi, wo) * E`` exactly. Environment: one light
sample (luminance importance sampling, :class:`~neuralbake.render.envmap.EnvironmentLight`) and
one BSDF sample (``layer.sample``) per camera sample, combined with the power heuristic
(``beta = 2``), which is unbiased for any pair of densities. Every camera sample's six uniforms
(pixel jitter, light, BSDF) come from one scrambled Sobol sequence of ``spp`` points shared by all
pixels and shifted per pixel by a seeded random offset (Cranley-Patterson rotation): unbiased,
deterministic for a seed, and much less noisy than independent uniforms at 16 to 64 spp.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from neuralbake.errors import InputError
from neuralbake.io.files import prepare_output_dir
from neuralbake.io.images import save_exr, save_png
from neuralbake.io.limits import check_memory
from neuralbake.material.layering import Layer
from neuralbake.render.envmap import EnvironmentLight, default_environment, load_environment
from neuralbake.render.tonemap import tone_map

__all__ = [
    "BACKGROUND_GREY",
    "EXTRA_SCENES",
    "LIGHTS",
    "SCENES",
    "Material",
    "PreviewImages",
    "pixel_footprints",
    "render_preview",
    "write_preview",
]

Material = Callable[[torch.Tensor, torch.Tensor], Layer]
"""``material(uv [N, 2], normal [N, 3] world) -> Layer`` with per-sample parameters."""

SCENES = ("sphere", "tile")
"""The preview scenes, in the order they appear side by side in ``preview.png``."""
EXTRA_SCENES = ("plane",)
"""Scenes rendered only when asked for: ``plane``, a 16 x 62 floor (x in [-8, 8], z in [-60, 2]) seen
at 12 degrees from 0.6 units up, uv repeating every 2 units (about 31 repeats to the far edge), for
minification and filtering."""
LIGHTS = ("both", "directional", "environment")
"""Values of ``render_preview(light=...)``."""
BACKGROUND_GREY = 0.18
"""Background radiance when only the directional light is on (18 % grey)."""

_TAN_HALF_FOV = 0.3  # a 33.4 degree field of view
_CAMERAS = {"sphere": (0.0, 4.0), "tile": (math.radians(45.0), 5.0), "plane": (math.radians(12.0), 3.0)}  # (elevation, distance to the origin)
_SOBOL_DIMS = 6  # pixel jitter (2), environment sample (2), BSDF sample (2)


class PreviewImages(dict):
    """``dict[str, Tensor [H, W, 3]]`` of linear radiance per scene, plus what the render measured.

    ``coverage[scene]``: ``[H, W]`` fraction of each pixel's samples that hit the object.
    ``stats``: ``bsdf_evaluations`` (direction pairs passed to ``layer.eval``), ``seconds`` (wall
    time of the whole render), ``bsdf_evaluations_per_second``, ``samples`` (camera samples), ``spp``,
    ``size``, ``light``.
    """

    def __init__(self, images: dict[str, torch.Tensor], coverage: dict[str, torch.Tensor], stats: dict[str, float | int | str]) -> None:
        super().__init__(images)
        self.coverage = coverage
        self.stats = stats


# --- geometry -----------------------------------------------------------------------------------


def _screen(pixel: torch.Tensor, jitter: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Screen coordinates ``(sx, sy)`` in ``[-1, 1]``, each ``[N]``, of jittered positions in flat pixel indices ``[N]``."""
    x = (pixel % size).to(jitter.dtype) + jitter[:, 0]
    y = (pixel // size).to(jitter.dtype) + jitter[:, 1]
    return 2.0 * x / size - 1.0, 1.0 - 2.0 * y / size


def _camera(scene: str, sx: torch.Tensor, sy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pinhole camera of ``scene``: its position ``[3]`` and unit ray directions ``[N, 3]``."""
    elevation, distance = _CAMERAS[scene]
    c, s = math.cos(elevation), math.sin(elevation)
    like = {"dtype": sx.dtype, "device": sx.device}
    forward = torch.tensor([0.0, -s, -c], **like)
    right = torch.tensor([1.0, 0.0, 0.0], **like)
    up = torch.tensor([0.0, c, -s], **like)
    d = forward + _TAN_HALF_FOV * (sx[:, None] * right + sy[:, None] * up)
    return -distance * forward, d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)


def _intersect(scene: str, sx: torch.Tensor, sy: torch.Tensor) -> dict[str, torch.Tensor]:
    """Trace the camera rays through screen points ``sx``, ``sy`` (``[N]``).

    Returns ``hit`` ``[N]`` (bool), ``ray`` ``[N, 3]`` (the ray direction, for the background) and,
    valid where ``hit``: ``uv`` ``[N, 2]``, world ``normal``, ``tangent`` and ``wo`` ``[N, 3]``.
    """
    origin, ray = _camera(scene, sx, sy)
    n = sx.shape[0]
    if scene == "sphere":
        # |o + t d|^2 = 1 with |d| = 1: t = -b - sqrt(b^2 - c), the nearer root.
        b = ray @ origin
        disc = b * b - (origin @ origin - 1.0)
        hit = disc > 0.0
        t = -b - torch.sqrt(torch.clamp(disc, min=0.0))
        p = origin + t[:, None] * ray
        normal = p / torch.linalg.vector_norm(p, dim=-1, keepdim=True)
        x, y, z = normal.unbind(-1)
        u = 0.5 + torch.atan2(x, z) / (2.0 * math.pi)
        v = 0.5 + torch.asin(torch.clamp(y, -1.0, 1.0)) / math.pi
        # d p / d longitude is along (cos phi, 0, -sin phi) = (z, 0, -x) / |(x, z)|.
        horizontal = torch.sqrt(torch.clamp(x * x + z * z, min=1e-12))
        tangent = torch.stack((z / horizontal, torch.zeros_like(x), -x / horizontal), dim=-1)
    elif scene == "plane":
        t = -origin[1] / torch.clamp(ray[:, 1], max=-1e-6)  # rays above the horizon miss
        p = origin + t[:, None] * ray
        hit = (ray[:, 1] < -1e-6) & (p[:, 0].abs() <= 8.0) & (p[:, 2] >= -60.0) & (p[:, 2] <= 2.0)
        u, v = (p[:, 0] + 1.0) / 2.0, (1.0 - p[:, 2]) / 2.0  # the tile's uv, continued: repeat-wrapped by the material
        normal = torch.tensor([0.0, 1.0, 0.0], dtype=sx.dtype, device=sx.device).expand(n, 3)
        tangent = torch.tensor([1.0, 0.0, 0.0], dtype=sx.dtype, device=sx.device).expand(n, 3)
    else:
        t = -origin[1] / torch.clamp(ray[:, 1], max=-1e-6)  # every ray of this camera points down
        p = origin + t[:, None] * ray
        hit = (p[:, 0].abs() <= 1.0) & (p[:, 2].abs() <= 1.0)
        u, v = (p[:, 0] + 1.0) / 2.0, (1.0 - p[:, 2]) / 2.0
        normal = torch.tensor([0.0, 1.0, 0.0], dtype=sx.dtype, device=sx.device).expand(n, 3)
        tangent = torch.tensor([1.0, 0.0, 0.0], dtype=sx.dtype, device=sx.device).expand(n, 3)
    return {"hit": hit, "uv": torch.stack((u, v), dim=-1), "normal": normal, "tangent": tangent, "wo": -ray, "ray": ray}


def _footprint(scene: str, sx: torch.Tensor, sy: torch.Tensor, size: int, geo: dict[str, torch.Tensor]) -> None:
    """Add ``duv_dx`` and ``duv_dy`` ``[N, 2]`` to ``geo``: uv derivatives per pixel step along the screen axes.

    Ray differentials by finite offset rays: the rays one pixel to the right and one pixel down
    are traced too (on the planes, through their unbounded continuation) and the uv differences
    taken. On the sphere, an offset ray past the silhouette is replaced by the opposite offset
    (negated); where both miss the derivative is 0 (level 0). ``u`` differences wrap across the
    sphere's seam.
    """
    step = 2.0 / size
    uv = geo["uv"]
    for key, (dx, dy) in (("duv_dx", (step, 0.0)), ("duv_dy", (0.0, -step))):
        ahead = _intersect(scene, sx + dx, sy + dy)
        delta = ahead["uv"] - uv
        if scene == "sphere":
            behind = _intersect(scene, sx - dx, sy - dy)
            delta = torch.where(ahead["hit"][:, None], delta, uv - behind["uv"])
            delta = torch.where((ahead["hit"] | behind["hit"])[:, None], delta, torch.zeros_like(delta))
            delta[:, 0] = torch.remainder(delta[:, 0] + 0.5, 1.0) - 0.5
        geo[key] = delta


def pixel_footprints(scene: str, size: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """The geometry of ``scene``'s camera rays through the ``size`` x ``size`` pixel centres, with footprints.

    Returns ``(geo, sx, sy)``: ``geo`` as the renderer sees it (``hit``, ``uv``, ... ``[N]`` / ``[N, k]``
    in row-major pixel order) plus ``duv_dx`` and ``duv_dy``; ``sx``, ``sy`` the screen coordinates.
    For pictures of the level of detail and for tests.
    """
    sx, sy = _screen(torch.arange(size * size), torch.full((size * size, 2), 0.5), size)
    geo = _intersect(scene, sx, sy)
    _footprint(scene, sx, sy, size, geo)
    return geo, sx, sy


def _to_local(w: torch.Tensor, t: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return torch.stack(((w * t).sum(-1), (w * b).sum(-1), (w * n).sum(-1)), dim=-1)


def _to_world(w: torch.Tensor, t: torch.Tensor, b: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return w[:, 0:1] * t + w[:, 1:2] * b + w[:, 2:3] * n


def _power_weight(p: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    p2, o2 = p * p, other * other
    return torch.where(p > 0.0, p2 / torch.clamp(p2 + o2, min=torch.finfo(p.dtype).tiny), torch.zeros_like(p))


def _divide(value: torch.Tensor, pdf: torch.Tensor) -> torch.Tensor:
    ok = pdf > 0.0
    return torch.where(ok[:, None], value / torch.where(ok, pdf, torch.ones_like(pdf))[:, None], torch.zeros_like(value))


# --- shading ------------------------------------------------------------------------------------


class _Shader:
    """Shades the hit samples of one chunk; counts BSDF evaluations."""

    def __init__(
        self,
        material: Material,
        env: EnvironmentLight | None,
        light_direction: torch.Tensor | None,
        light_irradiance: torch.Tensor | None,
        sampling_material: Material | None = None,
    ) -> None:
        self.material = material
        self.sampling_material = sampling_material
        self.env = env
        self.light_direction = light_direction
        self.light_irradiance = light_irradiance
        self.evaluations = 0

    def _eval(self, bsdf: Layer, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        self.evaluations += wi.shape[0]
        return bsdf.eval(wi, wo)

    def shade(self, geo: dict[str, torch.Tensor], u_light: torch.Tensor, u_bsdf: torch.Tensor) -> torch.Tensor:
        """Outgoing radiance ``[N, 3]`` towards the camera at the hit samples ``geo`` (all hits)."""
        n, t = geo["normal"], geo["tangent"]
        b = torch.cross(n, t, dim=-1)
        if "duv_dx" in geo:
            bsdf = self.material(geo["uv"], n, footprint=(geo["duv_dx"], geo["duv_dy"]))
        else:
            bsdf = self.material(geo["uv"], n)
        if not isinstance(bsdf, Layer):
            raise InputError(
                f"the material returned a {type(bsdf).__name__}, not a layer.",
                field="material",
                fix="return a layer built with neuralbake.material.layer / coat / mix (eval, sample, pdf).",
            )
        sampler = bsdf if self.sampling_material is None else self.sampling_material(geo["uv"], n)
        wo = _to_local(geo["wo"], t, b, n)
        radiance = torch.zeros_like(wo)
        if self.light_direction is not None:
            wi = _to_local(self.light_direction.expand_as(wo), t, b, n)
            radiance = radiance + self._eval(bsdf, wi, wo) * self.light_irradiance
        if self.env is not None:
            # Light sample, weighted against the BSDF sampler's density for the same direction.
            wi_world, p_light = self.env.sample(u_light)
            wi = _to_local(wi_world, t, b, n)
            p_bsdf = sampler.pdf(wi, wo)
            f = self._eval(bsdf, wi, wo) * self.env.eval(wi_world)
            radiance = radiance + _divide(f, p_light) * _power_weight(p_light, p_bsdf)[:, None]
            # BSDF sample, weighted against the environment sampler's density.
            wi, p_bsdf = sampler.sample(wo, u_bsdf)
            wi_world = _to_world(wi, t, b, n)
            p_light = self.env.pdf(wi_world)
            f = self._eval(bsdf, wi, wo) * self.env.eval(wi_world)
            radiance = radiance + _divide(f, p_bsdf) * _power_weight(p_bsdf, p_light)[:, None]
        return radiance


# --- the renderer -------------------------------------------------------------------------------


def _resolve_environment(environment: object, device: torch.device) -> EnvironmentLight:
    if isinstance(environment, EnvironmentLight):
        return environment if environment.radiance.device == device else EnvironmentLight.from_map(environment.radiance.to(device))
    if environment is None:
        return EnvironmentLight.from_map(default_environment(device=device))
    if isinstance(environment, (str, Path)):
        return EnvironmentLight.from_map(load_environment(environment, device=device))
    if isinstance(environment, (torch.Tensor, np.ndarray)):
        return EnvironmentLight.from_map(torch.as_tensor(environment).to(device))
    raise InputError(
        f"cannot use a {type(environment).__name__} as an environment.",
        field="environment",
        fix="pass None (default sky), a file path (.exr, .hdr, .png), a [H, W, 3] array or an EnvironmentLight.",
    )


MAX_PREVIEW_SIZE = 8192
"""Largest preview image side (the renderer keeps whole images in memory)."""
MAX_PREVIEW_SPP = 65536
"""Most camera samples per pixel."""


def _check_arguments(size: int, spp: int, light: str, chunk_size: int) -> None:
    if light not in LIGHTS:
        raise InputError(f"unknown light {light!r}.", field="light", fix=f"use one of {', '.join(LIGHTS)}.")
    for name, value, low, high in (("size", size, 2, MAX_PREVIEW_SIZE), ("spp", spp, 1, MAX_PREVIEW_SPP), ("chunk_size", chunk_size, 1, 1 << 26)):
        if not isinstance(value, int) or not low <= value <= high:
            raise InputError(f"{name} must be an integer from {low} to {high}, got {value!r}.", field=name, fix=f"pass {low} <= {name} <= {high}.")
    # Per scene: radiance and coverage images, float32, plus the per-pixel shifts (6 floats).
    check_memory(size * size * (3 + 1 + 6) * 4 * 2, what=f"a {size}x{size} preview", field="size", fix="render a smaller --size.")


def _unit_direction(direction: tuple[float, float, float] | torch.Tensor, device: torch.device) -> torch.Tensor:
    d = torch.as_tensor(direction, dtype=torch.float32, device=device).reshape(-1)
    norm = float(torch.linalg.vector_norm(d)) if d.numel() == 3 else 0.0
    if norm == 0.0 or not math.isfinite(norm):
        raise InputError(
            f"light_direction must be a non-zero 3-vector, got {direction!r}.", field="light_direction", fix="pass e.g. (-0.4, 0.8, 0.45)."
        )
    return d / norm


def _render_scene(
    scene: str,
    shader: _Shader,
    sobol: torch.Tensor,
    shift: torch.Tensor,
    size: int,
    pixels_per_chunk: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Radiance ``[size, size, 3]`` and coverage ``[size, size]`` of one scene.

    ``sobol``: ``[spp, 6]`` shared points; ``shift``: ``[size * size, 6]`` per-pixel rotations. Each
    chunk holds whole pixels, so the per-pixel sums are plain reductions (deterministic on a GPU,
    where ``index_add_`` is not).
    """
    spp, device = sobol.shape[0], sobol.device
    image = torch.empty(size * size, 3, device=device)
    hits = torch.empty(size * size, device=device)
    for first in range(0, size * size, pixels_per_chunk):
        last = min(first + pixels_per_chunk, size * size)
        pixel = torch.arange(first, last, device=device)
        u = torch.remainder(sobol[None, :, :] + shift[first:last, None, :], 1.0).reshape(-1, _SOBOL_DIMS)
        screen = _screen(pixel.repeat_interleave(spp), u[:, 0:2], size)
        geo = _intersect(scene, *screen)
        if getattr(shader.material, "takes_footprint", False):
            _footprint(scene, *screen, size, geo)
        hit = geo["hit"]
        if shader.env is not None:
            radiance = shader.env.eval(geo["ray"])
        else:
            radiance = torch.full((hit.shape[0], 3), BACKGROUND_GREY, device=device)
        if bool(hit.any()):
            hit_geo = {k: v[hit] for k, v in geo.items() if k != "hit"}
            radiance[hit] = shader.shade(hit_geo, u[hit, 2:4], u[hit, 4:6]).to(radiance.dtype)
        image[first:last] = radiance.reshape(-1, spp, 3).mean(dim=1)
        hits[first:last] = hit.reshape(-1, spp).to(hits.dtype).mean(dim=1)
        if progress is not None:
            progress(last - first)
    return image.reshape(size, size, 3), hits.reshape(size, size)


def _irradiance(value: float | tuple[float, float, float] | torch.Tensor, device: torch.device) -> torch.Tensor:
    e = torch.as_tensor(value, dtype=torch.float32, device=device).reshape(-1)
    if e.numel() not in (1, 3) or not bool(torch.isfinite(e).all()) or bool((e < 0.0).any()):
        raise InputError(
            f"light_irradiance must be a float or 3 floats >= 0, got {value!r}.",
            field="light_irradiance",
            fix="pass e.g. 1.5 or (1.5, 1.4, 1.2).",
        )
    return e.expand(3)


@torch.no_grad()
def render_preview(
    material: Material,
    *,
    size: int = 256,
    spp: int = 64,
    light: str = "both",
    environment: EnvironmentLight | torch.Tensor | np.ndarray | str | Path | None = None,
    light_direction: tuple[float, float, float] | torch.Tensor = (-0.45, 0.75, 0.5),
    light_irradiance: float | tuple[float, float, float] = 1.5,
    scenes: tuple[str, ...] = SCENES,
    device: torch.device | str = "cpu",
    seed: int = 0,
    chunk_size: int | None = None,
    sampling_material: Material | None = None,
    progress: Callable[[int], None] | None = None,
) -> PreviewImages:
    """Render ``material`` on the preview scenes; returns linear radiance ``[size, size, 3]`` float32 per scene.

    Parameters
    ----------
    material:
        ``material(uv [N, 2], normal [N, 3]) -> Layer`` (see the module docstring).
    size, spp:
        Image side in pixels and camera samples per pixel (each with one light and one BSDF
        sample for the environment, and the directional light evaluated exactly).
    light:
        ``"both"``, ``"directional"`` or ``"environment"``.
    environment:
        ``None`` for :func:`~neuralbake.render.envmap.default_environment` (256 x 128), a path to an
        ``.exr``, ``.hdr`` or PNG equirectangular map, a ``[H, W, 3]`` radiance array, or an
        :class:`~neuralbake.render.envmap.EnvironmentLight`.
    light_direction, light_irradiance:
        The directional light: world direction *towards* the light (normalised here) and its RGB
        irradiance at normal incidence ``E`` (a float is grey), so ``L = f cos_i E``.
    scenes:
        Which of :data:`SCENES` (and :data:`EXTRA_SCENES`) to render. A material with
        ``takes_footprint = True`` is called with ``footprint=(duv_dx, duv_dy)`` too, each
        sample's uv derivatives per pixel (see ``_footprint``), to filter its textures.
    device, seed:
        Torch device; the seed fixes the Sobol scrambling and the per-pixel shifts, so a seed,
        size and spp give the same image every time, whatever the chunk size (a pixel's samples
        never straddle two chunks).
    chunk_size:
        Camera samples shaded at once, bounding memory (a few kB per sample, more for deep layer
        trees). ``None``: 2^16 on the CPU, 2^20 on a GPU (where small chunks leave it idle: 10x
        slower at 2^16 on an H100).
    sampling_material:
        Draw the BSDF samples (and weigh them, MIS included) with this material's ``sample``/``pdf``
        instead of ``material``'s own; still unbiased, since the environment's light samples cover
        every direction. Rendering two materials with the same ``sampling_material`` and seed uses
        the same random directions for both (common random numbers), so their difference image
        shows how the materials differ rather than Monte Carlo noise; the neural material
        comparisons do this with the reference material.
    progress:
        Called with the number of pixels finished after each chunk (``size * size`` per scene in
        all), e.g. the ``advance`` of :func:`~neuralbake.core.events.progress_task`.

    Returns
    -------
    PreviewImages
        ``dict`` scene -> ``[size, size, 3]`` float32 tensor on ``device``, with ``.coverage`` and
        ``.stats`` (BSDF evaluations per second among them).
    """
    device = torch.device(device)
    if chunk_size is None:
        chunk_size = 1 << 16 if device.type == "cpu" else 1 << 20
    _check_arguments(size, spp, light, chunk_size)
    unknown = [s for s in scenes if s not in SCENES + EXTRA_SCENES]
    if unknown or not scenes:
        raise InputError(f"unknown scenes {unknown or scenes!r}.", field="scenes", fix=f"choose from {', '.join(SCENES + EXTRA_SCENES)}.")
    start = time.perf_counter()
    env = _resolve_environment(environment, device) if light in ("both", "environment") else None
    direction = _unit_direction(light_direction, device) if light in ("both", "directional") else None
    irradiance = _irradiance(light_irradiance, device) if direction is not None else None
    shader = _Shader(material, env, direction, irradiance, sampling_material)

    generator = torch.Generator(device="cpu").manual_seed(seed)
    sobol = torch.quasirandom.SobolEngine(_SOBOL_DIMS, scramble=True, seed=seed).draw(spp).to(device)
    images, coverage = {}, {}
    for scene in scenes:
        shift = torch.rand(size * size, _SOBOL_DIMS, generator=generator).to(device)
        images[scene], coverage[scene] = _render_scene(scene, shader, sobol, shift, size, max(1, chunk_size // spp), progress)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # so the time covers the queued kernels too
    seconds = time.perf_counter() - start
    stats = {
        "bsdf_evaluations": shader.evaluations,
        "seconds": seconds,
        "bsdf_evaluations_per_second": shader.evaluations / max(seconds, 1e-9),
        "samples": len(scenes) * size * size * spp,
        "spp": spp,
        "size": size,
        "light": light,
    }
    return PreviewImages(images, coverage, stats)


def write_preview(images: dict[str, torch.Tensor], out_dir: str | Path, *, exposure: float = 0.0) -> dict[str, Path]:
    """Write each scene as ``<scene>.exr`` (linear float32 RGB) and ``<scene>.png`` (tone-mapped
    sRGB), and ``preview.png`` with the scenes side by side (in :data:`SCENES` order, 4 px dark gap).

    ``exposure`` in stops is applied before :func:`~neuralbake.render.tonemap.tone_map` (ACES
    fitted curve, then the sRGB encoding). Every file appears atomically. Returns name -> path.
    """
    out = prepare_output_dir(out_dir)
    if not images:
        raise InputError("there are no images to write.", field="images", fix="pass the result of render_preview.")
    written: dict[str, Path] = {}
    tiles = []
    for scene in sorted(images, key=lambda s: (SCENES.index(s) if s in SCENES else len(SCENES), s)):
        linear = images[scene].detach().to("cpu", torch.float32)
        if linear.dim() != 3 or linear.shape[2] != 3:
            raise InputError(f"image {scene!r} has shape {tuple(linear.shape)}, not [H, W, 3].", field=scene, fix="pass [H, W, 3] images.")
        save_exr(out / f"{scene}.exr", linear)
        display = tone_map(linear, exposure=exposure).numpy()
        save_png(out / f"{scene}.png", display)
        written[f"{scene}.exr"], written[f"{scene}.png"] = out / f"{scene}.exr", out / f"{scene}.png"
        tiles.append(display)
    height = max(t.shape[0] for t in tiles)
    gap = np.full((height, 4, 3), 0.05, dtype=np.float32)
    padded = [np.pad(t, ((0, height - t.shape[0]), (0, 0), (0, 0))) for t in tiles]
    strip = [padded[0]]
    for t in padded[1:]:
        strip += [gap, t]
    save_png(out / "preview.png", np.concatenate(strip, axis=1))
    written["preview.png"] = out / "preview.png"
    return written
