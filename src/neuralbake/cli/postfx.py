"""``neuralbake postfx``: AI render passes (seed 004).

- ``neuralbake postfx RENDER --model DIR --prompt ... --out OUT`` (the same as ``postfx run``): the
  chain of :mod:`neuralbake.bakes.postfx.chain` (conditions, diffusion with ControlNets and LoRAs,
  composition, upscaler) as a bake; without ``--model``, ``--upscale N`` runs the upscaler alone;
- ``postfx conditions``: only the ControlNet conditions of a render (:mod:`neuralbake.postfx.conditions`);
- ``postfx make-model``: a diffusion model with random weights, built offline, for trials and timing;
- ``postfx addon``: the Blender add-on as a zip (:mod:`neuralbake.integrations.blender`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from neuralbake.cli.common import print_done, run_action
from neuralbake.errors import ConfigError
from neuralbake.integrations.blender.package import write_addon_zip
from neuralbake.postfx.conditions import write_conditions
from neuralbake.postfx.models import make_random_model

__all__ = ["postfx_app"]


class _RunByDefault(typer.core.TyperGroup):
    """``neuralbake postfx RENDER ...`` runs ``postfx run RENDER ...``: a first word that is no
    subcommand (nor an option) is the render."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


postfx_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True,
                         help="AI render passes: a render through ControlNets + diffusion + LoRAs + upscaler (`neuralbake postfx RENDER ...` = `postfx run`).")


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
    written = run_action(lambda: write_conditions(render, out, depth=depth, normal=normal, ids=ids, size=size, canny=(canny_low, canny_high)), out=out)
    names = [k for k in ("render", "canny", "depth", "normal", "segmentation") if k in written]
    masks = f" + {len(written['masks'])} id masks" if "masks" in written else ""
    print_done(f"{', '.join(names)}{masks} ({written['width']}x{written['height']}) -> {out}")


@postfx_app.command("make-model")
def postfx_make_model(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder: base/ (diffusers layout) and controlnet/.")],
    family: Annotated[str, typer.Option(help="sd (Stable Diffusion 1.x), sdxl or flux (tiny only).", metavar="sd|sdxl|flux")] = "sd",
    size: Annotated[str, typer.Option(help="tiny (seconds on a CPU), sd15 or sdxl (the real networks' shapes and cost).", metavar="tiny|sd15|sdxl")] = "tiny",
    controlnet: Annotated[bool, typer.Option("--controlnet/--no-controlnet", help="Also write a ControlNet of the same UNet.")] = True,
    seed: Annotated[int, typer.Option(help="Seeds the random weights.")] = 0,
) -> None:
    """Write a diffusion model with random weights, built offline from configs (for trials of the chain and for timing; it draws noise, not pictures)."""
    def action() -> dict[str, Any]:
        if family not in ("sd", "sdxl", "flux") or size not in ("tiny", "sd15", "sdxl"):
            raise ConfigError(f"unknown family {family!r} or size {size!r}.", field="--family/--size", fix="use --family sd|sdxl|flux and --size tiny|sd15|sdxl.")
        if out.exists() and any(out.iterdir()):
            raise ConfigError("the output folder is not empty.", field="--out", fix="pass a new folder.")
        return make_random_model(out, family=family, size=size, controlnet=controlnet, seed=seed)  # type: ignore[arg-type]

    made = run_action(action, out=out)
    total = sum(made["parameters"].values())
    print_done(f"{family} {size} model, {total / 1e6:.2f} M parameters -> {made['base']}" + (f" + {made['controlnet']}" if "controlnet" in made else ""))


@postfx_app.command("addon")
def postfx_addon(
    out: Annotated[Path, typer.Option("--out", "-o", help="The add-on zip to write (install it in Blender: Preferences > Add-ons > Install from Disk).")],
) -> None:
    """Write the Blender add-on (Render Properties > neuralbake AI pass) as an installable zip."""

    def action() -> Path:
        if out.suffix.lower() != ".zip":
            raise ConfigError("the add-on is written as a .zip file.", field="--out", fix="pass a path ending in .zip.")
        return write_addon_zip(out)

    run_action(action, out=out)
    print_done(f"Blender add-on -> {out}")
