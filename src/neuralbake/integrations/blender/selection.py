"""Fit / LOD of the selected objects: they are exported as one GLB, baked by the local
``neuralbake fit`` (their PBR look into an unlit texture on the same mesh) or ``neuralbake lod``
(simplified first), and the result is imported back beside them."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

import bpy
from bpy.props import EnumProperty, FloatProperty, StringProperty

from .settings import device, executable, on_server, output_folder, scene_settings


def bake_selected(context, kind: str, ratio: float, extra: str) -> list:
    """Export the selected objects as one GLB, bake it with ``neuralbake fit`` or ``neuralbake lod`` (simplified to
    ``ratio`` of the triangles first), import the result. Returns the imported objects."""
    if on_server():
        raise RuntimeError("baking the selection runs with the local neuralbake (use `neuralbake submit` for the server).")
    folder = tempfile.mkdtemp(prefix=f"{kind}-", dir=output_folder(context.scene))
    source = os.path.join(folder, "selected.glb")
    bpy.ops.export_scene.gltf(filepath=source, export_format="GLB", use_selection=True)
    out = os.path.join(folder, "out")
    argv = [executable(), kind, source, "--out", out, "--device", device(), "--quiet", *shlex.split(extra)]
    if kind == "lod":
        argv += ["--ratio", f"{ratio:g}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = " ".join((done.stderr or done.stdout).split())
        raise RuntimeError(message[-600:] or f"neuralbake exited with {done.returncode}")
    result = os.path.join(out, "lod.gltf" if kind == "fit" else "lod.glb")
    before = set(bpy.data.objects)
    bpy.ops.import_scene.gltf(filepath=result)
    imported = [o for o in bpy.data.objects if o not in before]
    names = "+".join(o.name for o in context.selected_objects if o not in imported)[:40]
    for obj in imported:
        obj.name = f"{names} {kind.upper()}"
    return imported


class NEURALBAKE_OT_bake_selected(bpy.types.Operator):
    """Bake the selected objects with neuralbake (fit: their PBR look into an unlit texture; lod: simplified too) and import the result"""

    bl_idname = "neuralbake.bake_selected"
    bl_label = "Bake selection with neuralbake"
    kind: EnumProperty(name="Bake", items=[("fit", "Fit (unlit texture)", ""), ("lod", "LOD (simplify + fit)", "")], default="fit")
    ratio: FloatProperty(name="Triangles kept", default=0.25, min=0.01, max=1.0)
    extra: StringProperty(name="Extra options", default="", description="More command-line options of the bake, e.g. --texture-size 512")

    def execute(self, context):
        if not context.selected_objects:
            self.report({"ERROR"}, "select the objects to bake first.")
            return {"CANCELLED"}
        try:
            imported = bake_selected(context, self.kind, self.ratio, self.extra)
        except RuntimeError as exc:
            self.report({"ERROR"}, str(exc))
            scene_settings(context.scene).status = f"failed: {exc}"
            return {"CANCELLED"}
        scene_settings(context.scene).status = f"imported {', '.join(o.name for o in imported)}"
        return {"FINISHED"}


CLASSES = (NEURALBAKE_OT_bake_selected,)
