"""The add-on's settings: its preferences (where neuralbake runs: the local executable or a server),
the AI pass's per-scene settings (Render Properties > neuralbake AI pass), and the small accessors the
other modules read them through."""

from __future__ import annotations

import os
import shutil
import tempfile

import bpy
from bpy.props import BoolProperty, CollectionProperty, EnumProperty, FloatProperty, IntProperty, StringProperty

ADDON = __package__ or __name__
"""The add-on's module name (``neuralbake_postfx`` once installed from the zip): the key of its preferences."""


class NEURALBAKE_Preferences(bpy.types.AddonPreferences):
    bl_idname = ADDON

    mode: EnumProperty(name="Run on", items=[("LOCAL", "This machine", "Run the local neuralbake executable"),
                                            ("SERVER", "neuralbake server", "Send the render to a `neuralbake serve --models DIR` over HTTP")], default="LOCAL")
    executable: StringProperty(name="neuralbake executable", subtype="FILE_PATH", default="",
                               description="The neuralbake command (its Python has torch and the models); empty: found on PATH")
    device: StringProperty(name="Device", default="auto", description="auto, cpu, cuda or cuda:N for the chain")
    server: StringProperty(name="Server URL", default="http://127.0.0.1:8642", description="A neuralbake service started with --models")
    token: StringProperty(name="API token", default="", subtype="PASSWORD", description="`neuralbake token create NAME` on the server")

    def draw(self, context):
        self.layout.prop(self, "mode")
        if self.mode == "LOCAL":
            self.layout.prop(self, "executable")
            self.layout.prop(self, "device")
        else:
            self.layout.prop(self, "server")
            self.layout.prop(self, "token")
            self.layout.label(text="On a server, model, ControlNet and LoRA paths name entries of its --models library.")


class NEURALBAKE_Lora(bpy.types.PropertyGroup):
    path: StringProperty(name="LoRA", subtype="FILE_PATH", description="A LoRA .safetensors file")
    weight: FloatProperty(name="Weight", default=0.8, min=-4.0, max=4.0)


class NEURALBAKE_Pass(bpy.types.PropertyGroup):
    ids: StringProperty(name="Object indexes", default="1", description="Pass indexes (Object Properties > Relations > Pass Index) this pass covers, e.g. 2,3")
    prompt: StringProperty(name="Prompt", description="This pass's prompt (empty: the main one)")
    strength: FloatProperty(name="Strength", default=0.6, min=0.0, max=1.0)
    lora: StringProperty(name="LoRA", subtype="FILE_PATH", description="This pass's LoRA (empty: the main ones)")
    lora_weight: FloatProperty(name="LoRA weight", default=0.8, min=-4.0, max=4.0)


class NEURALBAKE_Settings(bpy.types.PropertyGroup):
    enabled: BoolProperty(name="Run after renders", default=False, description="Run the AI pass when a render or an animation render completes")
    prompt: StringProperty(name="Prompt", default="")
    negative: StringProperty(name="Negative", default="")
    model: StringProperty(name="Model folder", subtype="DIR_PATH", description="Diffusion model in the diffusers layout (SD, SDXL or Flux)")
    strength: FloatProperty(name="Strength", default=0.5, min=0.0, max=1.0, description="0 keeps the render, 1 ignores it")
    steps: IntProperty(name="Steps", default=20, min=1, max=200)
    guidance: FloatProperty(name="Guidance", default=7.0, min=0.0, max=50.0)
    seed: IntProperty(name="Seed", default=0, min=0)
    size: IntProperty(name="Working size", default=1024, min=64, max=4096, description="Longest side the diffusion works at")
    upscale: EnumProperty(name="Upscale", items=[("1", "Off", ""), ("2", "2x", ""), ("4", "4x", "")], default="1")
    temporal: FloatProperty(name="Temporal blend", default=0.5, min=0.0, max=1.0, description="Animation: share of the previous output in each frame's start")
    feather: FloatProperty(name="Mask feather", default=2.0, min=0.0, max=64.0)
    use_canny: BoolProperty(name="Canny", default=False)
    canny_model: StringProperty(name="Canny ControlNet", subtype="DIR_PATH")
    canny_scale: FloatProperty(name="Scale", default=1.0, min=0.0, max=2.0)
    use_depth: BoolProperty(name="Depth", default=True)
    depth_model: StringProperty(name="Depth ControlNet", subtype="DIR_PATH")
    depth_scale: FloatProperty(name="Scale", default=1.0, min=0.0, max=2.0)
    use_normal: BoolProperty(name="Normals", default=False)
    normal_model: StringProperty(name="Normal ControlNet", subtype="DIR_PATH")
    normal_scale: FloatProperty(name="Scale", default=1.0, min=0.0, max=2.0)
    use_segmentation: BoolProperty(name="Segmentation", default=False)
    segmentation_model: StringProperty(name="Segmentation ControlNet", subtype="DIR_PATH")
    segmentation_scale: FloatProperty(name="Scale", default=1.0, min=0.0, max=2.0)
    loras: CollectionProperty(type=NEURALBAKE_Lora)
    passes: CollectionProperty(type=NEURALBAKE_Pass)
    output_dir: StringProperty(name="Output folder", subtype="DIR_PATH", default="//neuralbake_postfx/",
                               description="Where results go (// is the .blend's folder; a temporary folder for unsaved files)")
    status: StringProperty(name="Status", default="")


CLASSES = (NEURALBAKE_Preferences, NEURALBAKE_Lora, NEURALBAKE_Pass, NEURALBAKE_Settings)
"""Registered in this order (a collection's item type before the group that holds it)."""


def scene_settings(scene):
    """The AI pass's settings of ``scene``."""
    return scene.neuralbake_postfx


def prefs():
    """The add-on's preferences, or None while it is not enabled."""
    found = bpy.context.preferences.addons.get(ADDON)
    return found.preferences if found is not None else None


def executable() -> str:
    """The neuralbake command: the preferences' path, or found on PATH."""
    given = prefs().executable if prefs() is not None else ""
    found = bpy.path.abspath(given) if given else shutil.which("neuralbake")
    if not found:
        raise RuntimeError("neuralbake was not found: set its path in the add-on's preferences, or put it on PATH.")
    return found


def device() -> str:
    found = prefs()
    return found.device if found is not None else "auto"


def on_server() -> bool:
    found = prefs()
    return found is not None and found.mode == "SERVER"


def output_folder(scene) -> str:
    """The result folder (absolute); ``//`` resolves against the .blend, or a temporary folder for an unsaved file."""
    folder = scene_settings(scene).output_dir or "//neuralbake_postfx/"
    if folder.startswith("//") and not bpy.data.filepath:
        folder = os.path.join(tempfile.gettempdir(), "neuralbake_postfx", folder[2:])
    folder = bpy.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    return folder
