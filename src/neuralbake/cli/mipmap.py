"""``neuralbake mipmap BASE_COLOR NORMAL [ROUGHNESS] --out DIR``: learned mip chains for a PBR texture set.

The command is generated from :class:`~neuralbake.bakes.mipmap.MipmapConfig` (help from its field
docstrings); the maps are positional, ``--size`` sets ``texture_size`` and ``--directions`` sets
``directions_per_step``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from neuralbake.bakes.mipmap import MIPMAP
from neuralbake.cli.common import Arg, bake_command, metric_text

__all__ = ["register"]


def _summary(report: dict[str, Any], out: Path) -> str:
    means = "  ".join(f"{name} {metric_text(report, f'mean_psnr_{name}_db')}" for name in ("box", "toksvig", "learned"))
    return (
        f"{report['levels']} levels, {report['steps']} steps in {metric_text(report, 'seconds', spec='.1f')} s on "
        f"{report['device']['name']} ({report['device']['type']}): mean shaded PSNR (dB) {means} -> {out}"
    )


def register(app: typer.Typer) -> None:
    """Add ``mipmap`` to the main CLI."""
    bake_command(
        app,
        "mipmap",
        MIPMAP,
        help="Learn mip levels whose shading matches the downsampled full-resolution shading; compare with box and Toksvig.",
        arguments=[
            Arg("base_color", "Base colour map (sRGB), square, power-of-two side.", metavar="BASE_COLOR"),
            Arg("normal", "Tangent-space normal map (OpenGL +y, as glTF), same size as the base colour.", metavar="NORMAL"),
            Arg(
                "roughness_map",
                "Optional roughness map: grey, or a glTF metallicRoughness map (G = roughness, B = metallic).",
                optional=True,
                metavar="ROUGHNESS",
            ),
        ],
        rename={"texture_size": "size", "directions_per_step": "directions"},
        out_help="Output folder for the mip chain, comparison image and report.",
        summary=_summary,
    )
