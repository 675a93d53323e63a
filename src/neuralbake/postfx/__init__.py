"""AI render passes (seed 004): ControlNet conditions from a render's true passes
(:mod:`~neuralbake.postfx.conditions`), diffusion models from local folders
(:mod:`~neuralbake.postfx.models`), LoRA adapters (:mod:`~neuralbake.postfx.lora`), the Real-ESRGAN
upscaler (:mod:`~neuralbake.postfx.upscale`), composition by masks (:mod:`~neuralbake.postfx.compose`),
and the chain of them as a bake (:mod:`~neuralbake.postfx.chain`)."""

from neuralbake.postfx import conditions
from neuralbake.postfx.conditions import *  # noqa: F403  (the names conditions.__all__ lists)

__all__ = list(conditions.__all__)
