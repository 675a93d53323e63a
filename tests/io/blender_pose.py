"""Run inside Blender's Python (bpy): import a glTF, pose it at a time of its first animation and
print every mesh vertex in glTF world coordinates (Y up) as JSON.

    python blender_pose.py FILE.gltf SECONDS

Used by tests/io/test_blender.py, in a separate environment with bpy (which needs numpy < 2).
"""

import json
import sys

import bpy

path, seconds = sys.argv[1], float(sys.argv[2])
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.import_scene.gltf(filepath=path)
scene = bpy.context.scene
fps = scene.render.fps / scene.render.fps_base
actions = [a.name for a in bpy.data.actions]
scene.frame_set(int(round(seconds * fps)), subframe=seconds * fps - int(round(seconds * fps)))
depsgraph = bpy.context.evaluated_depsgraph_get()
shapes = {pb.custom_shape.name for o in scene.objects if o.type == "ARMATURE" for pb in o.pose.bones if pb.custom_shape is not None}
points = []
for obj in scene.objects:
    if obj.type != "MESH" or obj.name in shapes:  # the importer's bone display shapes are not the asset
        continue
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    matrix = evaluated.matrix_world
    for v in mesh.vertices:
        x, y, z = matrix @ v.co
        points.append([x, z, -y])  # Blender is Z up; glTF Y up
    evaluated.to_mesh_clear()
print("POSE" + json.dumps({"points": points, "actions": actions, "fps": fps}))
