"""The NTC comparison table, the rate-distortion record (``rd.json``) and its plot (``rd.png``).

Every ``ntc compress`` report holds ``comparison.rows``: the same texture set four ways, each with
its bytes, bpp and PSNR per channel group and overall, measured against the same reference (the
source textures' box-filtered mip chain, at the set's size):

- ``ntc``: ``texture.ntc``, the size on disk and to download (a GPU with fast inference samples it as is);
- ``bc1``: the BC1 set (BC5 for two-channel groups such as a normal's XY, BC7 for four channels);
- ``bc7``: the BC7 set (BC5 likewise);
- ``ntc_to_bc7``: ``texture.ntc`` decoded and BC-encoded as ``ntc transcode --format bc7`` does
  (normals BC5, one-channel groups BC4), the size in GPU memory after a transcode at load; its
  download is the ``ntc`` row (``download_bytes``).

Bytes count every mip level (4x4-block padded tails included for BCn); bpp is ``8 * bytes /
texels of mip 0``. With ``baselines = false`` the table has the NTC row only: the NTC->BC7 row is
left out with the BC rows, since it is read against the BC7 set and costs a BC encode as they do.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuralbake.io.files import atomic_path

__all__ = ["COMPARISON_ROWS", "comparison_table", "plot_rate_distortion", "rate_distortion_summary"]

COMPARISON_ROWS = ("ntc", "bc1", "bc7", "ntc_to_bc7")
"""The rows of :func:`comparison_table`, in order (see the module docstring)."""
_LABELS = {"ntc": "NTC", "bc1": "BC1 set", "bc7": "BC7 set", "ntc_to_bc7": "NTC->BC7"}
_SIZE_IS = {
    "ntc": "texture.ntc: on disk and to download (sampled as is by a GPU with fast inference)",
    "bc1": "on disk and in GPU memory",
    "bc7": "on disk and in GPU memory",
    "ntc_to_bc7": "in GPU memory after decoding texture.ntc and BC-encoding it at load (the download is the ntc row)",
}
_TABLE_WHAT = (
    "the set four ways against the same reference (the source textures' box-filtered mip chain): bytes of every mip level "
    "(4x4-padded BCn tails included; texture.ntc whole), bpp = 8 * bytes / texels of mip 0, psnr_db at mip 0 and "
    "psnr_all_mips_db over every level, per group and overall; NTC's groups share one file, so they have no bytes of their own"
)


def _interpolate_psnr(points: Sequence[tuple[float, float]], bpp: float) -> float | None:
    """PSNR at ``bpp`` by linear interpolation of the NTC curve (None outside its range)."""
    points = sorted(points)
    for (b0, p0), (b1, p1) in itertools.pairwise(points):
        if b0 <= bpp <= b1:
            return p0 if b1 == b0 else p0 + (p1 - p0) * (bpp - b0) / (b1 - b0)
    return None


def _bpp_for_psnr(points: Sequence[tuple[float, float]], target: float) -> float | None:
    """Lowest bpp at which the (interpolated) NTC curve reaches ``target`` dB (None if it never does)."""
    points = sorted(points)
    if points and points[0][1] >= target:
        return points[0][0]
    for (b0, p0), (b1, p1) in itertools.pairwise(points):
        if p0 < target <= p1:
            return b0 + (b1 - b0) * (target - p0) / (p1 - p0)
    return None


def _row(name: str, total_bytes: int, texels: int, quality: dict[str, Any], groups: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One row of the table: ``groups`` gives each group's format (and bytes where it has its own)."""
    per_group = {}
    for group, info in groups.items():
        sized = {"bytes": info["bytes"], "bpp": 8.0 * info["bytes"] / texels} if "bytes" in info else {}
        scores = quality["groups"][group]
        per_group[group] = {"format": info["format"], **sized, "psnr_db": scores["mip0_db"], "psnr_all_mips_db": scores["all_mips_db"]}
    return {
        "name": name,
        "label": _LABELS[name],
        "size_is": _SIZE_IS[name],
        "bytes": total_bytes,
        "bpp": 8.0 * total_bytes / texels,
        "psnr_db": quality["overall_db"],
        "psnr_all_mips_db": quality["overall_all_mips_db"],
        "groups": per_group,
    }


def comparison_table(
    ntc_bytes: int,
    ntc_quality: dict[str, Any],
    texels: int,
    baselines: dict[str, Any] | None = None,
    transcoded: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report's ``comparison`` field: ``{"what", "rows"}``, one row per entry of :data:`COMPARISON_ROWS` that was measured.

    ``ntc_quality``, and each ``quality`` below, is :func:`~neuralbake.bakes.ntc.decode.set_quality`
    against the source chain; ``texels``: width * height of mip 0. ``baselines``:
    :func:`~neuralbake.bakes.ntc.baselines.bc_baselines` (``bytes``, ``group_bytes``, ``formats``,
    ``quality`` per family), ``None`` to leave the BC rows out; ``transcoded``: ``{"bytes",
    "group_bytes", "formats", "quality", "seconds"}`` of the NTC decode BC-encoded, ``None`` to
    leave that row out. Each row: ``name``, ``label``, ``size_is``, ``bytes``, ``bpp``,
    ``psnr_db`` (mip 0), ``psnr_all_mips_db`` and ``groups`` (per group the same, with its
    ``format``); the ``ntc_to_bc7`` row adds ``download_bytes``, ``download_bpp`` and ``transcode_seconds``.
    """
    rows = [_row("ntc", ntc_bytes, texels, ntc_quality, {group: {"format": "ntc"} for group in ntc_quality["groups"]})]
    for family in ("bc1", "bc7"):
        if baselines is not None and family in baselines:
            result = baselines[family]
            groups = {group: {"format": fmt, "bytes": result["group_bytes"][group]} for group, fmt in result["formats"].items()}
            rows.append(_row(family, result["bytes"], texels, result["quality"], groups))
    if transcoded is not None:
        groups = {group: {"format": fmt, "bytes": transcoded["group_bytes"][group]} for group, fmt in transcoded["formats"].items()}
        row = _row("ntc_to_bc7", transcoded["bytes"], texels, transcoded["quality"], groups)
        rows.append(
            {**row, "download_bytes": ntc_bytes, "download_bpp": 8.0 * ntc_bytes / texels, "transcode_seconds": transcoded["seconds"]}
        )
    table: dict[str, Any] = {"what": _TABLE_WHAT, "rows": rows}
    if baselines is None:
        table["left_out"] = "bc1, bc7 and ntc_to_bc7: baselines = false (the NTC->BC7 row goes with the BC rows it is read against)"
    return table


def rate_distortion_summary(runs: Sequence[dict[str, Any]], baselines: dict[str, Any] | None) -> dict[str, Any]:
    """The RD record: NTC points, BCn points, NTC->BC7 points, NTC's PSNR at BC1's and BC7's rates, the rate that matches
    BC7's PSNR, and the comparison table of every rate (``comparison.rows``: each rate's ``ntc`` and ``ntc_to_bc7`` rows,
    with its ``rate``, and the BC rows once).

    ``runs``: the rates' reports (each with ``comparison``, :func:`comparison_table`); ``baselines``:
    :func:`~neuralbake.bakes.ntc.baselines.bc_baselines` or the report's ``bcn`` (``None`` when not measured).
    """
    ntc = [
        {
            "bpp_target": r["bpp_target"],
            "bpp": r["bpp_measured"],
            "psnr_db": r["ntc"]["overall_db"],
            "psnr_all_mips_db": r["ntc"]["overall_all_mips_db"],
            "groups_db": {k: v["mip0_db"] for k, v in r["ntc"]["groups"].items()},
            "latent_shape": r["latent_shape"]["name"],
            "train_seconds": r["train_seconds"],
        }
        for r in runs
    ]
    points = [(p["bpp"], p["psnr_db"]) for p in ntc]
    best = max(ntc, key=lambda p: p["bpp"])
    # The interpolated comparisons are None when the curve does not reach a BCn rate (or PSNR);
    # the highest NTC rate is always stated beside them.
    summary: dict[str, Any] = {
        "ntc": ntc,
        "bcn": {},
        "ntc_to_bc7": [],
        "comparison": {"ntc_highest_rate": {"bpp": best["bpp"], "psnr_db": best["psnr_db"]}},
    }
    for family, result in (baselines or {}).items():
        quality = result["quality"]
        summary["bcn"][family] = {
            "bpp": result["bpp"],
            "psnr_db": quality["overall_db"],
            "psnr_all_mips_db": quality["overall_all_mips_db"],
            "formats": result["formats"],
        }
        summary["comparison"][f"ntc_psnr_at_{family}_bpp_db"] = _interpolate_psnr(points, result["bpp"])
        summary["comparison"][f"ntc_bpp_matching_{family}_psnr"] = _bpp_for_psnr(points, quality["overall_db"])
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in COMPARISON_ROWS}
    for run in runs:
        for row in run.get("comparison", {}).get("rows", []):
            if row["name"] in ("ntc", "ntc_to_bc7"):
                rows[row["name"]].append({"rate": f"bpp_{run['bpp_target']:g}", **row})
            elif not rows[row["name"]]:  # the BC sets are the same at every rate
                rows[row["name"]].append(row)
            if row["name"] == "ntc_to_bc7":
                formats = {group: entry["format"] for group, entry in row["groups"].items()}
                point = {key: row[key] for key in ("bpp", "download_bpp", "psnr_db", "psnr_all_mips_db")}
                summary["ntc_to_bc7"].append({"bpp_target": run["bpp_target"], **point, "formats": formats})
    summary["comparison"]["what"] = _TABLE_WHAT + "; the ntc and ntc_to_bc7 rows are per rate"
    summary["comparison"]["rows"] = [row for name in COMPARISON_ROWS for row in rows[name]]
    left_out = next((run["comparison"]["left_out"] for run in runs if "left_out" in run.get("comparison", {})), None)
    if left_out is not None:
        summary["comparison"]["left_out"] = left_out
    return summary


def plot_rate_distortion(path: str | Path, summary: dict[str, Any]) -> None:
    """PSNR (mip 0, all channels) against bpp: the NTC curve (one point for one rate), the BCn sets as points,
    and NTC->BC7 at its size in GPU memory, joined by a dotted line to the NTC point it was decoded from (its download)."""
    import matplotlib  # deferred: matplotlib (and its backend) loads only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: as above

    figure, axis = plt.subplots(figsize=(7.0, 4.4), dpi=110)
    ntc = sorted(summary["ntc"], key=lambda p: p["bpp"])
    axis.plot(
        [p["bpp"] for p in ntc], [p["psnr_db"] for p in ntc], "o-", color="tab:blue", label="NTC: texture.ntc (size on disk, to download)"
    )
    markers = {"bc1": ("s", "tab:orange"), "bc7": ("D", "tab:green")}
    for family, point in summary["bcn"].items():
        marker, colour = markers.get(family, ("^", "tab:red"))
        formats = "+".join(sorted(set(point["formats"].values())))
        axis.plot(
            [point["bpp"]], [point["psnr_db"]], marker, color=colour, ms=8, label=f"{family.upper()} set ({formats}; disk = GPU memory)"
        )
    transcoded = summary.get("ntc_to_bc7", [])
    by_rate = {p["bpp_target"]: p for p in ntc}
    for index, point in enumerate(transcoded):
        source = by_rate.get(point["bpp_target"])
        if source is not None:
            axis.plot([source["bpp"], point["bpp"]], [source["psnr_db"], point["psnr_db"]], ":", color="tab:purple", lw=1)
        formats = "+".join(sorted(set(point["formats"].values())))
        label = (
            f"NTC \u2192 BC7 ({formats}): size in GPU memory after\ntranscoding at load (dotted: from its NTC download)"
            if index == 0
            else None
        )
        axis.plot([point["bpp"]], [point["psnr_db"]], "*", color="tab:purple", ms=11, label=label)
    axis.set_xlabel("bits per texel of mip 0 (full mip chain stored)")
    axis.set_ylabel("PSNR vs source, mip 0, all channels (dB)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    axis.set_title("NTC rate-distortion" if len(ntc) > 1 else "NTC against BC1 / BC7")
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
    plt.close(figure)
