"""The parts of a bake report every product shares: the JSON record and the loss-curve picture."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from neuralbake.core.device import describe_device, versions
from neuralbake.io.files import atomic_path, atomic_write_json

__all__ = ["plot_loss_curve", "write_report"]


def write_report(path: str | Path, *, bake: str, device: torch.device, metrics: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """Write ``report.json``: the bake's name, its metrics and fields, device and versions."""
    report = {
        "bake": bake,
        **{key: _finite_or_str(value) for key, value in metrics.items()},
        **fields,
        "device": describe_device(device),
        "versions": versions(),
    }
    atomic_write_json(path, report)
    return report


def _finite_or_str(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def plot_loss_curve(
    path: str | Path,
    history: Sequence[Mapping[str, Any]],
    *,
    title: str,
    quality_key: str | None = None,
) -> None:
    """Draw training loss (log scale) against step, and a quality metric on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [event for event in history if event.get("event") == "train"]
    evals = [event for event in history if event.get("event") == "eval" and quality_key in event]
    figure, axis = plt.subplots(figsize=(7, 4), dpi=110)
    if train:
        axis.plot([e["step"] for e in train], [e["loss"] for e in train], color="tab:blue", lw=1.2, label="training loss")
        axis.set_yscale("log")
    axis.set_xlabel("step")
    axis.set_ylabel("loss", color="tab:blue")
    axis.grid(alpha=0.3)
    if evals and quality_key:
        twin = axis.twinx()
        twin.plot([e["step"] for e in evals], [e[quality_key] for e in evals], color="tab:red", marker="o", ms=3, lw=1.2)
        label = quality_key[:-3].upper() + " (dB)" if quality_key.endswith("_db") else quality_key.replace("_", " ")
        twin.set_ylabel(label, color="tab:red")
    axis.set_title(title)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
    plt.close(figure)
