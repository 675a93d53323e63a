"""``neuralbake simplify``: a glTF decimated and its shape fitted to renders of the original; see
:mod:`neuralbake.bakes.simplify`. The command is generated from
:class:`~neuralbake.bakes.simplify.SimplifyConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.simplify import SIMPLIFY
from neuralbake.cli.common import Arg, bake_command, metric_text

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    def m(key: str, spec: str = ".2f", unit: str = "") -> str:
        return metric_text(report, key, spec=spec, unit=unit)

    return (
        f"{report['triangles_original']:,} -> {report['triangles']:,} triangles in {m('seconds', '.1f')} s on {report['device']['name']}: "
        f"held-out PSNR {m('psnr_db', unit=' dB')}, FLIP {m('flip', '.4f')} ({report['start']} alone: {m('start_psnr_db', unit=' dB')}, "
        f"{m('start_flip', '.4f')}) -> {out}"
    )


def register(app: typer.Typer) -> None:
    """Add ``simplify`` to the main CLI."""
    bake_command(
        app,
        "simplify",
        SIMPLIFY,
        help="Decimate a glTF (QEM, uv seams kept) and fit the coarse shape to renders of the original (large steps).",
        arguments=[Arg("asset", "The glTF asset (.gltf or .glb).", metavar="ASSET")],
        rename={"held_out_views": "held-out", "learning_rate": "lr"},
        out_help="Output folder for lod.glb, the triptych and report.json.",
        summary=_summary,
    )
