"""``neuralbake fit``: a PBR glTF fitted into an unlit LOD (texture, vertex colours or luma + chroma);
see :mod:`neuralbake.bakes.fit`. The command is generated from
:class:`~neuralbake.bakes.fit.FitConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.fit import FIT
from neuralbake.cli.common import Arg, bake_command, metric_text

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    key = report.get("judged_by", "psnr_db")
    what = "PSNR (pixels either covers)" if key == "psnr_union_db" else "PSNR"
    def m(key: str, spec: str = ".2f", unit: str = "") -> str:
        return metric_text(report, key, spec=spec, unit=unit)

    return (
        f"{report['target']}{' + shape' if report.get('shape') else ''}: {report['epochs']} epochs in {m('seconds', '.1f')} s on "
        f"{report['device']['name']} ({m('ms_per_epoch', '.0f')} ms/epoch): held-out {what} {m(key, unit=' dB')} "
        f"(start {m('initial_' + key)}), "
        f"SSIM {m('ssim', '.3f')}, {report['bytes']:,} bytes -> {out}"
    )


def register(app: typer.Typer) -> None:
    """Add ``fit`` to the main CLI."""
    bake_command(
        app,
        "fit",
        FIT,
        help="Fit the view-dependent PBR look of a glTF into an unlit LOD (texture in uv1, vertex colours, or luma + chroma).",
        arguments=[Arg("asset", "The PBR asset (.gltf or .glb).", metavar="ASSET")],
        rename={"texture_size": "size", "held_out_views": "held-out", "train.learning_rate": "lr"},
        skip=["train.steps", "train.log_every", "train.eval_every"],  # one log and one evaluation per epoch
        out_help="Output folder for lod.gltf, the triptych and report.json.",
        summary=_summary,
    )
