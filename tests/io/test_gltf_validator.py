"""The glTF files neuralbake writes pass the Khronos glTF-Validator (the npm `gltf-validator`
package, run with Node.js): a simplified LOD, a fitted unlit LOD, and skinned characters written
with their skins and clips. Skipped, with the reason, where Node.js or the package cannot be had."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("validate_gltf.js")
VALIDATOR_VERSION = "2.0.0-dev.3.10"


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with node_modules/gltf-validator installed by npm (cached per user)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("Node.js and npm are not installed (Debian: apt-get install nodejs npm); the Khronos validator cannot run")
    folder = Path.home() / ".cache" / "neuralbake-tests" / f"gltf-validator-{VALIDATOR_VERSION}"
    if not (folder / "node_modules" / "gltf-validator").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", f"gltf-validator@{VALIDATOR_VERSION}"], cwd=folder,
                              capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            pytest.skip(f"npm could not install gltf-validator@{VALIDATOR_VERSION}: {done.stderr.strip()[:300]}")
    return folder


def _issues(validator: Path, gltf: Path) -> dict:
    import os

    env = {**os.environ, "NODE_PATH": str(validator / "node_modules")}  # require() looks beside the script, not in cwd
    done = subprocess.run(["node", str(SCRIPT), str(gltf)], cwd=validator, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _assert_valid(validator: Path, gltf: Path) -> None:
    issues = _issues(validator, gltf)
    errors = [f"{m['code']} at {m.get('pointer', '')}: {m['message']}" for m in issues["messages"] if m["severity"] == 0]
    assert issues["numErrors"] == 0, errors


def test_the_validator_catches_a_broken_file(validator: Path, tmp_path: Path) -> None:
    broken = {"asset": {"version": "2.0"}, "meshes": [{"primitives": [{"attributes": {"POSITION": 7}}]}]}
    (tmp_path / "broken.gltf").write_text(json.dumps(broken))
    assert _issues(validator, tmp_path / "broken.gltf")["numErrors"] > 0


def test_simplified_and_fitted_lods_are_valid_gltf(validator: Path, tmp_path: Path) -> None:
    from neuralbake.bakes.fit import FitConfig, fit_lod
    from neuralbake.bakes.simplify import SimplifyConfig, simplify_lod

    crate = ROOT / "examples" / "crate" / "crate.gltf"
    simplify_lod(SimplifyConfig(asset=str(crate), ratio=0.3, render_size=24, views=2, held_out_views=1, epochs=1, device="cpu"), tmp_path / "simplified", progress=False)
    _assert_valid(validator, tmp_path / "simplified" / "lod.glb")
    fit_lod(FitConfig(asset=str(crate), texture_size=32, render_size=24, views=2, held_out_views=1, epochs=1, environment=False, shadows=False, device="cpu"),
            tmp_path / "fitted", progress=False)
    _assert_valid(validator, tmp_path / "fitted" / "lod.gltf")


@pytest.mark.slow
def test_a_skinned_lod_from_the_chain_is_valid_with_its_skin_and_clip(validator: Path, tmp_path: Path) -> None:
    from neuralbake.bakes.lod import LodConfig, make_lod
    from neuralbake.io.gltf import load_gltf

    from ..bakes.test_lod import ARM, SMALL

    config = LodConfig(asset=str(ARM), ratio=0.3, texture_size=32, device="cpu", shadows=False, stage_options=SMALL)
    make_lod(config, tmp_path / "lod", progress=False)  # unlit: the uv1 atlas splits vertices, the skin follows them
    _assert_valid(validator, tmp_path / "lod" / "lod.glb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lod = load_gltf(tmp_path / "lod" / "lod.glb")
    assert lod.rig is not None and lod.rig.clips and all(m.skin is not None and m.uv1 is not None for m in lod.meshes)


def test_a_glb_is_valid(validator: Path, tmp_path: Path) -> None:
    from neuralbake.io.gltf import load_gltf, write_gltf

    for source in (ROOT / "examples" / "arm" / "arm.gltf", ROOT / "examples" / "crate" / "crate.gltf"):
        _assert_valid(validator, write_gltf(tmp_path / f"{source.stem}.glb", load_gltf(source)))


def test_a_skinned_rig_is_written_valid_with_its_clip(validator: Path, tmp_path: Path) -> None:
    from ..render.test_skinning import _write_rig

    _written_valid(validator, tmp_path, _write_rig(tmp_path / "rig"))


def test_brainstem_is_written_valid_with_its_clip(validator: Path, tmp_path: Path, shared_dir: Path) -> None:
    _written_valid(validator, tmp_path, shared_dir / "assets" / "BrainStem" / "BrainStem.glb")


def _written_valid(validator: Path, tmp_path: Path, source: Path) -> None:
    from neuralbake.io.gltf import load_gltf, write_gltf

    for source in (source,):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scene = load_gltf(source)
        out = tmp_path / f"out_{source.stem}"
        out.mkdir()
        _assert_valid(validator, write_gltf(out / "character.gltf", scene))
