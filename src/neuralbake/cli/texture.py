"""``neuralbake texture``: bake a neural texture from an image, and render a baked one at any size.

``neuralbake texture IMAGE --out DIR`` is short for ``neuralbake texture bake IMAGE --out DIR``.
The bake command is generated from :class:`~neuralbake.bakes.neural_texture.NeuralTextureConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from neuralbake.bakes.neural_texture import render_saved_network
from neuralbake.cli.common import DefaultSubcommandGroup, parse_size, run_action
from neuralbake.errors import InputError

__all__ = ["texture_app"]

texture_app = typer.Typer(
    cls=DefaultSubcommandGroup,
    help="Neural texture (RTX Neural Shaders simple training): learn an image as a tiny MLP of UV. "
    "`neuralbake texture IMAGE --out DIR` is short for `neuralbake texture bake IMAGE --out DIR`.",
    no_args_is_help=True,
)


@texture_app.command("infer")
def texture_infer(
    bundle: Annotated[Path, typer.Argument(help="Folder written by `neuralbake texture` (holds network.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")],
    size: Annotated[str, typer.Option(help="Output size WxH.")] = "512x512",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    precision: Annotated[str, typer.Option(help="Inference precision: fp32, fp16 (as a shader would run it) or bf16.")] = "fp32",
    kernels: Annotated[str, typer.Option(help="auto (the fused Triton MLP on a CUDA GPU at fp16 or bf16 --precision), triton or torch.")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Render a saved neural texture at any size."""

    def action() -> tuple[Path, int, int]:
        width, height = parse_size(size)
        if out.is_dir():
            raise InputError("--out names a folder; infer writes one PNG file.", path=out, field="--out", fix="pass a file name such as big.png.")
        if out.suffix.lower() != ".png":
            raise InputError(
                f"infer writes PNG images, but --out ends in {out.suffix or '(no extension)'!r}.", path=out, field="--out", fix="name the output *.png."
            )
        path = render_saved_network(bundle, width, height, out, device=device, precision=precision, progress=not quiet, kernels=kernels)
        return path, width, height

    path, width, height = run_action(action, out=out.parent)
    Console().print(f"wrote {path} ({width}x{height})", highlight=False, markup=False)


