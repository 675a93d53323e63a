"""The add-on's panel (Render Properties > neuralbake AI pass) and the operators that edit its lists."""

from __future__ import annotations

import bpy
from bpy.props import StringProperty

from .render_pass import CONDITIONS
from .settings import scene_settings


class NEURALBAKE_OT_list_add(bpy.types.Operator):
    """Add an entry"""

    bl_idname = "neuralbake.postfx_add"
    bl_label = "Add"
    which: StringProperty()

    def execute(self, context):
        getattr(scene_settings(context.scene), self.which).add()
        return {"FINISHED"}


class NEURALBAKE_OT_list_remove(bpy.types.Operator):
    """Remove the last entry"""

    bl_idname = "neuralbake.postfx_remove"
    bl_label = "Remove"
    which: StringProperty()

    def execute(self, context):
        items = getattr(scene_settings(context.scene), self.which)
        if len(items):
            items.remove(len(items) - 1)
        return {"FINISHED"}


class RENDER_PT_neuralbake_postfx(bpy.types.Panel):
    bl_label = "neuralbake AI pass"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "render"

    def draw_header(self, context):
        self.layout.prop(scene_settings(context.scene), "enabled", text="")

    def draw(self, context):
        s = scene_settings(context.scene)
        layout = self.layout
        for name in ("prompt", "negative", "model", "strength", "steps", "guidance", "seed", "size", "upscale", "temporal", "output_dir"):
            layout.prop(s, name)
        box = layout.box()
        box.label(text="ControlNets (from the render's passes)")
        for name in CONDITIONS:
            row = box.row()
            row.prop(s, f"use_{name}")
            row.prop(s, f"{name}_model", text="")
            row.prop(s, f"{name}_scale")
        box = layout.box()
        row = box.row()
        row.label(text="LoRAs")
        row.operator("neuralbake.postfx_add", text="", icon="ADD").which = "loras"
        row.operator("neuralbake.postfx_remove", text="", icon="REMOVE").which = "loras"
        for lora in s.loras:
            row = box.row()
            row.prop(lora, "path", text="")
            row.prop(lora, "weight")
        box = layout.box()
        row = box.row()
        row.label(text="Passes by object index")
        row.operator("neuralbake.postfx_add", text="", icon="ADD").which = "passes"
        row.operator("neuralbake.postfx_remove", text="", icon="REMOVE").which = "passes"
        for p in s.passes:
            col = box.column()
            col.prop(p, "ids")
            col.prop(p, "prompt")
            row = col.row()
            row.prop(p, "strength")
            row.prop(p, "lora", text="")
            row.prop(p, "lora_weight")
        layout.prop(s, "feather")
        row = layout.row()
        row.operator("neuralbake.postfx_render")
        row.operator("neuralbake.postfx_viewport")
        row = layout.row()
        row.operator("neuralbake.bake_selected", text="Fit selection").kind = "fit"
        row.operator("neuralbake.bake_selected", text="LOD of selection").kind = "lod"
        if s.status:
            layout.label(text=s.status)


CLASSES = (NEURALBAKE_OT_list_add, NEURALBAKE_OT_list_remove, RENDER_PT_neuralbake_postfx)
