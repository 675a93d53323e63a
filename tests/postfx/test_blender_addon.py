"""The Blender add-on, in Blender (bpy 5.0.1 in its own virtual environment, as tests/io/test_blender.py
makes it): installed from the zip `neuralbake postfx addon` writes, a Cycles render with Z, normal,
object-index and vector passes goes through the add-on's handlers and the local neuralbake; the result
is an image datablock and a file; an animation of 3 frames is processed as a sequence with Blender's
vector pass, whose direction the chain's warp is checked against; the still again through a
`neuralbake serve --models` on loopback."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.io.test_blender import blender_python  # noqa: F401  (the fixture)
from tests.service._support import Server

SCRIPT = Path(__file__).with_name("blender_postfx.py")


def test_the_addon_runs_the_chain_on_renders_and_animations(blender_python: Path, tmp_path: Path) -> None:  # noqa: F811
    pytest.importorskip("diffusers")
    from neuralbake.postfx.chain import _motion, warp
    from neuralbake.postfx.conditions import load_render
    from neuralbake.postfx.models import make_random_model

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
    motion = _motion(Path(exrs[1]), first.shape[:2])
    assert motion[..., 0].min() < -1.0  # the cube moved right, so it was to the left before
    kept, carried, reversed_ = (np.abs(x - second).mean() for x in (first, warp(first, motion), warp(first, -motion)))
    assert carried < 0.8 * kept and carried < reversed_
