"""``neuralbake texture``: bake a neural texture from an image, and render a baked one at any size.

``neuralbake texture IMAGE --out DIR`` is short for ``neuralbake texture bake IMAGE --out DIR``.
The bake command is generated from :class:`~neuralbake.bakes.neural_texture.NeuralTextureConfig`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from neuralbake.bakes.neural_texture import NEURAL_TEXTURE, render_saved_network
from neuralbake.cli.common import Arg, DefaultSubcommandGroup, bake_command, metric_text, parse_size, run_action
from neuralbake.errors import InputError

__all__ = ["register"]

texture_app = typer.Typer(
    cls=DefaultSubcommandGroup,
    help="Neural texture (RTX Neural Shaders simple training): learn an image as a tiny MLP of UV. "
    "`neuralbake texture IMAGE --out DIR` is short for `neuralbake texture bake IMAGE --out DIR`.",
    no_args_is_help=True,
)


def _summary(report: dict[str, Any], out: Path) -> str:
    low_key = f"psnr_{report['precision']}_db"
    return (
        f"{report['steps']} steps in {metric_text(report, 'seconds', spec='.1f')} s on {report['device']['name']} "
        f"({report['device']['type']}): PSNR {metric_text(report, 'psnr_db', unit=' dB')} (fp32 weights), "
        f"{metric_text(report, low_key, unit=' dB')} ({report['precision']}), {report['params']} parameters -> {out}"
    )


bake_command(
    texture_app,
    "bake",
    NEURAL_TEXTURE,
    help="Train a neural texture from IMAGE and write network, preview, loss curve and report to --out.",
    arguments=[Arg("image", "Reference image (PNG, JPEG, TGA, BMP, TIFF; 8/16-bit; grey, RGB or RGBA).")],
    rename={"texture_size": "size", "network.hidden_activation": "activation"},
    skip=["network.outputs", "network.coordinates"],
    summary=_summary,
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


def register(app: typer.Typer) -> None:
    """Add ``texture`` (bake, infer) to the main CLI."""
    app.add_typer(texture_app, name="texture")
