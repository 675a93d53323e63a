"""Summary lines: every number a command prints from a report goes through ``metric_text``, which never fails; a metric
that was not finite (stored as null with a note, see ``neuralbake.core.report``) is shown as text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from neuralbake.bakes import summaries
from neuralbake.bakes.registry import BAKES
from neuralbake.core.report import metric_text, write_report


def test_metric_text_shows_numbers_and_what_is_not_one(tmp_path: Path) -> None:
    write_report(tmp_path / "stage.json", bake="fit", device=torch.device("cpu"), metrics={"psnr_union_db": math.inf})
    stage = json.loads((tmp_path / "stage.json").read_text())
    write_report(
        tmp_path / "report.json", bake="demo", device=torch.device("cpu"),
        metrics={"psnr_db": math.inf, "flip": math.nan, "ssim": 0.91234}, rd={"ntc": [{"psnr_db": 30.0}, {"psnr_db": math.inf}]},
        stages={"fit": stage}, low=-math.inf, old="inf", label="fast",
    )
    report = json.loads((tmp_path / "report.json").read_text())  # as a command that reads a finished bake sees it
    assert metric_text(report, "ssim", spec=".3f") == "0.912"
    assert metric_text(report, "psnr_db", unit=" dB") == "inf dB (exact)"
    assert metric_text(report, "flip", spec=".4f") == "nan"
    assert metric_text(report, "low", unit=" dB") == "-inf dB"
    assert metric_text(report, "rd", "ntc", 0, "psnr_db", unit=" dB") == "30.00 dB"
    assert metric_text(report, "rd", "ntc", 1, "psnr_db", unit=" dB") == "inf dB (exact)"
    assert metric_text(report, "stages", "fit", "psnr_union_db") == "inf (exact)"  # an embedded report's own note
    assert metric_text({"psnr_db": math.inf}, "psnr_db") == "inf (exact)"  # a report still in memory
    assert metric_text(report, "old") == "inf"  # a report written before non-finite numbers were null
    assert metric_text(report, "label") == "n/a" and metric_text(report, "missing") == "n/a"
    assert metric_text({"vertex_error": 0.01234}, "vertex_error", spec=".3f", unit=" %", scale=100) == "1.234 %"


_DEVICE = {"name": "cpu", "type": "cpu"}


def _as_read(report: dict, nan: tuple[str, ...] = ()) -> dict:
    """``report`` as report.json holds it: every ``None`` (top level or nested) was an infinite PSNR, or NaN for the keys
    in ``nan``, with its note."""
    notes: dict[str, str] = {}

    def walk(node: dict | list, path: str) -> None:
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
            if isinstance(value, dict | list):
                walk(value, where)
            elif value is None:
                notes[where] = "nan: not a number" if key in nan else "inf: the result equals the reference exactly (zero error)"

    walk(report, "")
    return {**report, "non_finite": notes}


_RUN = {"steps": 3, "seconds": 1.0, "device": _DEVICE}
_SUMMARIES = {
    "texture": (summaries.texture_summary, {**_RUN, "psnr_db": None, "precision": "fp16", "psnr_fp16_db": None, "params": 10}),
    "mipmap": (summaries.mipmap_summary, {**_RUN, "levels": 2, "mean_psnr_box_db": None, "mean_psnr_toksvig_db": None,
                                 "mean_psnr_learned_db": None}),
    "simplify": (summaries.simplify_summary, {**_RUN, "triangles_original": 1, "triangles": 1, "psnr_db": None, "flip": 0.0, "start": "QEM",
                                     "start_psnr_db": None, "start_flip": 0.0}),
    "fit": (summaries.fit_summary, {**_RUN, "target": "unlit", "epochs": 1, "ms_per_epoch": 3.0, "psnr_db": None, "initial_psnr_db": None,
                           "ssim": None, "bytes": 10}),
    "skin": (summaries.skin_summary, {**_RUN, "vertices": 3, "vertex_error": None, "transferred_vertex_error": 0.0, "psnr_db": None,
                             "transferred_psnr_db": None}),
    "lod": (summaries.lod_summary, {**_RUN, "stages": {"simplify": {"start_psnr_db": None, "psnr_db": None},
                                              "fit": {"initial_psnr_union_db": 20.0, "psnr_union_db": None}},
                           "original_triangles": 1, "triangles": 1, "target": "unlit", "psnr_union_db": None, "lod_bytes": 10}),
    "ntc": (summaries.ntc_summary, {"bpp_measured": 2.0, "bytes": 10, "latent_shape": {"name": "a"}, "ntc": {"overall_db": None},
                           "bcn": {"bc7": {"bpp": 8.0, "quality": {"overall_db": None}}},
                           "comparison": {"rows": [{"name": "ntc", "label": "NTC", "bpp": 2.0, "psnr_db": None},
                                                   {"name": "bc7", "label": "BC7 set", "bpp": 8.0, "psnr_db": None},
                                                   {"name": "ntc_to_bc7", "label": "NTC->BC7", "bpp": 8.0, "psnr_db": None}]}}),
    "material": (summaries.material_summary, {**_RUN, "texture_views": {"psnr_u8_latents_db": None, "psnr_db": None}, "asset": {},
                                               "psnr_db": None, "flip": 0.0, "decoder_params": 5, "throughput": {"speedup": 2.0}}),
    "material-pack": (summaries.material_pack_summary, {"materials": [{"id": 0, "name": "a.b"}], "bakes": {"a.b": {"psnr_db": None, "flip": 0.0}}}),
    "postfx": (summaries.postfx_summary, {"frames": 2, "seconds_per_frame": 1.5, "temporal_ratio": 1.0}),  # null means "not measured"
    "postfx-lora": (summaries.postfx_lora_summary, {"rank": 4, "images": 3, "steps": 10, "train_seconds": None, "denoise_loss": 0.1,
                                                    "denoise_loss_before": 0.2}),
}


def test_every_registered_bake_has_its_summary_here() -> None:
    assert set(_SUMMARIES) == set(BAKES)
    assert all(BAKES[kind].summary is summary for kind, (summary, _) in _SUMMARIES.items())


def test_postfx_summary_leaves_out_what_was_not_measured(tmp_path: Path) -> None:
    summary, report = _SUMMARIES["postfx"]
    assert summary(report, tmp_path) == f"2 frame(s), 1.50 s/frame, temporal ratio 1.00 -> {tmp_path / 'frames/'}"
    assert summary({**report, "frames": 1, "seconds_per_frame": None, "temporal_ratio": None}, tmp_path) == f"1 frame(s) -> {tmp_path / 'result.png'}"


@pytest.mark.parametrize("name", [name for name in _SUMMARIES if name != "postfx"])
def test_every_summary_line_shows_an_infinite_metric_as_text(name: str, tmp_path: Path) -> None:
    summary, report = _SUMMARIES[name]
    line = summary(_as_read(report, nan=("ssim", "vertex_error")), tmp_path)
    assert "inf" in line and "n/a" not in line, line
    rd = {"rd": {"ntc": [{"bpp": 1.0, "psnr_db": None}]}, "non_finite": {"rd.ntc[0].psnr_db": "inf: exact"}}  # several rates
    assert "inf dB (exact)" in summaries.ntc_summary(rd, tmp_path)


def test_ntc_summary_names_every_row_of_the_comparison(tmp_path: Path) -> None:
    """One rate: NTC, then the BC sets and NTC->BC7 from ``comparison.rows``; a report from before the table: ``bcn``."""
    summary, report = _SUMMARIES["ntc"]
    rows = [{**row, "psnr_db": psnr} for row, psnr in zip(report["comparison"]["rows"], (30.0, 40.0, 29.5))]
    line = summary({**report, "ntc": {"overall_db": 30.0}, "comparison": {"rows": rows}}, tmp_path)
    assert line == f"2.000 bpp (10 B, a): PSNR 30.00 dB at mip 0, BC7 set 8.00 bpp 40.00 dB, NTC->BC7 8.00 bpp 29.50 dB -> {tmp_path}"
    old = {key: value for key, value in report.items() if key != "comparison"}
    assert "BC7 set 8.00 bpp inf dB (exact)" in summary(_as_read(old), tmp_path)
    ntc = [{"bpp": 1.0, "psnr_db": 25.0}, {"bpp": 2.0, "psnr_db": 28.0}]
    transcoded = {"name": "ntc_to_bc7", "label": "NTC->BC7", "bpp": 8.0}
    rd_rows = [{"name": "ntc", "bpp": 1.0, "psnr_db": 25.0}, {"name": "bc1", "label": "BC1 set", "bpp": 4.0, "psnr_db": 27.0},
               {**transcoded, "psnr_db": 24.5}, {**transcoded, "psnr_db": None}]  # one rate's NTC->BC7 equal to its source: inf
    line = summary(_as_read({"rd": {"ntc": ntc, "comparison": {"rows": rd_rows}}}), tmp_path)
    assert line == (f"NTC 1.00 bpp 25.00 dB, 2.00 bpp 28.00 dB, BC1 set 4.00 bpp 27.00 dB, NTC->BC7 (8.00 bpp) 24.50 dB, inf dB (exact); "
                    f"rd.json + rd.png -> {tmp_path}")
