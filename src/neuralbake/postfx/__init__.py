"""AI render passes (seed 004): conditions from a render's true passes for ControlNets (this
package's first part, :mod:`neuralbake.postfx.conditions`); the diffusion, LoRA and upscaler chain
and the Blender add-on build on it."""

from neuralbake.postfx import conditions
from neuralbake.postfx.conditions import *  # noqa: F403  (the names conditions.__all__ lists)

__all__ = list(conditions.__all__)
