"""Run inside Blender's Python (bpy 5.0): install neuralbake's add-on from its zip, render a small scene
with Cycles on the CPU with Z, normal, object-index and vector passes, let the add-on's handlers run
the AI pass through the local neuralbake, then an animation of 3 frames, then (given a server) the still
through a neuralbake server over HTTP. Prints one line
``RESULT {json}`` with what it found."""

import json
import os
import sys

import bpy

zip_path, model, controlnet, executable, out = sys.argv[1:6]
server = sys.argv[6:9]  # URL, token, the model's and ControlNet's library folder, when the server phase runs

bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.preferences.addon_install(filepath=zip_path, overwrite=True)
bpy.ops.preferences.addon_enable(module="neuralbake_postfx")
prefs = bpy.context.preferences.addons["neuralbake_postfx"].preferences
prefs.executable = executable
prefs.device = "cpu"

scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.cycles.device = "CPU"
scene.cycles.samples = 4
scene.render.resolution_x, scene.render.resolution_y, scene.render.resolution_percentage = 64, 48, 100
scene.render.use_motion_blur = False
bpy.ops.mesh.primitive_cube_add(location=(-0.8, 0, 0), size=1.2)
cube = bpy.context.active_object
cube.pass_index = 1
bpy.ops.mesh.primitive_uv_sphere_add(location=(1.0, 0, 0), radius=0.7)
bpy.context.active_object.pass_index = 2
bpy.ops.object.camera_add(location=(0, -6, 1.5), rotation=(1.35, 0, 0))
scene.camera = bpy.context.active_object
bpy.ops.object.light_add(type="SUN", location=(0, 0, 5))
layer = scene.view_layers[0]
layer.use_pass_z = layer.use_pass_normal = layer.use_pass_object_index = layer.use_pass_vector = True

s = scene.neuralbake_postfx
s.enabled = True
s.model = model
s.use_depth, s.depth_model = True, controlnet
s.use_normal, s.normal_model, s.normal_scale = True, controlnet, 0.5
s.prompt = "a copper cube beside a glass ball"
s.steps, s.size, s.strength, s.seed = 2, 64, 0.6, 1
p = s.passes.add()
p.ids, p.prompt, p.strength = "2", "a glass ball", 0.8
s.output_dir = out

result = {}
bpy.ops.render.render(write_still=False)
image = bpy.data.images.get("neuralbake postfx")
result["still"] = {"status": s.status, "image": None if image is None else list(image.size), "file": os.path.join(out, "frame_00001", "result.png")}
result["still"]["exists"] = os.path.isfile(result["still"]["file"])

# an animation: the cube moves right by 0.2 per frame
scene.frame_start, scene.frame_end = 1, 3
for frame in (1, 3):
    scene.frame_set(frame)
    cube.location.x = -0.8 + 0.2 * (frame - 1)
    cube.keyframe_insert("location", frame=frame)
for curve in cube.animation_data.action.layers[0].strips[0].channelbag(cube.animation_data.action.slots[0]).fcurves if hasattr(cube.animation_data.action, "layers") else cube.animation_data.action.fcurves:
    for point in curve.keyframe_points:
        point.interpolation = "LINEAR"
scene.render.filepath = os.path.join(out, "blender_frames", "")
scene.render.image_settings.file_format = "PNG"
bpy.ops.render.render(animation=True)
frames_dir = os.path.join(out, "animation", "frames")
result["animation"] = {"status": s.status, "frames": sorted(os.listdir(frames_dir)) if os.path.isdir(frames_dir) else []}
report = os.path.join(out, "animation", "report.json")
if os.path.isfile(report):
    with open(report) as handle:
        data = json.load(handle)
    result["animation"].update(temporal_ratio=data.get("temporal_ratio"), motion=data.get("temporal", {}).get("motion_vectors"))
result["exr_folders"] = sorted(d for d in os.listdir(out) if d.startswith("frames-"))
image = bpy.data.images.get("neuralbake postfx")
result["image_after_animation"] = None if image is None else bpy.path.abspath(image.filepath)

# the selected object baked with `neuralbake fit` (small sizes) and imported back
bpy.ops.object.select_all(action="DESELECT")
material = bpy.data.materials.new("copper")
material.use_nodes = True
material.node_tree.nodes["Principled BSDF"].inputs["Base Color"].default_value = (0.8, 0.4, 0.2, 1.0)
cube.data.materials.append(material)
cube.select_set(True)
bpy.context.view_layer.objects.active = cube
before = set(bpy.data.objects)
fitted = bpy.ops.neuralbake.bake_selected(kind="fit", extra="--render-size 32 --size 64 --views 6 --held-out 2 --epochs 2 --environment-samples 4 --no-shadows")
new_objects = [o for o in bpy.data.objects if o not in before]
result["fit"] = {"operator": sorted(fitted), "status": s.status, "imported": [o.name for o in new_objects],
                 "textured": any(n.type == "TEX_IMAGE" for o in new_objects for slot in o.material_slots if slot.material and slot.material.node_tree
                                 for n in slot.material.node_tree.nodes)}

if server:
    # the same still, sent to a neuralbake server over HTTP; names are entries of its model library
    url, token, library = server
    prefs.mode, prefs.server, prefs.token = "SERVER", url, token
    s.model, s.depth_model, s.normal_model = f"{library}/base", f"{library}/controlnet", f"{library}/controlnet"
    scene.frame_set(1)
    bpy.ops.render.render(write_still=False)
    file = os.path.join(out, "frame_00001", "report.json")
    with open(file) as handle:
        served = json.load(handle)
    result["server"] = {"status": s.status, "job": served.get("server_job"), "controlnets": [c["condition"] for c in served["controlnets"]],
                        "image": bpy.path.abspath(bpy.data.images["neuralbake postfx"].filepath)}
    bpy.ops.render.render(animation=True)
    served_frames = os.path.join(out, "animation", "frames")
    result["server_animation"] = {"status": s.status, "frames": sorted(os.listdir(served_frames)) if os.path.isdir(served_frames) else []}
    with open(os.path.join(out, "animation", "report.json")) as handle:
        result["server_animation"]["job"] = json.load(handle).get("server_job")
    scene.frame_start = scene.frame_end = 1
    s.model = "../outside"
    bpy.ops.render.render(write_still=False)
    result["server_refused"] = s.status
print("RESULT " + json.dumps(result))
