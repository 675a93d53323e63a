"""``neuralbake lod``: a PBR glTF to a finished LOD in one command (simplify -> skin -> fit); see
:mod:`neuralbake.bakes.lod`. The command is generated from :class:`~neuralbake.bakes.lod.LodConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.lod import LOD
from neuralbake.cli.common import Arg, bake_command, metric_text

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    def stage(name: str, key: str, spec: str = ".2f", unit: str = "", scale: float = 1.0) -> str:
        return metric_text(report, "stages", name, key, spec=spec, unit=unit, scale=scale)

    parts = [f"simplify {stage('simplify', 'start_psnr_db')} -> {stage('simplify', 'psnr_db', unit=' dB')}"]
    if "skin" in report["stages"]:
        before, after = stage("skin", "transferred_vertex_error", ".3f", scale=100), stage("skin", "vertex_error", ".3f", " %", 100)
        parts.append(f"skin vertex error {before} -> {after}")
    parts.append(f"fit {stage('fit', 'initial_psnr_union_db')} -> {stage('fit', 'psnr_union_db', unit=' dB')}")
    return (
        f"{report['original_triangles']:,} -> {report['triangles']:,} triangles, {report['target']}, "
        f"in {metric_text(report, 'seconds', spec='.0f')} s on "
        f"{report['device']['name']} ({'; '.join(parts)}): LOD vs original {metric_text(report, 'psnr_union_db', unit=' dB')}, "
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
