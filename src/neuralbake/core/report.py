"""The parts of a bake report every product shares: the JSON record and the loss-curve picture.

``report.json`` is plain JSON: a number that is not finite (a PSNR of a result equal to its
reference is infinite; a mean of nothing is NaN) is written as ``null``, and the report's
``non_finite`` entry says what each one was and why, keyed by its place in the report
(:func:`neuralbake.io.files.json_path`) and starting with the value as ``float()`` reads it::

    "psnr_db": null,
    "non_finite": {"psnr_db": "inf: the result equals the reference exactly (zero error, or float rounding
                                only: no value off by half an 8-bit step)"}

The entry is there only when some number was not finite. The command line shows such values as
text (``PSNR inf dB (exact)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from neuralbake.core.device import describe_device, versions
from neuralbake.io.files import atomic_path, atomic_write_json, json_path, json_safe

__all__ = ["NON_FINITE", "metric_text", "plot_loss_curve", "write_report"]

NON_FINITE = "non_finite"
"""The report's entry that explains its ``null`` numbers (see the module docstring)."""


def write_report(path: str | Path, *, bake: str, device: torch.device, metrics: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """Write ``report.json``: the bake's name, its metrics and fields, device and versions.

    The file holds non-finite numbers as ``null``, explained under ``non_finite`` (see the module docstring); the
    report returned keeps the numbers as computed (``inf`` stays a float), for a bake that builds on another's
    (a chain on its stages, a rate-distortion curve on its rates). Serialise it with
    :func:`neuralbake.io.files.json_safe`."""
    report = {"bake": bake, **metrics, **fields, "device": describe_device(device), "versions": versions()}
    found: dict[str, str] = {}
    written = json_safe(report, non_finite=found)
    if found:
        notes = {where: f"{value}: {_why(where, value)}" for where, value in found.items()}
        written[NON_FINITE] = {**(written.get(NON_FINITE) or {}), **notes}
    atomic_write_json(path, written)
    return report


def _why(where: str, value: str) -> str:
    if value == "inf" and where.endswith("_db"):
        # PSNR = 10 log10(peak^2 / MSE) with MSE = 0, or float rounding only (neuralbake.core.metrics.is_exact)
        return "the result equals the reference exactly (zero error, or float rounding only: no value off by half an 8-bit step)"
    if value == "nan":
        return "not a number (undefined, e.g. an average over nothing or a diverged value)"
    return "not a finite number"


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


def metric_text(report: Mapping[str, Any], *path: str | int, spec: str = ".2f", unit: str = "", scale: float = 1.0) -> str:
    """The number at ``path`` in a report (``"psnr_db"``, or ``"stages", "fit", "psnr_union_db"``) as text for a
    summary line: ``format(value * scale, spec) + unit``. It never fails: a number that is not finite (stored as
    ``null`` and explained under the report's ``non_finite``, or still a float) shows as ``inf``, ``-inf`` or
    ``nan`` with the unit, a PSNR (``..._db``) of a result equal to its reference as ``inf dB (exact)``; a value
    that is missing or not a number as ``n/a``."""
    value: Any = report
    note: Any = None
    for depth, part in enumerate(path):
        if isinstance(value, Mapping) and note is None:
            notes = value.get(NON_FINITE)  # a report embedded in another (a chain's stages) keeps its own notes
            note = notes.get(json_path(path[depth:])) if isinstance(notes, Mapping) else None
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return "n/a"
    if value is None and isinstance(note, str):
        value = note.split(":", 1)[0]  # the note starts with the value: "inf: ..."
    if isinstance(value, str):  # a note, or a report written before non-finite numbers were null ("inf")
        try:
            value = float(value)
        except ValueError:
            return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a"
    if not math.isfinite(value):
        exact = value > 0 and isinstance(path[-1], str) and path[-1].endswith("_db") if path else False
        return ("inf" if value > 0 else "-inf" if value < 0 else "nan") + unit + (" (exact)" if exact else "")
    try:
        return format(value * scale if scale != 1.0 else value, spec) + unit
    except (TypeError, ValueError):
        return f"{value}{unit}"
