"""The AI render pass in Blender: after a render, the image and its Z, normal, object-index and vector
passes go through neuralbake's chain (ControlNets from the true passes, a diffusion model with LoRAs
and a prompt, composition by object masks, Real-ESRGAN), and the result comes back as an image in
Blender and a file on disk.

Stills: the render result is saved as one multilayer OpenEXR (every pass) and processed when the
render completes. Animations: each frame is saved the same way and the sequence is processed once at
the end, with one seed, the previous output blended into each frame's start and carried along
Blender's Vector pass. The viewport operator runs the chain on a viewport snapshot (``render.opengl``).
The chain runs through the local ``neuralbake`` executable or, in the server mode, on a neuralbake
server (:mod:`.remote`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading

import bpy
from bpy.app.handlers import persistent

from .remote import library_name, run_on_server
from .settings import device, executable, on_server, output_folder, prefs, scene_settings

RESULT_IMAGE = "neuralbake postfx"
"""Name of the image datablock the result is loaded into (shown in the render window)."""

CONDITIONS = ("canny", "depth", "normal", "segmentation")


def _world_to_view(scene) -> list[float]:
    """The camera's world-to-view rotation, row by row (right, up, towards the camera): Blender's normal pass is in world space."""
    camera = scene.camera
    if camera is None:
        return []
    rotation = camera.matrix_world.to_3x3().normalized().transposed()
    return [float(rotation[r][c]) for r in range(3) for c in range(3)]


def _path(typed: str) -> str:
    """A model, ControlNet or LoRA path as the runner reads it: a library name on a server, an absolute path here."""
    return library_name(typed) if on_server() else bpy.path.abspath(typed).rstrip(os.sep)


def chain_config(scene, *, exr_passes: bool) -> dict:
    """The chain's settings from the panel, as neuralbake's config file (TOML keys, written as JSON)."""
    s = scene_settings(scene)
    controlnets = []
    for name in CONDITIONS:
        if getattr(s, f"use_{name}"):
            folder = _path(getattr(s, f"{name}_model"))
            if not folder:
                raise RuntimeError(f"the {name} ControlNet is on but has no folder.")
            controlnets.append(f"{name}={folder}:{getattr(s, f'{name}_scale'):g}")
    passes = []
    for p in s.passes:
        ids = [int(x) for x in p.ids.replace(" ", "").split(",") if x]
        entry = {"ids": ids, "prompt": p.prompt, "strength": p.strength}
        if p.lora:
            entry["loras"] = [f"{_path(p.lora)}:{p.lora_weight:g}"]
        passes.append(entry)
    config = {
        "model": _path(s.model),
        "prompt": s.prompt,
        "negative_prompt": s.negative,
        "strength": s.strength,
        "steps": s.steps,
        "guidance": s.guidance,
        "seed": s.seed,
        "size": s.size,
        "upscale": int(s.upscale),
        "temporal": s.temporal,
        "feather": s.feather,
        "controlnets": controlnets,
        "loras": [f"{_path(lora.path)}:{lora.weight:g}" for lora in s.loras if lora.path],
        "passes": passes,
        "device": device(),
    }
    if exr_passes:
        config["world_to_view"] = _world_to_view(scene)
    return config


def _pass_fields(scene, passes_file: bool) -> list[str]:
    s = scene_settings(scene)
    if not passes_file:
        return []
    wanted = {"depth": s.use_depth, "normal": s.use_normal, "ids": s.use_segmentation or len(s.passes) > 0}
    return [name for name, use in wanted.items() if use]


def _uses_vector(scene) -> bool:
    return any(layer.use_pass_vector for layer in scene.view_layers)


def run_chain(scene, render: str, out: str, *, passes_file: bool, motion: bool = False) -> dict:
    """Run ``neuralbake postfx`` on ``render`` (a multilayer EXR, a frames folder of them, or a PNG) into ``out``; return its report.
    With the server mode of the preferences, the render goes to the neuralbake server instead."""
    config = chain_config(scene, exr_passes=passes_file)
    if on_server():
        found = prefs()
        return run_on_server(found.server, found.token, render, out, config, _pass_fields(scene, passes_file), motion=motion)
    config_file = os.path.join(out + ".config.json")
    os.makedirs(os.path.dirname(config_file), exist_ok=True)
    with open(config_file, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    argv = [executable(), "postfx", "run", render, "--config", config_file, "--out", out, "--quiet"]
    for name in _pass_fields(scene, passes_file):
        argv += [f"--{name}", render]
    if passes_file and motion:
        argv += ["--motion", render]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = " ".join((done.stderr or done.stdout).split())  # neuralbake's one error, unwrapped
        raise RuntimeError(message[-600:] or f"neuralbake exited with {done.returncode}")
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        return json.load(handle)


def show_result(path: str, name: str = RESULT_IMAGE):
    """Load ``path`` into the image datablock ``name`` (replacing its pixels) and show it in any image editor showing the render."""
    image = bpy.data.images.get(name)
    if image is None:
        image = bpy.data.images.load(path, check_existing=False)
        image.name = name
    else:
        image.filepath = path
        image.reload()
    for window in getattr(bpy.context.window_manager, "windows", []):
        for area in window.screen.areas:
            if area.type == "IMAGE_EDITOR" and area.spaces.active.image is not None and area.spaces.active.image.type == "RENDER_RESULT":
                area.spaces.active.image = image
    return image


# -- render handlers ---------------------------------------------------------------------------

_state = {"frames": [], "folder": None, "thread": None, "error": None}


def _save_frame(scene, folder: str) -> str:
    """Write the render result with every pass as a multilayer OpenEXR (the scene's output format is restored)."""
    settings = scene.render.image_settings
    kept = (settings.media_type, settings.file_format, settings.color_depth)
    try:
        settings.media_type = "MULTI_LAYER_IMAGE"
        settings.file_format = "OPEN_EXR_MULTILAYER"
        settings.color_depth = "32"
        path = os.path.join(folder, f"{scene.frame_current:05d}.exr")
        bpy.data.images["Render Result"].save_render(filepath=path, scene=scene)
    finally:
        settings.media_type, settings.file_format, settings.color_depth = kept
    return path


@persistent
def on_render_init(scene, *args):
    if not scene_settings(scene).enabled:
        return
    folder = tempfile.mkdtemp(prefix="frames-", dir=output_folder(scene))
    _state.update(frames=[], folder=folder, error=None)


@persistent
def on_render_post(scene, *args):
    if not scene_settings(scene).enabled or _state["folder"] is None:
        return
    _state["frames"].append(_save_frame(scene, _state["folder"]))


def _finish(scene_name: str, render: str, out: str, sequence: bool) -> None:
    scene = bpy.data.scenes[scene_name]
    try:
        _state["report"] = run_chain(scene, render, out, passes_file=True, motion=sequence and _uses_vector(scene))
    except Exception as exc:  # noqa: BLE001 - shown in the panel and the console, Blender keeps running
        _state["error"] = str(exc)


def _show(scene_name: str, out: str, sequence: bool) -> None:
    scene = bpy.data.scenes[scene_name]
    if _state.get("error"):
        scene_settings(scene).status = f"failed: {_state['error']}"
        print(f"neuralbake postfx: {_state['error']}")
        return
    if sequence:
        frames = sorted(os.listdir(os.path.join(out, "frames")))
        show_result(os.path.join(out, "frames", frames[-1]))
        scene_settings(scene).status = f"{len(frames)} frames -> {os.path.join(out, 'frames')}"
    else:
        show_result(os.path.join(out, "result.png"))
        scene_settings(scene).status = f"done -> {os.path.join(out, 'result.png')}"


@persistent
def on_render_complete(scene, *args):
    if not scene_settings(scene).enabled or not _state["frames"]:
        return
    frames, folder = list(_state["frames"]), _state["folder"]
    sequence = len(frames) > 1
    render = folder if sequence else frames[0]
    out = os.path.join(output_folder(scene), f"frame_{frames[0][-9:-4]}" if not sequence else "animation")
    _state["frames"], _state["folder"] = [], None
    scene_settings(scene).status = "running..."
    if bpy.app.background:  # no UI to keep responsive: run now
        _finish(scene.name, render, out, sequence)
        _show(scene.name, out, sequence)
        return
    thread = threading.Thread(target=_finish, args=(scene.name, render, out, sequence), daemon=True)
    _state["thread"] = thread
    thread.start()

    def poll():
        if thread.is_alive():
            return 0.5
        _show(scene.name, out, sequence)
        return None

    bpy.app.timers.register(poll, first_interval=0.5)


HANDLERS = ((bpy.app.handlers.render_init, on_render_init), (bpy.app.handlers.render_post, on_render_post),
            (bpy.app.handlers.render_complete, on_render_complete))


# -- operators ---------------------------------------------------------------------------------


class NEURALBAKE_OT_run_viewport(bpy.types.Operator):
    """Run the AI pass on a snapshot of the 3D viewport"""

    bl_idname = "neuralbake.postfx_viewport"
    bl_label = "AI pass on viewport"

    def execute(self, context):
        scene = context.scene
        folder = output_folder(scene)
        path = os.path.join(folder, "viewport.png")
        s = scene_settings(scene)
        was, s.enabled = s.enabled, False  # the snapshot is not a render for the handlers
        try:
            bpy.ops.render.opengl(write_still=False, view_context=True)
        finally:
            s.enabled = was
        settings = scene.render.image_settings
        kept = (settings.media_type, settings.file_format)
        try:
            settings.media_type, settings.file_format = "IMAGE", "PNG"
            bpy.data.images["Render Result"].save_render(filepath=path, scene=scene)
        finally:
            settings.media_type, settings.file_format = kept
        try:
            run_chain(scene, path, os.path.join(folder, "viewport"), passes_file=False)
        except RuntimeError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        show_result(os.path.join(folder, "viewport", "result.png"))
        return {"FINISHED"}


class NEURALBAKE_OT_run_last(bpy.types.Operator):
    """Turn the AI pass on, render the current frame and run the pass on it"""

    bl_idname = "neuralbake.postfx_render"
    bl_label = "Render + AI pass"

    def execute(self, context):
        scene_settings(context.scene).enabled = True  # the pass stays on for later renders (the checkbox in the panel's header)
        bpy.ops.render.render("EXEC_DEFAULT" if bpy.app.background else "INVOKE_DEFAULT")
        return {"FINISHED"}


CLASSES = (NEURALBAKE_OT_run_viewport, NEURALBAKE_OT_run_last)
