"""The verdict of ``material bake MODEL.gltf``: NTC at the neural material's bytes, and which tool fits (bakes/neural_material/verdict.py)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from neuralbake.bakes import summaries
from neuralbake.bakes.neural_material import verdict as verdict_module
from neuralbake.bakes.neural_material.asset import load_asset_bundle, load_asset_material
from neuralbake.bakes.neural_material.asset_scoring import asset_comparison
from neuralbake.bakes.neural_material.verdict import MARGIN_DB, Figures, recommend
from neuralbake.cli import app
from neuralbake.io.gltf import Material, TextureRef
from tests.bakes.test_neural_material_asset import CRATE, _asset_with

NTC_STEPS = 10
"""The verdict's NTC steps in these tests (it trains 1,000 on a CPU)."""


def _f(name: str, psnr: float | None, nbytes: int, note: str = "") -> Figures:
    return Figures(name, psnr, nbytes, nbytes * 8 / 65536, note)


NEURAL = _f("the neural material", 30.0, 100_000)


@pytest.mark.parametrize(
    ("bc", "ntc", "tool", "words"),
    [
        # NTC at the same bytes, more than 3 dB better: NTC (the drink can of issue 42)
        (_f("the BC set", 60.0, 600_000), _f("NTC", 34.0, 100_000), "ntc", "NTC fits this asset better: 34.0 dB at 12.2 bpp against the neural material's 30.0 dB"),
        # the BC set smaller and much better, NTC within the margin: the BC set
        (_f("the BC set", 40.0, 90_000), _f("NTC", 32.0, 95_000), "bc", "The BC set fits this asset better: 40.0 dB"),
        # both beat it, the BC set not more than 3 dB better than NTC: NTC
        (_f("the BC set", 37.0, 90_000), _f("NTC", 35.0, 95_000), "ntc", "NTC fits"),
        # both beat it, the BC set more than 3 dB better than NTC too: the BC set
        (_f("the BC set", 45.0, 90_000), _f("NTC", 35.0, 95_000), "bc", "The BC set fits"),
        # at exactly the neural material's bytes counts as "at most as large"
        (_f("the BC set", 50.0, 100_000), _f("NTC", 20.0, 100_000), "bc", "The BC set fits"),
        # better by more than 3 dB but larger: the neural material stands, smaller
        (_f("the BC set", 60.0, 600_000), _f("NTC", 25.0, 100_000), "neural_material", "6.0x smaller than the BC set, which is 30.0 dB better"),
        # within the margin of both
        (_f("the BC set", 30.0 + MARGIN_DB, 50_000), _f("NTC", 31.0, 100_000), "neural_material", "within 3 dB of NTC"),
        # NTC not run: said so, the BC set judged alone
        (_f("the BC set", 31.0, 50_000), _f("NTC", None, 0, "NTC cannot take this material's maps: sizes differ"), "neural_material", "NTC was not compared (NTC cannot"),
        # no NTC at all (a layered material has no maps): the BC set alone
        (_f("the BC set", 29.0, 50_000), None, "neural_material", "1.0 dB better than the BC set"),
    ],
)
def test_the_rule_picks_the_tool(bc: Figures, ntc: Figures | None, tool: str, words: str) -> None:
    got = recommend(NEURAL, bc, ntc)
    assert got["tool"] == tool and words in got["why"], got
    assert got["why"].endswith(".") and "\n" not in got["why"]


def test_an_unscored_neural_material_is_not_judged() -> None:
    got = recommend(_f("the neural material", None, 100_000), _f("the BC set", 40.0, 10), _f("NTC", 40.0, 10))
    assert got["tool"] == "neural_material" and got["why"].startswith("Not judged")


def test_the_summary_line_carries_a_recommendation_other_than_the_neural_material() -> None:
    report = {"steps": 5, "seconds": 1.0, "psnr_db": 20.0, "flip": 0.2, "texture_views": {}, "decoder_params": 10, "throughput": {},
              "device": {"type": "cpu"}, "asset": {"asset": "a.gltf", "material": "m", "psnr_db": 20.0, "bc": {"psnr_db": 40.0}, "ntc": {"psnr_db": 30.0}},
              "verdict": {"ntc": {"bits_per_texel": 8.04}, "recommendation": {"tool": "ntc", "why": "NTC fits this asset better: 30.0 dB at 8.0 bpp against the neural material's 20.0 dB at 8.2 bpp."}}}
    line = summaries.material_summary(report, Path("out"))
    assert line.endswith("-> out; verdict: NTC fits this asset better: 30.0 dB at 8.0 bpp against the neural material's 20.0 dB at 8.2 bpp.")
    assert "its BC set 40.00 dB, NTC 30.00 dB at 8.0 bpp" in line
    report["verdict"]["recommendation"] = {"tool": "neural_material", "why": "The neural material stands at 20.0 dB at 8.2 bpp: it is ..."}
    assert "verdict" not in summaries.material_summary(report, Path("out"))


def test_an_asset_bake_reports_a_verdict_with_ntc_at_its_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crate through the command line, a few steps of a small decoder over 256² latents (more bytes than the BC set):
    NTC compressed at the neural material's bytes (clamped to 48 bpp) and rendered with the same views and samples; the
    verdict's figures are the asset comparison's, the rule applied to them picks the BC set, the closing line says so."""
    monkeypatch.setitem(verdict_module.VERDICT_STEPS, "cpu", NTC_STEPS)
    out = tmp_path / "crate"
    argv = ["material", "bake", str(CRATE), "--out", str(out), "--size", "256", "--steps", "30", "--batch-size", "256", "--decoder-hidden", "16",
            "--encoder-hidden", "16", "--compare-size", "24", "--compare-spp", "2", "--device", "cpu", "--quiet"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    asset, verdict = report["asset"], report["verdict"]
    assert verdict["rule"] == verdict_module.RULE
    neural, bc, ntc = verdict["neural_material"], verdict["bc"], verdict["ntc"]
    assert neural["psnr_db"] == asset["psnr_db"] and neural["bytes"] == asset["bytes"]["neural_total"]
    assert bc["psnr_db"] == asset["bc"]["psnr_db"] and bc["bytes"] == asset["bytes"]["bc_set_total"]
    assert ntc["psnr_db"] == asset["ntc"]["psnr_db"] and len(asset["ntc"]["psnr_per_view_db"]) == 4
    assert all(math.isfinite(v) for v in (neural["psnr_db"], neural["flip"], bc["psnr_db"], ntc["psnr_db"], ntc["flip"]))
    # NTC holds every map of the crate (nothing kept as BC), at NTC's highest rate: the neural material's bytes are past it
    assert ntc["kept_textures_bc"] == {} and ntc["groups"] == ["base_color", "normal", "orm", "emissive"]
    texels = 256 * 256
    assert neural["bytes"] * 8 / texels > 48 and ntc["asked_bpp"] == 48 and "compressed at 48 bpp" in ntc["rate"]
    assert 0 < ntc["file_bytes"] == ntc["bytes"] <= 48 * texels // 8 and ntc["size"] == [256, 256]
    assert ntc["steps"] == {"noise": NTC_STEPS, "round": 1} and f"--steps {NTC_STEPS}" in ntc["command"]
    assert (out / ntc["folder"] / "texture.ntc").stat().st_size == ntc["file_bytes"]
    expected = recommend(*(Figures(n, v["psnr_db"], v["bytes"], v["bytes"] * 8 / texels) for n, v in
                           (("the neural material", neural), ("the BC set", bc), ("NTC", ntc))))
    assert verdict["recommendation"] == expected
    # 30 steps of a 16-wide decoder in twice the BC set's bytes: the BC set (far better than a few NTC steps too)
    assert expected["tool"] == "bc" and expected["why"].startswith("The BC set fits this asset better"), expected
    assert f"verdict: {expected['why']}" in " ".join(result.output.split())
    # resumed, the finished NTC run with these settings is kept, not run again
    def refuse(config, folder):
        raise AssertionError("NTC ran again")

    material = load_asset_material(CRATE)
    kept = verdict_module.ntc_at_bytes(material, neural["bytes"], out / ntc["folder"], refuse, device=material.device, reuse=True)
    assert kept.record["file_bytes"] == ntc["file_bytes"] and kept.scene is not None
    # the NTC column joins the others without changing them (the same views and samples): scored with and without it
    material, neural_material = load_asset_bundle(CRATE, out)
    bytes_ = {"latent_bytes": neural["bytes"], "decoder_bytes": 0}
    alone = asset_comparison(tmp_path / "alone", material, neural_material, size=12, spp=1, **bytes_)
    joined = asset_comparison(tmp_path / "joined", material, neural_material, size=12, spp=1, ntc_scene=kept.scene, **bytes_)
    assert "ntc" not in alone and math.isfinite(joined["ntc"]["psnr_db"])
    assert joined["psnr_per_view_db"] == alone["psnr_per_view_db"] and joined["bc"] == alone["bc"]


@pytest.mark.parametrize(("side", "reason"), [(12, "power-of-two"), (8, "below the smallest file")])
def test_a_material_ntc_cannot_take_is_judged_without_it(tmp_path: Path, side: int, reason: str) -> None:
    """Maps of a side that is not a power of two, or so small that NTC's decoder alone is past 48 bpp: NTC is not run;
    the verdict says why and judges against the BC set alone."""
    rng = np.random.default_rng(0)
    base = TextureRef(rng.random((side, side, 3)).astype(np.float32), name="base.png")
    path = _asset_with(tmp_path, Material(name="paint", base_color_texture=base))
    material = load_asset_material(path)
    ntc = verdict_module.ntc_at_bytes(material, 10_000, tmp_path / "ntc", lambda c, f: pytest.fail("no NTC run"), device=material.device)
    assert ntc.scene is None and "NTC cannot take this material's maps" in ntc.record["skipped"] and reason in ntc.record["skipped"]
    asset = {"psnr_db": 30.0, "flip": 0.1, "bc": {"psnr_db": 31.0, "flip": 0.05}, "bytes": {"neural_total": 10_000, "bc_set_total": 400}}
    block = verdict_module.verdict_block(asset, ntc, texels=256)
    assert block["ntc"] == ntc.record and block["recommendation"]["tool"] == "neural_material"
    assert "NTC was not compared" in block["recommendation"]["why"] and "within 3 dB of the BC set" in block["recommendation"]["why"]
