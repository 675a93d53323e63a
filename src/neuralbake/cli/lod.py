"""``neuralbake lod``: a PBR glTF to a finished LOD in one command (simplify -> skin -> fit); see
:mod:`neuralbake.bakes.lod`. The command is generated from :class:`~neuralbake.bakes.lod.LodConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.lod import LOD
from neuralbake.cli.common import Arg, bake_command

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    stages = report["stages"]
    parts = [f"simplify {stages['simplify']['start_psnr_db']:.2f} -> {stages['simplify']['psnr_db']:.2f} dB"]
    if "skin" in stages:
        parts.append(f"skin vertex error {100 * stages['skin']['transferred_vertex_error']:.3f} -> {100 * stages['skin']['vertex_error']:.3f} %")
    parts.append(f"fit {stages['fit']['initial_psnr_union_db']:.2f} -> {stages['fit']['psnr_union_db']:.2f} dB")
    return (
        f"{report['original_triangles']:,} -> {report['triangles']:,} triangles, {report['target']}, in {report['seconds']:.0f} s on "
        f"{report['device']['name']} ({'; '.join(parts)}): LOD vs original {report['psnr_union_db']:.2f} dB, "
        f"{report['lod_bytes']:,} bytes -> {out / 'lod.glb'}"
    )


def register(app: typer.Typer) -> None:
    """Add ``lod`` to the main CLI."""
    bake_command(
        app,
        "lod",
        LOD,
        help="Make a finished LOD of a PBR glTF: simplify, skin (when skinned and animated) and fit its look into an unlit texture or vertex colours.",
        arguments=[Arg("asset", "The PBR asset (.gltf or .glb).", metavar="ASSET")],
        rename={"texture_size": "size"},
        skip=["stage_options"],
        out_help="Output folder for lod.glb, the stages' pictures and report.json.",
        summary=_summary,
    )
