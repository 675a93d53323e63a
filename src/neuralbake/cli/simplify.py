"""``neuralbake simplify``: a glTF decimated and its shape fitted to renders of the original; see
:mod:`neuralbake.bakes.simplify`. The command is generated from
:class:`~neuralbake.bakes.simplify.SimplifyConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.simplify import SIMPLIFY
from neuralbake.cli.common import Arg, bake_command

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    return (
        f"{report['triangles_original']:,} -> {report['triangles']:,} triangles in {report['seconds']:.1f} s on {report['device']['name']}: "
        f"held-out PSNR {report['psnr_db']:.2f} dB, FLIP {report['flip']:.4f} ({report['start']} alone: {report['start_psnr_db']:.2f} dB, "
        f"{report['start_flip']:.4f}) -> {out}"
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
