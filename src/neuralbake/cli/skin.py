"""``neuralbake skin``: a LOD skinned like its original (weights transferred, then fitted over the
original's animation); see :mod:`neuralbake.bakes.skin`. Generated from
:class:`~neuralbake.bakes.skin.SkinConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.skin import SKIN
from neuralbake.cli.common import Arg, bake_command

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    return (
        f"{report['vertices']:,} vertices, {report['steps']} steps in {report['seconds']:.1f} s on {report['device']['name']}: held-out vertex error "
        f"{100 * report['vertex_error']:.3f} % of the size (transferred {100 * report['transferred_vertex_error']:.3f} %), PSNR {report['psnr_db']:.2f} dB "
        f"(transferred {report['transferred_psnr_db']:.2f} dB) -> {out}"
    )


def register(app: typer.Typer) -> None:
    """Add ``skin`` to the main CLI."""
    bake_command(
        app,
        "skin",
        SKIN,
        help="Skin a LOD like its original: weights transferred from the closest surface, then fitted over the original's animation.",
        arguments=[Arg("lod", "The LOD to skin (.gltf or .glb).", metavar="LOD")],
        rename={"learning_rate": "lr"},
        out_help="Output folder for the skinned lod.glb, frames.png and report.json.",
        summary=_summary,
    )
