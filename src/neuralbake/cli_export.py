"""``neuralbake material export`` and ``neuralbake material pack``: shader export of baked neural materials.

Both commands take folders written by ``neuralbake material bake`` and write Slang + HLSL shaders
with their weight and latent buffers (see :mod:`neuralbake.export.neural_material`). They are plain
typer command functions; :func:`register` adds them to the ``material`` sub-app of
``neuralbake.cli``. This module does not import ``neuralbake.cli`` (which registers it), so it has
its own copy of the CLI's error handling: a neuralbake error becomes one red line and exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from neuralbake.cli_run import print_done, run_action

__all__ = ["material_export", "material_pack", "register"]

_out = Console()

_PRECISION_HELP = "Weight storage in the shader's buffer: fp32 or fp16 (arithmetic is fp32 either way)."
_LATENTS_HELP = "Latent storage: fp16, or u8 (8-bit codes with a per-channel scale and offset)."


def _summary(written: Any) -> str:
    weights, latents = written.weights.stat().st_size, written.latents.stat().st_size
    return (
        f"{written.slang.name} + {written.hlsl.name}, weights {weights} B, latents {latents} B "
        f"({', '.join(written.materials)}) -> {written.slang.parent}"
    )


def material_export(
    bundle: Annotated[Path, typer.Argument(help="A neural material folder written by `neuralbake material bake`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the .slang/.hlsl shaders, their buffers and the shader manifest.")],
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "fp16",
    latents: Annotated[str, typer.Option(help=_LATENTS_HELP)] = "fp16",
    name: Annotated[str | None, typer.Option(help="Shader name (nb_NAME_eval); default: the baked material's file name.")] = None,
) -> None:
    """Export a neural material as a Slang module and HLSL: nb_NAME_eval(uv, wi, wo, mip) -> f cos."""

    def action() -> Any:
        from neuralbake.export.neural_material import export_neural_material_shader

        return export_neural_material_shader(bundle, out, precision=precision, latent_format=latents, name=name)

    print_done(_summary(run_action(action, out=out)))


def material_pack(
    materials: Annotated[list[Path], typer.Argument(help="Materials (.json, .mtlx; baked here) or baked neural material folders; material ids follow this order.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder: materials/<name>/ bakes, shader/ (Slang, HLSL, buffers, manifest), pack.json.")],
    share: Annotated[bool, typer.Option("--share/--no-share", help="Later materials reuse the first one's leading decoder layers (stored once).")] = True,
    shared_layers: Annotated[int, typer.Option(help="How many leading decoder layers are shared.")] = 1,
    latent: Annotated[int, typer.Option(help="Latent channels per texel (one architecture for the whole pack).")] = 8,
    resolution: Annotated[int, typer.Option(help="Latent texture side in texels.")] = 512,
    steps: Annotated[int, typer.Option(help="Training steps per material.")] = 2000,
    batch_size: Annotated[int, typer.Option(help="(uv, wi, wo) samples per step.")] = 4096,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "fp16",
    latents: Annotated[str, typer.Option(help=_LATENTS_HELP)] = "fp16",
    compare_size: Annotated[int, typer.Option(help="Side of each bake's reference-vs-neural preview renders.")] = 128,
    compare_spp: Annotated[int, typer.Option(help="Samples per pixel of those renders.")] = 32,
    name: Annotated[str, typer.Option(help="Shader name: nb_NAME_eval(material_id, uv, wi, wo, mip).")] = "material_pack",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Bake and pack materials into one shader: a material-id switch, one weight buffer (shared layers once), one latent buffer."""

    def action() -> Any:
        import dataclasses

        from neuralbake.bakes.material_pack import pack_materials
        from neuralbake.bakes.neural_material import NeuralMaterialConfig

        template = NeuralMaterialConfig(material="-", latent=latent, resolution=resolution, batch_size=batch_size, device=device, shared_layers=shared_layers,
                                       compare_size=compare_size, compare_spp=compare_spp)
        template.train = dataclasses.replace(template.train, steps=steps)
        return pack_materials(materials, out, template, share=share, progress=not quiet, precision=precision, latent_format=latents, name=name)

    summary = run_action(action, out=out)
    print_done(f"{len(summary['materials'])} materials -> {out / 'shader'}")
    for entry in summary["materials"]:
        bake = summary["bakes"].get(entry["name"])
        quality = f" (baked: PSNR {bake['psnr_db']:.2f} dB, FLIP {bake['flip']:.3f})" if bake else ""
        _out.print(f"  id {entry['id']}: {entry['name']}{quality}", highlight=False, markup=False)


def register(material_app: typer.Typer) -> None:
    """Add ``export`` and ``pack`` to the ``material`` command group."""
    material_app.command("export")(material_export)
    material_app.command("pack")(material_pack)
