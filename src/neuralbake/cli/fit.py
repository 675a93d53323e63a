"""The ``neuralbake fit`` command: a PBR glTF fitted into an unlit LOD (texture, vertex colours or
luma + chroma); see :mod:`neuralbake.bakes.fit`.

Kept in its own module so the main CLI only has to register it::

    from neuralbake.cli.fit import register
    register(app)

``app`` below is the same command as a stand-alone typer app (used by the tests).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from neuralbake.bakes.fit import FitConfig
from neuralbake.cli.common import option_help, print_done, run_action

__all__ = ["app", "fit", "register"]

_out = Console()
_DEFAULT = FitConfig()


def _doc(name: str) -> str:
    return option_help(FitConfig, name, _DEFAULT)


def fit(
    model: Annotated[Path, typer.Argument(help="The PBR asset (.gltf or .glb).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for lod.gltf, the triptych and report.json.")],
    target: Annotated[str | None, typer.Option(help=_doc("target"))] = None,
    size: Annotated[int | None, typer.Option("--size", help=_doc("texture_size"))] = None,
    chroma_size: Annotated[int | None, typer.Option(help=_doc("chroma_size"))] = None,
    render_size: Annotated[int | None, typer.Option(help=_doc("render_size"))] = None,
    views: Annotated[int | None, typer.Option(help=_doc("views"))] = None,
    held_out: Annotated[int | None, typer.Option("--held-out", help=_doc("held_out_views"))] = None,
    epochs: Annotated[int | None, typer.Option(help=_doc("epochs"))] = None,
    lr: Annotated[float | None, typer.Option("--lr", help=_doc("learning_rate"))] = None,
    quantize: Annotated[int | None, typer.Option(help=_doc("quantize"))] = None,
    quantizer: Annotated[str | None, typer.Option(help=_doc("quantizer"))] = None,
    tonemap: Annotated[str | None, typer.Option(help=_doc("tonemap"))] = None,
    tonemap_order: Annotated[int | None, typer.Option(help=_doc("tonemap_order"))] = None,
    display_tone_map: Annotated[str | None, typer.Option(help=_doc("display_tone_map"))] = None,
    weights: Annotated[Path | None, typer.Option(help=_doc("weights"))] = None,
    weight_max: Annotated[float | None, typer.Option(help=_doc("weight_max"))] = None,
    environment_samples: Annotated[int | None, typer.Option(help=_doc("environment_samples"))] = None,
    no_environment: Annotated[bool, typer.Option("--no-environment", help="Directional light only (no sky).")] = False,
    no_shadows: Annotated[bool, typer.Option("--no-shadows", help="No shadow rays for the directional light in the reference renders (faster; shadows are traced with warp-lang).")] = False,
    init: Annotated[str | None, typer.Option(help=_doc("init"))] = None,
    seed: Annotated[int | None, typer.Option(help=_doc("seed"))] = None,
    device: Annotated[str | None, typer.Option(help=_doc("device"))] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Fit the view-dependent PBR look of a glTF into an unlit LOD (texture in uv1, vertex colours, or luma + chroma)."""

    def action() -> dict[str, Any]:
        from neuralbake.bakes.fit import fit_lod

        given = {
            "target": target,
            "texture_size": size,
            "chroma_size": chroma_size,
            "render_size": render_size,
            "views": views,
            "held_out_views": held_out,
            "epochs": epochs,
            "learning_rate": lr,
            "quantize": quantize,
            "quantizer": quantizer,
            "tonemap": tonemap,
            "tonemap_order": tonemap_order,
            "display_tone_map": display_tone_map,
            "weights": None if weights is None else str(weights),
            "weight_max": weight_max,
            "environment_samples": environment_samples,
            "environment": False if no_environment else None,
            "shadows": False if no_shadows else None,
            "init": init,
            "seed": seed,
            "device": device,
        }
        config = dataclasses.replace(FitConfig(model=str(model)), **{k: v for k, v in given.items() if v is not None})
        return fit_lod(config, out, progress=not quiet)

    report = run_action(action, out=out)
    print_done(
        f"{report['target']}: {report['epochs']} epochs in {report['seconds']:.1f} s on {report['device']['name']} "
        f"({report['ms_per_epoch']:.0f} ms/epoch): held-out PSNR {report['psnr_db']:.2f} dB (start {report['initial_psnr_db']:.2f}), "
        f"SSIM {report['ssim']:.3f}, {report['bytes']:,} bytes -> {out}",
    )


def register(app: typer.Typer) -> None:
    """Add ``fit`` to the main CLI."""
    app.command("fit")(fit)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
register(app)
