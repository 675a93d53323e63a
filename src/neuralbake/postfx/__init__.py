"""AI render passes (seed 004): ControlNet conditions from a render's true passes
(:mod:`~neuralbake.postfx.conditions`), diffusion models from local folders
(:mod:`~neuralbake.postfx.models`), LoRA adapters (:mod:`~neuralbake.postfx.lora`), the Real-ESRGAN
upscaler (:mod:`~neuralbake.postfx.upscale`), composition by masks (:mod:`~neuralbake.postfx.compose`),
and the chain of them as a bake (:mod:`~neuralbake.postfx.chain`)."""

from neuralbake.postfx import conditions
from neuralbake.postfx.conditions import *  # noqa: F403  (the names conditions.__all__ lists)

__all__ = list(conditions.__all__) + ["blender_addon_source"]


def blender_addon_source() -> str:
    """The Blender add-on's source (``blender_addon.py``, which only Blender's Python imports)."""
    from pathlib import Path

    return (Path(__file__).with_name("blender_addon.py")).read_text(encoding="utf-8")
