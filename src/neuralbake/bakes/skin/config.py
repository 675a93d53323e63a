"""The skin bake's settings (:class:`SkinConfig`), their checks and the sizes picked by device."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from neuralbake.bakes.config import SeededConfig
from neuralbake.bakes.footprint import ASSUMED_ASSET_BYTES, ASSUMED_TRIANGLES, RENDERER_BASE_BYTES, dominant_field, footprint
from neuralbake.bakes.run import Footprint
from neuralbake.core.paths import InputPath
from neuralbake.errors import ConfigError
from neuralbake.io.gltf import DEFAULT_MAX_TRIANGLES

__all__ = ["SkinConfig", "device_defaults", "skin_footprint"]

GPU_DEFAULTS = {"steps": 2000, "render_size": 256, "views": 16}
CPU_DEFAULTS = {"steps": 300, "render_size": 96, "views": 6}


@dataclass
class SkinConfig(SeededConfig):
    """Everything that determines a skin-weight fit."""

    lod: InputPath = ""
    """The LOD to skin (.gltf or .glb): a static mesh in the original's rest pose, or a skinned one whose weights are fitted again."""
    reference: InputPath = ""
    """The skinned original (.gltf or .glb) whose skeleton, skin and first clip the LOD follows."""
    influences: int = 4
    """Joints per vertex in the written skin (glTF's JOINTS_0 holds 4)."""
    candidates: int = 8
    """Joints per vertex the fit may weigh: the strongest of the transferred weights of the nearby original surface."""
    frames: int = 8
    """Frames of the clip the weights are fitted over (evenly spread; the rest pose is always one)."""
    held_out_frames: int = 4
    """Frames between the fitted ones on which transferred and fitted weights are judged."""
    steps: int | None = None
    """Adam steps of the fit (unset: 2000 on a GPU, 300 on a CPU)."""
    learning_rate: float = 0.05
    """Adam learning rate of the weights' logits."""
    image_weight: float = 0.1
    """Weight of the image term (renders of LOD and original at a random view and frame per step) beside the vertex term, each
    measured relative to its value with the transferred weights; 0 = vertices only."""
    views: int | None = None
    """Orbit views of the image term and of the judgement (unset: 16 on a GPU, 6 on a CPU)."""
    render_size: int | None = None
    """Side of the square renders (unset: 256 on a GPU, 96 on a CPU)."""
    fov_y_deg: float = 40.0
    """Vertical field of view of every view."""
    max_triangles: int = DEFAULT_MAX_TRIANGLES
    """Triangle budget of each input."""

    def validate(self) -> None:
        """Raise :class:`~neuralbake.errors.ConfigError` for unusable settings."""

        def bad(name: str, problem: str, fix: str) -> ConfigError:
            return ConfigError(problem, field=name, fix=fix)

        if not self.lod:
            raise bad("lod", "no LOD given.", "pass the mesh to skin.")
        if not self.reference:
            raise bad("reference", "no reference given.", "pass the skinned original with --reference.")
        for name, low, top in (("influences", 1, 4), ("candidates", 1, 32), ("frames", 1, 256), ("held_out_frames", 1, 64), ("steps", 0, 1_000_000),
                               ("views", 1, 256), ("render_size", 16, 4096)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= top:
                raise bad(name, f"{name} must be an integer in [{low}, {top}], got {v!r}.", f"pass e.g. {max(low, 4)}.")
        if self.candidates < self.influences:
            raise bad("candidates", f"candidates ({self.candidates}) must be at least influences ({self.influences}).", "raise candidates.")
        if not isinstance(self.learning_rate, (int, float)) or not math.isfinite(self.learning_rate) or self.learning_rate <= 0:
            raise bad("learning_rate", f"learning_rate must be a positive number, got {self.learning_rate!r}.", "pass e.g. 0.05.")
        if not isinstance(self.image_weight, (int, float)) or not math.isfinite(self.image_weight) or self.image_weight < 0:
            raise bad("image_weight", f"image_weight must be >= 0, got {self.image_weight!r}.", "pass 0 (vertices only) or e.g. 1.")
        if not 1.0 <= self.fov_y_deg <= 150.0:
            raise bad("fov_y_deg", f"fov_y_deg must be in [1, 150], got {self.fov_y_deg!r}.", "pass e.g. 40.")


def device_defaults(config: SkinConfig, device: torch.device) -> dict[str, Any]:
    """Full size on a GPU; on a CPU, sizes that finish in a minute or two (fields left ``None`` only)."""
    return dict(GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)


# -- footprint --------------------------------------------------------------------------------

REFERENCE_BYTES_PER_PIXEL = 16
"""A reference render kept per (view, frame): display image (3 x float32) and coverage."""
RENDER_BYTES_PER_PIXEL = 1024
"""The LOD's antialiased render with autograd in a step of the image term, per pixel."""
ASSUMED_JOINTS = 128
"""Joints of the reference's skin, assumed (a game character has 50-150)."""
VERTEX_FRAME_BYTES = 8 * 4 * 3
"""Per LOD vertex, candidate and fitted frame: the posed position (3 floats) and the blended matrix
rows the autograd graph of the vertex term keeps."""


def estimated_memory(config: SkinConfig, device: torch.device) -> dict[str, float]:
    """Bytes by the setting that drives them: the original's renders kept per (view, frame) of the
    image term and of the judgement (``views``; ``frames`` and ``held_out_frames`` multiply them), one
    render with autograd (``render_size``), the vertex term over the fitted frames (``candidates``) and
    the two assets with the dense transferred weights (``lod``, assumed)."""
    pixels = (config.render_size or 0) ** 2
    views = config.views or 0
    pairs = views * config.frames if config.image_weight > 0 else 0
    held = max(1, views // 2) * config.held_out_frames
    vertices = ASSUMED_TRIANGLES // 2  # the LOD's (a quarter of the original's triangles, at most its vertices)
    return {
        "views": (pairs + held) * pixels * REFERENCE_BYTES_PER_PIXEL,
        "render_size": pixels * RENDER_BYTES_PER_PIXEL,
        "candidates": vertices * config.candidates * (config.frames + 1 + config.held_out_frames) * VERTEX_FRAME_BYTES,
        "lod": 2 * ASSUMED_ASSET_BYTES + vertices * ASSUMED_JOINTS * 4 * 3,
    }


def skin_footprint(config: SkinConfig, device: torch.device) -> Footprint:
    """Peak memory of a skin fit (:func:`estimated_memory` on top of the renderer's base) and its steps (``steps``)."""
    terms = estimated_memory(config, device)
    total = lambda c, d: sum(estimated_memory(c, d).values())  # noqa: E731
    knobs = {**(GPU_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS), "frames": 8, "held_out_frames": 4, "candidates": 8}
    field = dominant_field(total, config, device, knobs, fallback="render_size")
    return footprint(terms, steps=config.steps or 0, steps_field="steps", base=RENDERER_BASE_BYTES, field=field)
