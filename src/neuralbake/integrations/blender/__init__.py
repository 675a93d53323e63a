"""neuralbake inside Blender (4.2 to 5.x), an add-on: the AI render pass after renders and on the
viewport (Render Properties > neuralbake AI pass), and fit / LOD of the selected objects.

``neuralbake postfx addon --out neuralbake_postfx.zip`` (:mod:`~neuralbake.integrations.blender.package`)
packs this folder as the ``neuralbake_postfx`` add-on, with a copy of :mod:`neuralbake.client` and
:mod:`neuralbake.errors` under ``vendor/``: Blender's Python has neither torch nor a neuralbake install,
so the add-on runs bakes through a ``neuralbake`` executable (its own Python holds the models and the
GPU) or sends them to a ``neuralbake serve`` through that client.

This module is imported outside Blender too (to build the zip), so it does not import ``bpy``; the
modules that do are loaded by :func:`register`.
"""

from __future__ import annotations

import os
import sys

bl_info = {
    "name": "neuralbake AI render pass",
    "author": "neuralbake",
    "version": (0, 1, 0),
    "blender": (4, 2, 0),
    "location": "Properties > Render > neuralbake AI pass",
    "description": "Runs neuralbake's ControlNet + diffusion + LoRA + upscaler chain on renders, with the render's true passes",
    "category": "Render",
}

VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor")
"""In the installed zip: the copy of ``neuralbake.client`` the add-on imports (absent in the source tree,
where the installed neuralbake is imported instead)."""
if os.path.isdir(VENDOR) and VENDOR not in sys.path:
    sys.path.insert(0, VENDOR)


def register() -> None:
    """Blender's entry point: add the settings, operators, panel and render handlers."""
    from . import addon  # imports bpy, which only Blender's Python has (relative: in the zip this package is neuralbake_postfx)

    addon.register()


def unregister() -> None:
    """Blender's exit point: remove what :func:`register` added."""
    from . import addon  # imports bpy, as in register

    addon.unregister()
