"""The AI render pass's image work (seed 004), a library below the bakes: ControlNet conditions from
a render's true passes (:mod:`~neuralbake.postfx.conditions`), diffusion models from local folders
(:mod:`~neuralbake.postfx.models`), LoRA adapters (:mod:`~neuralbake.postfx.adapters`), the
Real-ESRGAN upscaler (:mod:`~neuralbake.postfx.upscale`), composition by masks
(:mod:`~neuralbake.postfx.compose`) and motion between frames (:mod:`~neuralbake.postfx.motion`).
The chain of them as a bake, and the LoRA training, are :mod:`neuralbake.bakes.postfx`."""

from neuralbake.postfx import conditions
from neuralbake.postfx.conditions import *  # noqa: F403  (the names conditions.__all__ lists)

__all__ = list(conditions.__all__)
