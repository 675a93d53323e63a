"""The simplify bake's settings (:class:`SimplifyConfig`), their checks and the sizes picked by device."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from neuralbake.bakes.config import SeededConfig
from neuralbake.bakes.footprint import ASSUMED_ASSET_BYTES, RENDERER_BASE_BYTES, dominant_field, footprint
from neuralbake.bakes.run import Footprint
from neuralbake.core.paths import InputPath
from neuralbake.errors import ConfigError
from neuralbake.io.gltf import DEFAULT_MAX_TRIANGLES

__all__ = ["CPU_DEFAULTS", "GPU_DEFAULTS", "SimplifyConfig", "device_defaults", "simplify_footprint"]

GPU_DEFAULTS = {"render_size": 512, "views": 48, "epochs": 30}
CPU_DEFAULTS = {"render_size": 128, "views": 16, "epochs": 12}
"""About 15 s of shape fitting for DamagedHelmet at 10 % on a 2-core CPU (docs/dev/benchmarks-diary.md)."""


@dataclass
class SimplifyConfig(SeededConfig):
    """Everything that determines an appearance-driven simplification."""

    asset: InputPath = ""
    """Path of the glTF asset (.gltf or .glb) to simplify."""
    ratio: float = 0.25
    """Share of the triangles to keep, in (0, 1]."""
    triangles: int = 0
    """Triangles to keep (overrides ratio when > 0)."""
    lod: InputPath | None = None
    """An already simplified version of the asset (an artist's LOD, another tool's) to fit instead of decimating; ratio,
    triangles, image_guidance and the protections then do not apply."""
    render_size: int | None = None
    """Side of the square renders the shape is fitted and judged on (unset: 512 on a GPU, 128 on a CPU)."""
    views: int | None = None
    """Training views, a Fibonacci orbit around the asset (unset: 48 on a GPU, 16 on a CPU)."""
    held_out_views: int = 6
    """Held-out views (a seeded random orbit) on which QEM alone and the fitted LOD are judged."""
    epochs: int | None = None
    """Passes of shape optimisation over the training views, one step per view (unset: 30 on a GPU, 12 on a CPU; 0 = QEM only)."""
    patience: int = 3
    """Consecutive undone epochs (each raised the loss, so the step was halved) after which the shape fit stops: the
    decimated shape is then as good as these views can tell (0 runs every epoch)."""
    learning_rate: float = 0.003
    """Uniform-Adam step size of the large-steps (differential) coordinates, as a fraction of the asset's bounding-box diagonal."""
    smoothness: float = 2.0
    """lambda of the large-steps parametrisation (I + lambda L): larger moves the surface in smoother, wider steps."""
    image_guidance: float = 0.0
    """Strength of image-space guidance: decimate once, measure where the renders differ, and decimate again with
    the vertices there weighted up (1 + image_guidance * relative error; 0 = off)."""
    joint_weight: float = 4.0
    """Decimation weight of skinned vertices whose influence several joints share (where the mesh bends); 1 = none."""
    frames: int = 4
    """Skinned assets: animation frames of the first clip that the views are spread over (held-out views fall between them)."""
    protect_materials: list[str] = field(default_factory=list)
    """Names of materials whose triangles are kept as they are."""
    protect_mask: InputPath | None = None
    """Optional greyscale PNG in the asset's uv0 space: white regions are kept as they are."""
    environment: bool = False
    """Light the renders with the procedural sky as well as the sun (its Monte Carlo noise blurs the shape's signal: off by default)."""
    environment_samples: int = 4
    """Environment samples per pixel of each render."""
    light_direction: tuple[float, float, float] = (-0.45, 0.75, 0.5)
    """Direction towards the key light (world space); a dimmer fill light shines from the opposite direction."""
    fov_y_deg: float = 40.0
    """Vertical field of view of every view."""
    max_triangles: int = DEFAULT_MAX_TRIANGLES
    """Triangle budget of the input: larger assets are refused before their attributes are decoded."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""

        def bad(name: str, problem: str, fix: str) -> ConfigError:
            return ConfigError(problem, field=name, fix=fix)

        if not self.asset:
            raise bad("asset", "no asset given.", "pass the glTF to simplify.")
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or math.isnan(self.ratio) or not 0.0 < self.ratio <= 1.0:
            raise bad("ratio", f"ratio must be in (0, 1], got {self.ratio!r}.", "pass e.g. 0.25 to keep a quarter of the triangles.")
        if isinstance(self.triangles, bool) or not isinstance(self.triangles, int) or self.triangles < 0:
            raise bad("triangles", f"triangles must be 0 (use ratio) or a positive integer, got {self.triangles!r}.", "pass e.g. 5000.")
        for name, low, top in (("render_size", 16, 4096), ("views", 1, 1024), ("held_out_views", 1, 64), ("epochs", 0, 100_000), ("patience", 0, 100_000), ("environment_samples", 1, 1024)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= top:
                raise bad(name, f"{name} must be an integer in [{low}, {top}], got {v!r}.", f"pass e.g. {max(low, 8)}.")
        for name, low in (("learning_rate", 0.0), ("smoothness", 0.0)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= low:
                raise bad(name, f"{name} must be a positive number, got {v!r}.", "pass e.g. 0.003." if name == "learning_rate" else "pass e.g. 2.")
        if self.lod is not None and (self.image_guidance or self.protect_materials or self.protect_mask is not None):
            raise bad("lod", "a given lod is fitted as it is: image_guidance and the protections only steer the decimation.", "drop --lod or those options.")
        if not isinstance(self.image_guidance, (int, float)) or not math.isfinite(self.image_guidance) or self.image_guidance < 0:
            raise bad("image_guidance", f"image_guidance must be >= 0, got {self.image_guidance!r}.", "pass 0 (off) or e.g. 4.")
        if not isinstance(self.joint_weight, (int, float)) or not math.isfinite(self.joint_weight) or self.joint_weight < 1:
            raise bad("joint_weight", f"joint_weight must be >= 1, got {self.joint_weight!r}.", "pass 1 (off) or e.g. 4.")
        if isinstance(self.frames, bool) or not isinstance(self.frames, int) or not 1 <= self.frames <= 256:
            raise bad("frames", f"frames must be an integer in [1, 256], got {self.frames!r}.", "pass e.g. 4.")
        if not 1.0 <= self.fov_y_deg <= 150.0:
            raise bad("fov_y_deg", f"fov_y_deg must be in [1, 150], got {self.fov_y_deg!r}.", "pass e.g. 40.")
        if not isinstance(self.max_triangles, int) or self.max_triangles < 1:
            raise bad("max_triangles", f"max_triangles must be a positive integer, got {self.max_triangles!r}.", "pass e.g. 2000000.")


def device_defaults(config: SimplifyConfig, device: torch.device) -> dict[str, Any]:
    """Full size on a GPU; on a CPU, sizes that finish in a minute (fields left ``None`` only)."""
    return dict(GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)


# -- footprint --------------------------------------------------------------------------------

VIEW_BYTES_PER_PIXEL = 16
"""What a view of the original keeps per pixel: its display image (3 x float32) and coverage."""
RENDER_BYTES_PER_PIXEL = 1024
"""One antialiased render with autograd (visibility buffer, G-buffer, shading, silhouette gradients), per
pixel: a shape step's, or the judge's (as ``fit.views.RENDER_BYTES_PER_PIXEL``)."""
MESH_COPIES = 2.0
"""The asset, its render scene and BVH, and the decimated LOD with its large-steps system, in units of
one loaded asset (:data:`~neuralbake.bakes.footprint.ASSUMED_ASSET_BYTES`)."""


def estimated_memory(config: SimplifyConfig, device: torch.device) -> dict[str, float]:
    """Bytes by the setting that drives them: the original's renders kept per view (``views``,
    ``held_out_views``), a render with autograd (``render_size``) and the asset and its LOD (``asset``, assumed)."""
    pixels = (config.render_size or 0) ** 2
    return {
        "views": (config.views or 0) * pixels * VIEW_BYTES_PER_PIXEL,
        "held_out_views": config.held_out_views * pixels * VIEW_BYTES_PER_PIXEL,
        "render_size": pixels * RENDER_BYTES_PER_PIXEL,
        "asset": ASSUMED_ASSET_BYTES * MESH_COPIES,
    }


def simplify_footprint(config: SimplifyConfig, device: torch.device) -> Footprint:
    """Peak memory of a simplification (:func:`estimated_memory` on top of the renderer's base) and its
    steps: one shape step per training view and epoch."""
    terms = estimated_memory(config, device)
    total = lambda c, d: sum(estimated_memory(c, d).values())  # noqa: E731
    knobs = {**(GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS), "held_out_views": 6}
    field = dominant_field(total, config, device, knobs, fallback="render_size")
    return footprint(terms, steps=(config.epochs or 0) * (config.views or 0), steps_field="epochs", base=RENDERER_BASE_BYTES, field=field)
