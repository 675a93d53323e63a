"""The ``neuralbake mipmap`` command: learned mip chains for a PBR texture set.

Kept in its own module so the main CLI only has to register it::

    from neuralbake.cli.mipmap import mipmap
    app.command("mipmap")(mipmap)

``app`` below is the same command as a stand-alone typer app (used by the tests).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from neuralbake.bakes.mipmap import MipmapConfig
from neuralbake.cli.common import option_help, print_done, run_action
from neuralbake.errors import InputError

__all__ = ["app", "mipmap"]

_DEFAULT = MipmapConfig()


def _doc(name: str) -> str:
    return option_help(MipmapConfig, name, _DEFAULT)


def mipmap(
    maps: Annotated[
        list[Path],
        typer.Argument(
            help="BASE_COLOR NORMAL [ROUGHNESS]: sRGB base colour, tangent-space normal map, "
            "optional roughness or glTF metallicRoughness map."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the mip chain, comparison image and report.")],
    levels: Annotated[int | None, typer.Option(help=_doc("levels"))] = None,
    steps: Annotated[int | None, typer.Option(help=option_help(type(_DEFAULT.train), "steps", _DEFAULT.train, extra="(Optimisation steps.)"))] = None,
    roughness: Annotated[float | None, typer.Option(help=_doc("roughness"))] = None,
    metallic: Annotated[float | None, typer.Option(help=_doc("metallic"))] = None,
    size: Annotated[int | None, typer.Option(help=_doc("size"))] = None,
    init: Annotated[str | None, typer.Option(help=_doc("init"))] = None,
    directions: Annotated[int | None, typer.Option(help=_doc("directions_per_step"))] = None,
    lr: Annotated[float | None, typer.Option(help=option_help(type(_DEFAULT.train), "learning_rate", _DEFAULT.train))] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for the training directions (the held-out set follows from it).")] = None,
    device: Annotated[str | None, typer.Option(help=_doc("device"))] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted bake in --out from its checkpoint.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Learn mip levels whose shading matches the downsampled full-resolution shading; compare with box and Toksvig."""

    def action() -> dict[str, Any]:
        from neuralbake.bakes.mipmap import bake_mipmap

        if not 2 <= len(maps) <= 3:
            raise InputError(
                f"expected 2 or 3 maps, got {len(maps)}.",
                field="maps",
                fix="pass BASE_COLOR NORMAL and optionally a ROUGHNESS (or glTF metallicRoughness) map.",
            )
        config = MipmapConfig(base_color=str(maps[0]), normal=str(maps[1]), roughness_map=str(maps[2]) if len(maps) == 3 else None)
        top = {
            "levels": levels,
            "roughness": roughness,
            "metallic": metallic,
            "size": size,
            "init": init,
            "directions_per_step": directions,
            "device": device,
        }
        config = dataclasses.replace(config, **{k: v for k, v in top.items() if v is not None})
        train = {"steps": steps, "learning_rate": lr, "seed": seed}
        config.train = dataclasses.replace(config.train, **{k: v for k, v in train.items() if v is not None})
        return bake_mipmap(config, out, resume=resume, progress=not quiet)

    report = run_action(action, out=out)
    means = "  ".join(f"{name} {report[f'mean_psnr_{name}_db']:.2f}" for name in ("box", "toksvig", "learned"))
    print_done(
        f"{report['levels']} levels, {report['steps']} steps in {report['seconds']:.1f} s on "
        f"{report['device']['name']} ({report['device']['type']}): mean shaded PSNR (dB) {means} -> {out}",
    )


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command("mipmap")(mipmap)


def register(main_app: typer.Typer) -> None:
    """Add ``mipmap`` to the main CLI."""
    main_app.command("mipmap")(mipmap)
