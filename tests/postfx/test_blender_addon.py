"""The Blender add-on, in Blender (bpy 5.0.1 in its own virtual environment, as tests/io/test_blender.py
makes it): installed from the zip `neuralbake postfx addon` writes, a Cycles render with Z, normal,
object-index and vector passes goes through the add-on's handlers and the local neuralbake; the result
is an image datablock and a file; an animation of 3 frames is processed as a sequence with Blender's
vector pass, whose direction the chain's warp is checked against; the still again through a
`neuralbake serve --models` on loopback. The zip carries its own copy of neuralbake's HTTP client, which
runs on the standard library alone and is the one the add-on imports inside Blender."""

from __future__ import annotations

import ast
import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.io.test_blender import blender_python  # noqa: F401  (the fixture)
from tests.service._support import Server

SCRIPT = Path(__file__).with_name("blender_postfx.py")
LOAD_SCRIPT = Path(__file__).with_name("blender_addon_load.py")


def _addon_zip(tmp_path: Path) -> Path:
    from neuralbake.integrations.blender.package import write_addon_zip

    return write_addon_zip(tmp_path / "neuralbake_postfx.zip")


def test_the_zip_vendors_a_client_that_needs_only_the_standard_library(tmp_path: Path) -> None:
    with zipfile.ZipFile(_addon_zip(tmp_path)) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "unzipped")
    vendor = tmp_path / "unzipped" / "neuralbake_postfx" / "vendor"
    assert {"neuralbake_postfx/__init__.py", "neuralbake_postfx/remote.py", "neuralbake_postfx/selection.py"} <= names
    assert {f"neuralbake_postfx/vendor/neuralbake/{n}" for n in ("__init__.py", "version.py", "errors.py", "client/__init__.py", "client/client.py")} <= names
    assert not any("package.py" in n for n in names)  # the zip builder stays out of Blender
    remote = ast.parse((tmp_path / "unzipped" / "neuralbake_postfx" / "remote.py").read_text())
    assert any(isinstance(n, ast.ImportFrom) and n.module == "neuralbake.client" for n in remote.body)  # the add-on's HTTP is the client
    for file in vendor.rglob("*.py"):  # module-level imports: the standard library or the vendored modules themselves
        for node in ast.parse(file.read_text()).body:
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or module in ("neuralbake.version", "neuralbake.errors", "neuralbake.client.client"), (file.name, module)
    # a Python without site-packages (no httpx, no neuralbake install) runs the copy: a closed port is the client's own error
    code = (f"import sys; sys.path.insert(0, {str(vendor)!r}); import socket\n"
            "from neuralbake.client import ServiceClient, ServiceError\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
            "try:\n    ServiceClient(f'http://127.0.0.1:{port}', 't').jobs()\nexcept ServiceError as exc:\n    print('REFUSED', exc)\n"
            "import neuralbake.client as c; print('FILE', c.__file__); print('HTTPX', 'httpx' in sys.modules)")
    done = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "REFUSED the service at http://127.0.0.1:" in done.stdout and "cannot be reached" in done.stdout, done.stdout
    assert f"FILE {vendor}" in done.stdout and "HTTPX False" in done.stdout, done.stdout


def test_the_addon_loads_in_blender_with_its_vendored_client(blender_python: Path, tmp_path: Path) -> None:  # noqa: F811
    addon = _addon_zip(tmp_path)
    env = {**os.environ, **{name: str(tmp_path / "blender_user") for name in ("BLENDER_USER_RESOURCES", "BLENDER_USER_CONFIG", "BLENDER_USER_SCRIPTS")}}
    run = subprocess.run([str(blender_python), str(LOAD_SCRIPT), str(addon)], capture_output=True, text=True, timeout=300, check=False, env=env)
    lines = [line for line in run.stdout.splitlines() if line.startswith("LOADED ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    loaded = json.loads(lines[-1][7:])
    assert loaded["client_file"].startswith(str(tmp_path / "blender_user")) and "/neuralbake_postfx/vendor/neuralbake/client/" in loaded["client_file"]
    assert loaded["remote_uses_it"] and not loaded["httpx_loaded"]
    assert loaded["operators"] == ["bake_selected", "postfx_add", "postfx_remove", "postfx_render", "postfx_viewport"]
    assert loaded["settings"] and loaded["panel"]
    assert "cannot be reached" in (loaded["refused"] or ""), loaded


def test_the_addon_runs_the_chain_on_renders_and_animations(blender_python: Path, tmp_path: Path) -> None:  # noqa: F811
    pytest.importorskip("diffusers")
    from neuralbake.postfx.conditions import load_render
    from neuralbake.postfx.models import make_random_model
    from neuralbake.postfx.motion import read_motion, warp

    executable = shutil.which("neuralbake") or str(Path(sys.executable).with_name("neuralbake"))
    assert Path(executable).is_file()
    library = tmp_path / "library"
    made = make_random_model(library / "sd", family="sd", size="tiny")
    server = Server(tmp_path / "service", extra=["--models", str(library)])
    server.start()
    addon = tmp_path / "neuralbake_postfx.zip"
    done = subprocess.run([executable, "postfx", "addon", "--out", str(addon)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    env = {**os.environ, **{name: str(tmp_path / "blender_user") for name in ("BLENDER_USER_RESOURCES", "BLENDER_USER_CONFIG", "BLENDER_USER_SCRIPTS")}}
    try:
        run = subprocess.run([str(blender_python), str(SCRIPT), str(addon), made["base"], made["controlnet"], executable, str(out), server.url, server.token, "sd"],
                             capture_output=True, text=True, timeout=900, check=False, env=env)
    finally:
        server.stop()
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(lines[-1][7:])
    still = result["still"]
    assert still["exists"] and still["image"] == [64, 48] and still["status"].startswith("done"), still
    report = json.loads((out / "frame_00001" / "report.json").read_text())
    assert [c["condition"] for c in report["controlnets"]] == ["depth", "normal"] and report["passes"] == 1
    animation = result["animation"]
    assert animation["frames"] == ["00001.png", "00002.png", "00003.png"] and animation["motion"] is True
    assert animation["temporal_ratio"] is not None and result["image_after_animation"].endswith("00003.png")
    assert list((tmp_path / "blender_user").rglob("neuralbake_postfx/__init__.py"))  # installed into the test's own user folder

    fit = result["fit"]
    assert fit["operator"] == ["FINISHED"] and fit["imported"] and fit["textured"], fit
    assert all(name.endswith(" FIT") for name in fit["imported"])
    served = result["server"]
    assert served["status"].startswith("done") and served["job"] and served["controlnets"] == ["depth", "normal"], served
    assert "outside the model library" in result["server_refused"], result["server_refused"]
    served_animation = result["server_animation"]
    assert served_animation["frames"] == ["00001.png", "00002.png", "00003.png"] and served_animation["job"] not in (None, served["job"]), served_animation

    # Blender's vector pass: each pixel's offset to where it was one frame earlier (the chain's warp convention)
    exrs = sorted(next(f for f in (glob.glob(str(out / d / "*.exr")) for d in result["exr_folders"]) if len(f) == 3))
    first, second = load_render(Path(exrs[0])), load_render(Path(exrs[1]))
    motion = read_motion(Path(exrs[1]), first.shape[:2])
    assert motion[..., 0].min() < -1.0  # the cube moved right, so it was to the left before
    kept, carried, reversed_ = (np.abs(x - second).mean() for x in (first, warp(first, motion), warp(first, -motion)))
    assert carried < 0.8 * kept and carried < reversed_
