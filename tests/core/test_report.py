"""The report every bake writes: its headline metrics first, non-finite numbers as null with a note, the device and
versions; the event log's lines plain JSON too."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from neuralbake.core.events import EventWriter, JsonlSink
from neuralbake.core.report import plot_loss_curve, write_report
from neuralbake.io.files import json_safe


def _strict(text: str) -> object:
    """``text`` read as standard JSON (Python's reader also takes ``Infinity`` and ``NaN``, which other readers refuse)."""
    return json.loads(text, parse_constant=lambda constant: pytest.fail(f"{constant} is not JSON"))


def test_the_report_records_metrics_fields_device_and_versions(tmp_path: Path) -> None:
    metrics = {"psnr_db": 31.5, "flip": 0.25}
    report = write_report(tmp_path / "report.json", bake="demo", device=torch.device("cpu"), metrics=metrics, steps=10)
    on_disk = _strict((tmp_path / "report.json").read_text())
    assert on_disk == report
    assert list(on_disk)[:3] == ["bake", "psnr_db", "flip"]
    assert on_disk["steps"] == 10 and "non_finite" not in on_disk  # the note is there only when needed
    assert on_disk["device"]["type"] == "cpu"
    assert "torch" in on_disk["versions"]


def test_non_finite_numbers_are_null_with_a_note_saying_what_and_why(tmp_path: Path) -> None:
    """A PSNR of a perfect result is infinite; report.json held it as the string "inf" at the top and as bare Infinity
    deeper down (not JSON), and summaries crashed formatting the string."""
    report = write_report(
        tmp_path / "report.json", bake="demo", device=torch.device("cpu"),
        metrics={"psnr_db": math.inf, "flip": math.nan}, per_level=[{"psnr_db": 40.0}, {"psnr_db": math.inf, "rmse": -math.inf}],
    )
    on_disk = _strict((tmp_path / "report.json").read_text())
    assert report["psnr_db"] == math.inf and report["per_level"][1]["rmse"] == -math.inf  # the numbers as computed, for chains
    assert {key: value for key, value in on_disk.items() if key != "non_finite"} == json_safe(report)
    assert on_disk["psnr_db"] is None and on_disk["flip"] is None and on_disk["per_level"][1] == {"psnr_db": None, "rmse": None}
    assert on_disk["non_finite"] == {
        "psnr_db": "inf: the result equals the reference exactly (zero error, or float rounding only: no value off by half an 8-bit step)",
        "flip": "nan: not a number (undefined, e.g. an average over nothing or a diverged value)",
        "per_level[1].psnr_db": "inf: the result equals the reference exactly (zero error, or float rounding only: no value off by half an 8-bit step)",
        "per_level[1].rmse": "-inf: not a finite number",
    }
    assert all(math.isinf(float(note.split(":")[0])) or note.startswith("nan:") for note in on_disk["non_finite"].values())


def test_the_event_log_is_plain_json_at_any_depth(tmp_path: Path) -> None:
    with EventWriter([JsonlSink(tmp_path / "events.jsonl")]) as events:
        events.emit("eval", step=3, psnr_db=math.inf, per_view=[1.0, math.nan], nested={"loss": -math.inf})
    line = _strict((tmp_path / "events.jsonl").read_text())
    assert line == {
        "event": "eval", "step": 3, "psnr_db": None, "per_view": [1.0, None], "nested": {"loss": None},
        "non_finite": {"psnr_db": "inf", "per_view[1]": "nan", "nested.loss": "-inf"},
    }


def test_the_loss_curve_is_a_png(tmp_path: Path) -> None:
    history = [{"event": "train", "step": s, "loss": 1.0 / s} for s in range(1, 20)] + [{"event": "eval", "step": 10, "psnr_db": 20.0}]
    plot_loss_curve(tmp_path / "loss.png", history, title="demo", quality_key="psnr_db")
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
