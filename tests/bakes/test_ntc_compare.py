"""The comparison every ``ntc compress`` report holds: NTC, the BC1 set, the BC7 set and NTC->BC7, side by side.

Bytes are checked against sizes computed here (the file on disk, :func:`mip_chain_bytes` per format), the NTC->BC7
row against ``ntc transcode --format bc7`` on the same folder, and ``rd.png`` is drawn for one rate and for several.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from neuralbake.bakes.ntc import CONTAINER_NAME, compress_texture_set
from neuralbake.bakes.ntc.rd import COMPARISON_ROWS
from neuralbake.bakes.ntc.transcode import transcode
from neuralbake.bakes.summaries import ntc_summary
from neuralbake.io.bcn import mip_chain_bytes

from ..conftest import make_test_pattern
from .test_ntc import _config, _save

SIZE = 32
TEXELS = SIZE * SIZE
GROUPS = ("base_color", "normal", "roughness")


def _sources(folder: Path) -> list[str]:
    """Base colour (RGB), normal (XY kept) and roughness (one channel), 32x32."""
    folder.mkdir()
    normal = make_test_pattern(SIZE, SIZE, 3, seed=2)
    normal[..., 2] = 1.0
    return [
        f"base_color={_save(folder / 'base.png', make_test_pattern(SIZE, SIZE, 3, seed=1))}",
        f"normal={_save(folder / 'normal.png', normal)}",
        f"roughness={_save(folder / 'rough.png', make_test_pattern(SIZE, SIZE, 1, seed=3))}",
    ]


def _compress(sources: list[str], out: Path, *, bpp: list[float], baselines: bool = True) -> dict:
    config = replace(_config(sources, steps=30, finetune=5), bpp=bpp, baselines=baselines)
    return compress_texture_set(config, out, progress=False)


@pytest.fixture(scope="module")
def one_rate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("compare")
    out = tmp / "ntc"
    return out, _compress(_sources(tmp / "textures"), out, bpp=[16.0])


def _rows(report: dict) -> dict[str, dict]:
    return {row["name"]: row for row in report["comparison"]["rows"]}


def _is_png(path: Path) -> bool:
    with Image.open(path) as image:
        return image.format == "PNG" and image.size[0] > 100


def test_the_four_rows_count_bytes_as_stored(one_rate: tuple[Path, dict]) -> None:
    out, report = one_rate
    assert [row["name"] for row in report["comparison"]["rows"]] == list(COMPARISON_ROWS)
    rows = _rows(report)
    assert rows["ntc"]["bytes"] == (out / CONTAINER_NAME).stat().st_size == report["bytes"]
    for family in ("bc1", "bc7"):
        assert rows[family]["bytes"] == report["bcn"][family]["bytes"]
    # every group's bytes from its format's full mip chain, computed here
    expected = {
        "bc1": {"base_color": "bc1", "normal": "bc5", "roughness": "bc1"},
        "bc7": {"base_color": "bc7", "normal": "bc5", "roughness": "bc7"},
        "ntc_to_bc7": {"base_color": "bc7", "normal": "bc5", "roughness": "bc4"},  # as `ntc transcode --format bc7` picks
    }
    for name, formats in expected.items():
        groups = rows[name]["groups"]
        assert {group: entry["format"] for group, entry in groups.items()} == formats
        for group, fmt in formats.items():
            assert groups[group]["bytes"] == mip_chain_bytes(SIZE, SIZE, fmt)
            assert groups[group]["bpp"] == pytest.approx(8.0 * groups[group]["bytes"] / TEXELS, abs=1e-12)
        assert rows[name]["bytes"] == sum(entry["bytes"] for entry in groups.values())
    for row in rows.values():
        assert row["bpp"] == pytest.approx(8.0 * row["bytes"] / TEXELS, abs=1e-12)
        assert set(row["groups"]) == set(GROUPS)
    assert rows["ntc"]["bpp"] == pytest.approx(report["bpp_measured"], abs=1e-12)
    assert "bytes" not in rows["ntc"]["groups"]["normal"]  # the groups share one file
    assert rows["ntc_to_bc7"]["download_bytes"] == rows["ntc"]["bytes"]
    assert rows["ntc_to_bc7"]["download_bpp"] == pytest.approx(rows["ntc"]["bpp"], abs=1e-12)
    assert report["transcode_seconds"] == rows["ntc_to_bc7"]["transcode_seconds"] > 0


def test_psnr_of_each_row_is_its_own_measurement(one_rate: tuple[Path, dict]) -> None:
    _, report = one_rate
    rows = _rows(report)
    assert rows["ntc"]["psnr_db"] == report["ntc"]["overall_db"]
    assert rows["ntc"]["groups"]["normal"]["psnr_db"] == report["ntc"]["groups"]["normal"]["mip0_db"]
    for family in ("bc1", "bc7"):
        assert rows[family]["psnr_db"] == report["bcn"][family]["quality"]["overall_db"]
        assert rows[family]["psnr_all_mips_db"] == report["bcn"][family]["quality"]["overall_all_mips_db"]
    # BCn of the decode adds its error to NTC's: never (beyond chance) better than NTC itself
    assert rows["ntc_to_bc7"]["psnr_db"] <= rows["ntc"]["psnr_db"] + 0.1
    assert rows["ntc_to_bc7"]["psnr_db"] > rows["ntc"]["psnr_db"] - 3.0
    for group in GROUPS:
        assert rows["ntc_to_bc7"]["groups"][group]["psnr_db"] <= rows["ntc"]["groups"][group]["psnr_db"] + 0.2
    assert rows["bc1"]["psnr_db"] < rows["bc7"]["psnr_db"]


def test_ntc_to_bc7_is_what_ntc_transcode_writes(one_rate: tuple[Path, dict], tmp_path: Path) -> None:
    out, report = one_rate
    row = _rows(report)["ntc_to_bc7"]
    transcoded = transcode(out, tmp_path / "bc7", formats="bc7", device="cpu")
    assert transcoded["reference"]["kind"] == "source"  # the same reference as the compress report's
    assert transcoded["transcoded"]["data_bytes"] == row["bytes"]
    assert transcoded["transcoded"]["quality"]["overall_db"] == pytest.approx(row["psnr_db"], abs=0.01)
    assert transcoded["transcoded"]["quality"]["overall_all_mips_db"] == pytest.approx(row["psnr_all_mips_db"], abs=0.01)
    for group in GROUPS:
        texture = transcoded["textures"][group]
        assert texture["format"] == row["groups"][group]["format"] and texture["data_bytes"] == row["groups"][group]["bytes"]
        assert texture["psnr"]["transcoded_vs_source"]["mip0_db"] == pytest.approx(row["groups"][group]["psnr_db"], abs=0.01)


def test_one_rate_writes_the_table_rd_png_and_says_so(one_rate: tuple[Path, dict]) -> None:
    out, report = one_rate
    saved = json.loads((out / "report.json").read_text())
    assert saved["comparison"]["rows"] == json.loads(json.dumps(report["comparison"]["rows"]))
    assert _is_png(out / "rd.png")
    assert "rd.png" in json.loads((out / "bake.json").read_text())["files"]
    line = ntc_summary(saved, out)
    assert "BC1 set" in line and "BC7 set" in line and "NTC->BC7" in line, line
    bpp = f"{_rows(saved)['ntc_to_bc7']['bpp']:.2f} bpp"
    assert f"NTC->BC7 {bpp}" in line, line


def test_several_rates_put_every_rate_in_the_table(tmp_path: Path) -> None:
    out = tmp_path / "rd"
    report = _compress(_sources(tmp_path / "textures"), out, bpp=[12.0, 18.0])
    rd = json.loads((out / "rd.json").read_text())
    names = [(row["name"], row.get("rate")) for row in rd["comparison"]["rows"]]
    assert names == [("ntc", "bpp_12"), ("ntc", "bpp_18"), ("bc1", None), ("bc7", None), ("ntc_to_bc7", "bpp_12"), ("ntc_to_bc7", "bpp_18")]
    assert [p["bpp_target"] for p in rd["ntc_to_bc7"]] == [12.0, 18.0]
    for rate in ("bpp_12", "bpp_18"):
        rate_report = json.loads((out / rate / "report.json").read_text())
        rows = _rows(rate_report)
        assert list(rows) == list(COMPARISON_ROWS)
        table = {(row["name"], row.get("rate")): row for row in rd["comparison"]["rows"]}
        assert table["ntc_to_bc7", rate]["psnr_db"] == rows["ntc_to_bc7"]["psnr_db"]
        assert table["ntc", rate]["bytes"] == (out / rate / CONTAINER_NAME).stat().st_size
        assert rows["ntc_to_bc7"]["psnr_db"] <= rows["ntc"]["psnr_db"] + 0.1
    assert _is_png(out / "rd.png")
    assert not any(isinstance(value, (list, str)) for key, value in report.items() if key.startswith("ntc_"))  # headline numbers only
    line = ntc_summary(json.loads((out / "report.json").read_text()), out)
    assert line.count("NTC->BC7") == 1 and "rd.json + rd.png" in line, line


def test_without_baselines_the_table_is_ntc_alone(tmp_path: Path) -> None:
    out = tmp_path / "ntc"
    _compress(_sources(tmp_path / "textures"), out, bpp=[12.0, 18.0], baselines=False)
    rate = json.loads((out / "bpp_12" / "report.json").read_text())
    assert [row["name"] for row in rate["comparison"]["rows"]] == ["ntc"]
    assert "ntc_to_bc7" in rate["comparison"]["left_out"]
    assert "transcode_seconds" not in rate and "bcn" not in rate
    rd = json.loads((out / "rd.json").read_text())
    assert [(row["name"], row["rate"]) for row in rd["comparison"]["rows"]] == [("ntc", "bpp_12"), ("ntc", "bpp_18")]
    assert rd["comparison"]["left_out"] == rate["comparison"]["left_out"] and rd["ntc_to_bc7"] == []
    assert _is_png(out / "rd.png")
    assert "NTC->BC7" not in ntc_summary(json.loads((out / "report.json").read_text()), out)
