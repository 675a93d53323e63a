"""``neuralbake postfx``: AI render passes (seed 004). ``conditions`` builds the ControlNet
conditions of a render from its true passes (see :mod:`neuralbake.postfx.conditions`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from neuralbake.cli.common import print_done, run_action

__all__ = ["postfx_app", "register"]

postfx_app = typer.Typer(help="AI render passes: ControlNet conditions from a render's true passes.", no_args_is_help=True)


@postfx_app.command("conditions")
def postfx_conditions(
    render: Annotated[Path, typer.Argument(help="The render (PNG, JPEG or OpenEXR), or a .gltf/.glb scene that neuralbake renders with its passes.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for canny.png, depth.png, normal.png, segmentation.png, masks/.")],
    depth: Annotated[Path | None, typer.Option(help="OpenEXR with the Z pass (Blender: Depth.Z).")] = None,
    normal: Annotated[Path | None, typer.Option(help="OpenEXR with the Normal pass (world or view space).")] = None,
    ids: Annotated[Path | None, typer.Option(help="OpenEXR with the object or material index pass.")] = None,
    size: Annotated[int, typer.Option(help="Render side for a glTF scene, in pixels.", min=16, max=4096)] = 512,
    canny_low: Annotated[int, typer.Option(help="Canny's lower hysteresis threshold (8-bit gradient).")] = 100,
    canny_high: Annotated[int, typer.Option(help="Canny's upper hysteresis threshold.")] = 200,
) -> None:
    """Write the ControlNet conditions (edges, depth, normals, ids) that the render and its passes allow."""
    from neuralbake.postfx.conditions import write_conditions

    written = run_action(lambda: write_conditions(render, out, depth=depth, normal=normal, ids=ids, size=size, canny=(canny_low, canny_high)), out=out)
    names = [k for k in ("render", "canny", "depth", "normal", "segmentation") if k in written]
    masks = f" + {len(written['masks'])} id masks" if "masks" in written else ""
    print_done(f"{', '.join(names)}{masks} ({written['width']}x{written['height']}) -> {out}")


def register(app: typer.Typer) -> None:
    """Add ``postfx`` (conditions) to the main CLI."""
    app.add_typer(postfx_app, name="postfx")
