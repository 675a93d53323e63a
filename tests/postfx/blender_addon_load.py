"""Run inside Blender's Python (bpy 5.0): install and enable neuralbake's add-on from its zip, then
report where its HTTP client comes from and what that client does against a closed port. Prints one
line ``LOADED {json}``."""

import json
import socket
import sys

import bpy

zip_path = sys.argv[1]
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.preferences.addon_install(filepath=zip_path, overwrite=True)
bpy.ops.preferences.addon_enable(module="neuralbake_postfx")

import neuralbake_postfx.remote as remote  # noqa: E402  (importable once the add-on is enabled)

from neuralbake.client import ServiceClient, ServiceError  # noqa: E402  (the add-on put its vendor folder on sys.path)

with socket.socket() as probe:  # a port nothing listens on
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
try:
    ServiceClient(f"http://127.0.0.1:{port}", "token").jobs()
    refused = None
except ServiceError as exc:
    refused = str(exc)
print("LOADED " + json.dumps({
    "client_file": sys.modules["neuralbake.client.client"].__file__,
    "remote_uses_it": remote.ServiceClient is ServiceClient,
    "operators": sorted(name for name in ("postfx_viewport", "postfx_render", "bake_selected", "postfx_add", "postfx_remove")
                        if hasattr(bpy.types, f"NEURALBAKE_OT_{name}")),
    "settings": hasattr(bpy.context.scene, "neuralbake_postfx"),
    "panel": hasattr(bpy.types, "RENDER_PT_neuralbake_postfx"),
    "httpx_loaded": "httpx" in sys.modules,
    "refused": refused,
}))
