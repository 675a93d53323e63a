"""Registration of the add-on's classes, scene settings and render handlers with Blender."""

from __future__ import annotations

import bpy
from bpy.props import PointerProperty

from . import panel, render_pass, selection, settings

CLASSES = (*settings.CLASSES, *render_pass.CLASSES, *selection.CLASSES, *panel.CLASSES)


def register() -> None:
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.neuralbake_postfx = PointerProperty(type=settings.NEURALBAKE_Settings)
    for handlers, handler in render_pass.HANDLERS:
        if handler not in handlers:
            handlers.append(handler)


def unregister() -> None:
    for handlers, handler in render_pass.HANDLERS:
        if handler in handlers:
            handlers.remove(handler)
    del bpy.types.Scene.neuralbake_postfx
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
