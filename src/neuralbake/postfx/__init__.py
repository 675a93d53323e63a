"""AI render passes (seed 004): conditions from a render's true passes for ControlNets (this
module's first part, :mod:`neuralbake.postfx.conditions`); the diffusion, LoRA and upscaler chain
and the Blender add-on build on it."""

from neuralbake.postfx.conditions import (
    RenderPasses,
    canny_condition,
    depth_condition,
    id_masks,
    normal_condition,
    read_exr_channels,
    read_exr_passes,
    render_passes,
    segmentation_condition,
    write_conditions,
)

__all__ = [
    "RenderPasses",
    "canny_condition",
    "depth_condition",
    "id_masks",
    "normal_condition",
    "read_exr_channels",
    "read_exr_passes",
    "render_passes",
    "segmentation_condition",
    "write_conditions",
]
