"""``neuralbake skin``: a LOD skinned like its original (weights transferred, then fitted over the
original's animation); see :mod:`neuralbake.bakes.skin`. Generated from
:class:`~neuralbake.bakes.skin.SkinConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.skin import SKIN
from neuralbake.cli.common import Arg, bake_command, metric_text

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    def m(key: str, spec: str = ".2f", unit: str = "", scale: float = 1.0) -> str:
        return metric_text(report, key, spec=spec, unit=unit, scale=scale)

    return (
        f"{report['vertices']:,} vertices, {report['steps']} steps in {m('seconds', '.1f')} s on {report['device']['name']}: "
        "held-out vertex error "
        f"{m('vertex_error', '.3f', ' %', 100)} of the size (transferred {m('transferred_vertex_error', '.3f', ' %', 100)}), "
        f"PSNR {m('psnr_db', unit=' dB')} (transferred {m('transferred_psnr_db', unit=' dB')}) -> {out}"
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
