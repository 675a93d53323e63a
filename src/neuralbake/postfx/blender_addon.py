"""neuralbake's AI render pass inside Blender (seed 004), a Blender add-on: ``neuralbake postfx addon --out
neuralbake_postfx.zip`` packages this file as ``neuralbake_postfx/__init__.py`` for Edit > Preferences >
Add-ons > Install from Disk (Blender 4.2 to 5.x). It runs inside Blender's Python, never in neuralbake's.

After a render, the image and its Z, normal,
object-index and vector passes go through neuralbake's chain (ControlNets from the true passes, a
diffusion model with LoRAs and a prompt, composition by object masks, Real-ESRGAN), and the result
comes back as an image in Blender and a file on disk.

The add-on imports neither torch nor neuralbake: it runs the chain through a ``neuralbake``
executable (Preferences > Add-ons > neuralbake AI render pass: the path, or found on PATH), so the
models and the GPU stay with neuralbake's own Python, or, in the server mode, sends the render to a
``neuralbake serve --models DIR`` over HTTP (Python's own ``urllib``; Blender ships no HTTP client),
so the GPU can be another machine; model, ControlNet and LoRA names are then entries of the server's
library. Stills: the render result is saved as one
multilayer OpenEXR (every pass) and processed when the render completes. Animations: each frame is
saved the same way and the sequence is processed once at the end, with one seed, the previous output
blended into each frame's start and carried along Blender's Vector pass. The viewport button runs the
chain on a viewport snapshot (``render.opengl``). "Fit selection" / "LOD of selection" export the
selected objects as GLB, bake them with ``neuralbake fit`` or ``neuralbake lod`` and import the
result. Render settings are in Render Properties > neuralbake AI pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading

import bpy
from bpy.app.handlers import persistent
from bpy.props import BoolProperty, CollectionProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty, StringProperty

bl_info = {
    "name": "neuralbake AI render pass",
    "author": "neuralbake",
    "version": (0, 1, 0),
    "blender": (4, 2, 0),
    "location": "Properties > Render > neuralbake AI pass",
    "description": "Runs neuralbake's ControlNet + diffusion + LoRA + upscaler chain on renders, with the render's true passes",
    "category": "Render",
}

RESULT_IMAGE = "neuralbake postfx"
"""Name of the image datablock the result is loaded into (shown in the render window)."""

CONDITIONS = ("canny", "depth", "normal", "segmentation")


# -- settings ----------------------------------------------------------------------------------


class NEURALBAKE_Preferences(bpy.types.AddonPreferences):
    bl_idname = __package__ or __name__

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


# -- running the chain -------------------------------------------------------------------------


def _settings(scene):
    return scene.neuralbake_postfx


def _executable() -> str:
    prefs = bpy.context.preferences.addons.get(__package__ or __name__)
    given = prefs.preferences.executable if prefs is not None else ""
    found = bpy.path.abspath(given) if given else shutil.which("neuralbake")
    if not found:
        raise RuntimeError("neuralbake was not found: set its path in the add-on's preferences, or put it on PATH.")
    return found


def _prefs():
    found = bpy.context.preferences.addons.get(__package__ or __name__)
    return found.preferences if found is not None else None


def _device() -> str:
    prefs = _prefs()
    return prefs.device if prefs is not None else "auto"


def _on_server() -> bool:
    prefs = _prefs()
    return prefs is not None and prefs.mode == "SERVER"


def _library_name(path: str) -> str:
    """On a server, a model path is a name in its library: the text as typed, without Blender's // prefix or a trailing slash."""
    return path[2:].rstrip("/\\") if path.startswith("//") else path.rstrip("/\\")


def output_folder(scene) -> str:
    """The result folder (absolute); ``//`` resolves against the .blend, or a temporary folder for an unsaved file."""
    folder = _settings(scene).output_dir or "//neuralbake_postfx/"
    if folder.startswith("//") and not bpy.data.filepath:
        folder = os.path.join(tempfile.gettempdir(), "neuralbake_postfx", folder[2:])
    folder = bpy.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    return folder


def _world_to_view(scene) -> list[float]:
    """The camera's world-to-view rotation, row by row (right, up, towards the camera): Blender's normal pass is in world space."""
    camera = scene.camera
    if camera is None:
        return []
    rotation = camera.matrix_world.to_3x3().normalized().transposed()
    return [float(rotation[r][c]) for r in range(3) for c in range(3)]


def chain_config(scene, *, exr_passes: bool) -> dict:
    """The chain's settings from the panel, as neuralbake's config file (TOML keys, written as JSON)."""
    s = _settings(scene)
    controlnets = []
    for name in CONDITIONS:
        if getattr(s, f"use_{name}"):
            typed = getattr(s, f"{name}_model")
            folder = _library_name(typed) if _on_server() else bpy.path.abspath(typed)
            if not folder:
                raise RuntimeError(f"the {name} ControlNet is on but has no folder.")
            controlnets.append(f"{name}={folder.rstrip(os.sep)}:{getattr(s, f'{name}_scale'):g}")
    passes = []
    for p in s.passes:
        ids = [int(x) for x in p.ids.replace(" ", "").split(",") if x]
        entry = {"ids": ids, "prompt": p.prompt, "strength": p.strength}
        if p.lora:
            entry["loras"] = [f"{_library_name(p.lora) if _on_server() else bpy.path.abspath(p.lora)}:{p.lora_weight:g}"]
        passes.append(entry)
    config = {
        "model": _library_name(s.model) if _on_server() else bpy.path.abspath(s.model).rstrip(os.sep),
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
        "loras": [f"{_library_name(lora.path) if _on_server() else bpy.path.abspath(lora.path)}:{lora.weight:g}" for lora in s.loras if lora.path],
        "passes": passes,
        "device": _device(),
    }
    if exr_passes:
        config["world_to_view"] = _world_to_view(scene)
    return config


def _pass_fields(scene, passes_file: bool) -> list[str]:
    s = _settings(scene)
    if not passes_file:
        return []
    wanted = {"depth": s.use_depth, "normal": s.use_normal, "ids": s.use_segmentation or len(s.passes) > 0}
    return [name for name, use in wanted.items() if use]


def _http(method: str, url: str, token: str, body: bytes | None = None, content_type: str | None = None) -> bytes:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        try:
            problem = json.loads(exc.read().decode("utf-8"))
            message = f"{problem.get('field') or ''}: {problem.get('error')}" + (f" Fix: {problem['fix']}" if problem.get("fix") else "")
        except (ValueError, AttributeError):
            message = str(exc)
        raise RuntimeError(f"the server refused the request ({exc.code}): {message}") from None
    except urllib.error.URLError as exc:
        raise RuntimeError(f"the server at {url.split('/api')[0]} cannot be reached ({exc.reason}).") from None


def run_on_server(scene, render: str, out: str, *, passes_file: bool) -> dict:
    """Upload ``render`` (a multilayer EXR, or a folder of them for an animation) to the neuralbake server, run a postfx job
    there, and download its result into ``out``."""
    import time
    import uuid

    prefs = _prefs()
    base, token = prefs.server.rstrip("/"), prefs.token
    boundary = uuid.uuid4().hex
    sequence = os.path.isdir(render)
    if sequence:  # the frames go up as one upload, in a folder the job names
        sent = [(f"frames/{f}", os.path.join(render, f)) for f in sorted(os.listdir(render)) if f.lower().endswith(".exr")]
    else:
        sent = [(os.path.basename(render), render)]
    body = b""
    for name, path in sent:
        with open(path, "rb") as handle:
            payload = handle.read()
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n").encode() + payload + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    upload = json.loads(_http("POST", f"{base}/api/uploads", token, body, f"multipart/form-data; boundary={boundary}"))
    ref = f"{upload['id']}/frames" if sequence else f"{upload['id']}/{sent[0][0]}"
    config = chain_config(scene, exr_passes=passes_file)
    config.pop("device", None)  # the server's workers pick their own
    inputs = {"render": ref, **{field: ref for field in _pass_fields(scene, passes_file)}}
    if sequence and _uses_vector(scene):
        inputs["motion"] = ref
    job = json.loads(_http("POST", f"{base}/api/jobs", token, json.dumps({"kind": "postfx", "config": config, "inputs": inputs}).encode(), "application/json"))
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.5)
        job = json.loads(_http("GET", f"{base}/api/jobs/{job['id']}", token))
    if job["status"] != "succeeded":
        raise RuntimeError(f"the server's job {job['id']} {job['status']}: {job.get('error') or ''}")
    files = json.loads(_http("GET", f"{base}/api/jobs/{job['id']}/files", token))["files"]
    os.makedirs(out, exist_ok=True)
    for wanted in files:
        if wanted in ("result.png", "report.json", "comparison.png") or wanted.startswith("frames/"):
            target = os.path.join(out, *wanted.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(_http("GET", f"{base}/api/jobs/{job['id']}/files/{wanted}", token))
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    report["server_job"] = job["id"]
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)  # the local copy says which server job made it
    return report


def run_chain(scene, render: str, out: str, *, passes_file: bool, motion: bool = False) -> dict:
    """Run ``neuralbake postfx`` on ``render`` (a multilayer EXR, a frames folder of them, or a PNG) into ``out``; return its report.
    With the server mode of the preferences, a still goes to the neuralbake server instead."""
    if _on_server():
        return run_on_server(scene, render, out, passes_file=passes_file)
    config = chain_config(scene, exr_passes=passes_file)
    config_file = os.path.join(out + ".config.json")
    os.makedirs(os.path.dirname(config_file), exist_ok=True)
    with open(config_file, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    argv = [_executable(), "postfx", "run", render, "--config", config_file, "--out", out, "--quiet"]
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
def _on_render_init(scene, *args):
    if not _settings(scene).enabled:
        return
    folder = tempfile.mkdtemp(prefix="frames-", dir=output_folder(scene))
    _state.update(frames=[], folder=folder, error=None)


@persistent
def _on_render_post(scene, *args):
    if not _settings(scene).enabled or _state["folder"] is None:
        return
    _state["frames"].append(_save_frame(scene, _state["folder"]))


def _finish(scene_name: str, render: str, out: str, sequence: bool) -> None:
    scene = bpy.data.scenes[scene_name]
    try:
        report = run_chain(scene, render, out, passes_file=True, motion=sequence and _uses_vector(scene))
        _state["report"] = report
    except Exception as exc:  # noqa: BLE001 - shown in the panel and the console, Blender keeps running
        _state["error"] = str(exc)


def _uses_vector(scene) -> bool:
    return any(layer.use_pass_vector for layer in scene.view_layers)


def _show(scene_name: str, out: str, sequence: bool) -> None:
    scene = bpy.data.scenes[scene_name]
    if _state.get("error"):
        _settings(scene).status = f"failed: {_state['error']}"
        print(f"neuralbake postfx: {_state['error']}")
        return
    if sequence:
        frames = sorted(os.listdir(os.path.join(out, "frames")))
        show_result(os.path.join(out, "frames", frames[-1]))
        _settings(scene).status = f"{len(frames)} frames -> {os.path.join(out, 'frames')}"
    else:
        show_result(os.path.join(out, "result.png"))
        _settings(scene).status = f"done -> {os.path.join(out, 'result.png')}"


@persistent
def _on_render_complete(scene, *args):
    if not _settings(scene).enabled or not _state["frames"]:
        return
    frames, folder = list(_state["frames"]), _state["folder"]
    sequence = len(frames) > 1
    render = folder if sequence else frames[0]
    out = os.path.join(output_folder(scene), f"frame_{frames[0][-9:-4]}" if not sequence else "animation")
    _state["frames"], _state["folder"] = [], None
    _settings(scene).status = "running..."
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


# -- operators and panel -----------------------------------------------------------------------


class NEURALBAKE_OT_run_viewport(bpy.types.Operator):
    """Run the AI pass on a snapshot of the 3D viewport"""

    bl_idname = "neuralbake.postfx_viewport"
    bl_label = "AI pass on viewport"

    def execute(self, context):
        scene = context.scene
        folder = output_folder(scene)
        path = os.path.join(folder, "viewport.png")
        s = _settings(scene)
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
        _settings(context.scene).enabled = True  # the pass stays on for later renders (the checkbox in the panel's header)
        bpy.ops.render.render("EXEC_DEFAULT" if bpy.app.background else "INVOKE_DEFAULT")
        return {"FINISHED"}


def bake_selected(context, kind: str, ratio: float, extra: str) -> list:
    """Export the selected objects as one GLB, bake it with ``neuralbake fit`` (the PBR look into an unlit
    texture on the same mesh) or ``neuralbake lod`` (simplified to ``ratio`` first), import the result.
    Returns the imported objects."""
    import shlex

    folder = tempfile.mkdtemp(prefix=f"{kind}-", dir=output_folder(context.scene))
    source = os.path.join(folder, "selected.glb")
    bpy.ops.export_scene.gltf(filepath=source, export_format="GLB", use_selection=True)
    out = os.path.join(folder, "out")
    if _on_server():
        raise RuntimeError("baking the selection runs with the local neuralbake (use `neuralbake submit` for the server).")
    argv = [_executable(), kind, source, "--out", out, "--device", _device(), "--quiet", *shlex.split(extra)]
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
            _settings(context.scene).status = f"failed: {exc}"
            return {"CANCELLED"}
        _settings(context.scene).status = f"imported {', '.join(o.name for o in imported)}"
        return {"FINISHED"}


class NEURALBAKE_OT_list_add(bpy.types.Operator):
    """Add an entry"""

    bl_idname = "neuralbake.postfx_add"
    bl_label = "Add"
    which: StringProperty()

    def execute(self, context):
        getattr(_settings(context.scene), self.which).add()
        return {"FINISHED"}


class NEURALBAKE_OT_list_remove(bpy.types.Operator):
    """Remove the last entry"""

    bl_idname = "neuralbake.postfx_remove"
    bl_label = "Remove"
    which: StringProperty()

    def execute(self, context):
        items = getattr(_settings(context.scene), self.which)
        if len(items):
            items.remove(len(items) - 1)
        return {"FINISHED"}


class RENDER_PT_neuralbake_postfx(bpy.types.Panel):
    bl_label = "neuralbake AI pass"
    bl_space_type = "PROPERTIES"
    bl_region_type = "WINDOW"
    bl_context = "render"

    def draw_header(self, context):
        self.layout.prop(_settings(context.scene), "enabled", text="")

    def draw(self, context):
        s = _settings(context.scene)
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


CLASSES = (NEURALBAKE_Preferences, NEURALBAKE_Lora, NEURALBAKE_Pass, NEURALBAKE_Settings, NEURALBAKE_OT_run_viewport, NEURALBAKE_OT_run_last,
           NEURALBAKE_OT_bake_selected,
           NEURALBAKE_OT_list_add, NEURALBAKE_OT_list_remove, RENDER_PT_neuralbake_postfx)
HANDLERS = ((bpy.app.handlers.render_init, _on_render_init), (bpy.app.handlers.render_post, _on_render_post),
            (bpy.app.handlers.render_complete, _on_render_complete))


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Scene.neuralbake_postfx = PointerProperty(type=NEURALBAKE_Settings)
    for handlers, handler in HANDLERS:
        if handler not in handlers:
            handlers.append(handler)


def unregister():
    for handlers, handler in HANDLERS:
        if handler in handlers:
            handlers.remove(handler)
    del bpy.types.Scene.neuralbake_postfx
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
