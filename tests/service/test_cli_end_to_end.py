"""The service's command line for the material and fit kinds (texture: test_end_to_end.py):
`neuralbake submit` with inputs, a config file and --set, `watch` / `--wait`, `jobs`, `fetch`
into a verified bake folder; a bad setting is refused with the bake's own message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuralbake.io.manifest import verify_bake_folder

from ._support import Server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def server(tmp_path: Path):
    instance = Server(tmp_path / "data")
    instance.start()
    yield instance
    instance.stop()


def _neuralbake(server: Server, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEURALBAKE_SERVER": server.url, "NEURALBAKE_TOKEN": server.token}
    return subprocess.run([sys.executable, "-m", "neuralbake", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def _job_id(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.split("job ")[1].split()[0]


@pytest.mark.slow
def test_material_and_fit_jobs_from_the_command_line(server: Server, tmp_path: Path) -> None:
    settings = tmp_path / "material.json"
    settings.write_text(json.dumps({"latent": 4, "texture_size": 8, "batch_size": 64, "device": "cpu", "compare_size": 8, "compare_spp": 1,
                                    "decoder_hidden": 16, "encoder_hidden": 16}))
    material = _job_id(_neuralbake(server, "submit", "material", "--input", f"material={EXAMPLES / 'materials' / 'velvet.json'}",
                                   "--config", str(settings), "--set", "train.steps=20"))
    watched = _neuralbake(server, "watch", material)
    assert watched.returncode == 0 and "succeeded" in watched.stdout, watched.stdout + watched.stderr

    fit_settings = tmp_path / "fit.toml"
    fit_settings.write_text('render_size = 32\ntexture_size = 64\nviews = 6\nheld_out_views = 2\ndevice = "cpu"\n')
    fit = _neuralbake(server, "submit", "fit", "--input", f"asset={EXAMPLES / 'crate' / 'crate.gltf'}", "--config", str(fit_settings),
                      "--set", "epochs=2", "--set", "environment_samples=4", "--wait")
    fit_id = _job_id(fit)
    assert "succeeded" in fit.stdout

    for job_id, name in ((material, "material"), (fit_id, "fit")):
        fetched = _neuralbake(server, "fetch", job_id, "--out", str(tmp_path / name), timeout=120)
        assert fetched.returncode == 0, fetched.stderr
        assert verify_bake_folder(tmp_path / name) is not None
    material_report = json.loads((tmp_path / "material" / "report.json").read_text())
    assert material_report["bake"] == "neural_material" and (tmp_path / "material" / "latents.u8.safetensors").is_file()
    assert json.loads((tmp_path / "material" / "config.json").read_text())["train"]["steps"] == 20
    fit_report = json.loads((tmp_path / "fit" / "report.json").read_text())
    assert (tmp_path / "fit" / "lod.gltf").is_file() and fit_report["epochs"] == 2 and fit_report["texture_size"] == 64
    listed = _neuralbake(server, "jobs", "--status", "succeeded", timeout=60)
    assert material in listed.stdout and fit_id in listed.stdout


@pytest.mark.slow
def test_a_bad_setting_or_a_failed_job_is_a_clear_nonzero_exit(server: Server, tmp_path: Path) -> None:
    crate = str(EXAMPLES / "crate" / "crate.gltf")
    refused = _neuralbake(server, "submit", "fit", "--input", f"asset={crate}", "--set", "render_size=3")
    assert refused.returncode == 2 and "render_size" in refused.stderr and "Traceback" not in refused.stderr
    # a job the service accepts but whose bake fails when it runs (a warm start that is no
    # checkpoint): --wait reports the bake's message and exits 1
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    failed = _neuralbake(server, "submit", "fit", "--input", f"asset={crate}", "--input", f"warm_start={junk}",
                         "--set", "render_size=16", "--set", "texture_size=16", "--set", "views=2", "--set", "epochs=1", "--set", "device=\"cpu\"",
                         "--wait")
    assert failed.returncode == 1 and "failed" in failed.stdout and "warm-start checkpoint" in failed.stdout, failed.stdout + failed.stderr
