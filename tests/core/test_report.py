"""The report every bake writes: its headline metrics first, non-finite numbers as text, the device and versions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from neuralbake.core.report import plot_loss_curve, write_report


def test_the_report_records_metrics_fields_device_and_versions(tmp_path: Path) -> None:
    report = write_report(tmp_path / "report.json", bake="demo", device=torch.device("cpu"), metrics={"psnr_db": 31.5, "flip": math.nan}, steps=10)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == report
    assert list(on_disk)[:3] == ["bake", "psnr_db", "flip"]
    assert on_disk["flip"] == "nan"  # JSON has no NaN: written as text, not as invalid JSON
    assert on_disk["steps"] == 10
    assert on_disk["device"]["type"] == "cpu"
    assert "torch" in on_disk["versions"]


def test_the_loss_curve_is_a_png(tmp_path: Path) -> None:
    history = [{"event": "train", "step": s, "loss": 1.0 / s} for s in range(1, 20)] + [{"event": "eval", "step": 10, "psnr_db": 20.0}]
    plot_loss_curve(tmp_path / "loss.png", history, title="demo", quality_key="psnr_db")
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
