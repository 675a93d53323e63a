"""The NTC shader's engine example and its bench, run as scripts at tiny sizes on slangpy's CPU device.

A 32x32 NTC of the example crate's material (its five maps, 11 channels; a few training steps) is exported;
``examples/ntc_engine/render.py`` shades the crate's G-buffer with it (scalar kernel and tensor kernel) and
compares with the source textures, and ``bench/ntc_shader.py`` times a small frame and checks every kernel
against PyTorch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuralbake.bakes.ntc import NTCConfig, compress_texture_set
from neuralbake.bakes.ntc.export import export_ntc
from neuralbake.nn.trainer import TrainerConfig

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "examples" / "crate" / "crate.gltf"

pytest.importorskip("slangpy", reason="slangpy compiles and runs the shaders")


@pytest.fixture(scope="module")
def crate_ntc(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ntc_engine")
    config = NTCConfig(
        sources=[str(CRATE)],
        texture_size=32,
        bpp=[40.0],
        hidden=(16,),
        pe_frequencies=2,
        batch_size=512,
        finetune_steps=5,
        baselines=False,
        device="cpu",
        train=TrainerConfig(steps=60, learning_rate=0.03, precision="fp32", eval_every=0, checkpoint_every=0, log_every=20),
    )
    compress_texture_set(config, root / "crate_ntc", progress=False)
    return root / "crate_ntc"


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["scalar", "tensor"])
def test_the_engine_example_renders_the_crate_close_to_its_source_textures(crate_ntc, tmp_path, kernel):
    export_ntc(crate_ntc, tmp_path / "shader", samples=256)
    out = tmp_path / "render"
    done = _run(
        [
            str(ROOT / "examples" / "ntc_engine" / "render.py"),
            str(tmp_path / "shader"),
            "--asset",
            str(CRATE),
            "--out",
            str(out),
            "--width",
            "48",
            "--height",
            "27",
            "--kernel",
            kernel,
            "--filters",
            "trilinear,bilinear,stochastic",
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["covered_pixels"] > 200 and result["lod_range"][1] > result["lod_range"][0]
    filters = result["filters"]
    # a 32x32 set trained for a few steps against its sources: well above noise, below a real compression's ~35 dB
    assert all(15.0 < filters[name]["psnr_db"] < 60.0 for name in filters), filters
    assert filters["stochastic"]["psnr_db"] < filters["trilinear"]["psnr_db"]  # the noise costs PSNR
    assert "PSNR" in done.stdout and "vs the source textures" in done.stdout
    assert all((out / name).is_file() for name in ("source.png", "ntc_trilinear.png", "ntc_stochastic.png"))


@pytest.mark.slow
def test_the_bench_runs_and_checks_every_kernel_on_the_cpu(crate_ntc, tmp_path):
    out = tmp_path / "bench.json"
    done = _run(
        [
            str(ROOT / "bench" / "ntc_shader.py"),
            str(crate_ntc),
            "--device",
            "cpu",
            "--width",
            "32",
            "--height",
            "18",
            "--texels",
            "2048",
            "--repeats",
            "1",
            "--out",
            str(out),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failures"] == []
    kinds = {(row["kernel"], row["query"]) for row in result["rows"]}
    assert kinds == {(k, q) for k in ("scalar", "tensor") for q in ("texel", "trilinear", "bilinear", "stochastic")}
    assert all(row["samples_per_second"] > 0 and row["max_abs_error_vs_pytorch"] < 1e-2 for row in result["rows"])
    assert "Msamples/s" in done.stdout
