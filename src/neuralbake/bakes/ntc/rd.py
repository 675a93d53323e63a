"""The NTC rate-distortion record: NTC points against the BC1 / BC7 sets (``rd.json``) and its plot (``rd.png``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neuralbake.io.files import atomic_path

__all__ = ["plot_rate_distortion", "rate_distortion_summary"]


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


def rate_distortion_summary(runs: Sequence[dict[str, Any]], baselines: dict[str, Any] | None) -> dict[str, Any]:
    """The RD record: NTC points, BCn points, NTC's PSNR at BC1's and BC7's rates, and the rate that matches BC7's PSNR."""
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
    summary: dict[str, Any] = {"ntc": ntc, "bcn": {}, "comparison": {"ntc_highest_rate": {"bpp": best["bpp"], "psnr_db": best["psnr_db"]}}}
    for family, result in (baselines or {}).items():
        quality = result["quality"]
        summary["bcn"][family] = {"bpp": result["bpp"], "psnr_db": quality["overall_db"], "psnr_all_mips_db": quality["overall_all_mips_db"], "formats": result["formats"]}
        summary["comparison"][f"ntc_psnr_at_{family}_bpp_db"] = _interpolate_psnr(points, result["bpp"])
        summary["comparison"][f"ntc_bpp_matching_{family}_psnr"] = _bpp_for_psnr(points, quality["overall_db"])
    return summary


def plot_rate_distortion(path: str | Path, summary: dict[str, Any]) -> None:
    """PSNR (mip 0, all channels) against bpp: the NTC curve and the BCn sets as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4.2), dpi=110)
    ntc = sorted(summary["ntc"], key=lambda p: p["bpp"])
    axis.plot([p["bpp"] for p in ntc], [p["psnr_db"] for p in ntc], "o-", color="tab:blue", label="NTC")
    markers = {"bc1": ("s", "tab:orange"), "bc7": ("D", "tab:green")}
    for family, point in summary["bcn"].items():
        marker, colour = markers.get(family, ("^", "tab:red"))
        formats = "+".join(sorted(set(point["formats"].values())))
        axis.plot([point["bpp"]], [point["psnr_db"]], marker, color=colour, ms=8, label=f"{family.upper()} set ({formats})")
    axis.set_xlabel("bits per texel of mip 0 (full mip chain stored)")
    axis.set_ylabel("PSNR, mip 0, all channels (dB)")
    axis.grid(alpha=0.3)
    axis.legend()
    axis.set_title("NTC rate-distortion")
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
    plt.close(figure)

