"""``neuralbake material``: preview layered materials, bake them into neural materials, render,
export and pack those as shaders.

Material files are neuralbake JSON materials (docs/material-format.md) or MaterialX documents.
``bake`` and ``pack`` are generated from their configs
(:class:`~neuralbake.bakes.neural_material.NeuralMaterialConfig`,
:class:`~neuralbake.bakes.material_pack.MaterialPackConfig`) and run on the one runner; ``preview``,
``render`` and ``export`` are written out here. Every command that reads a baked folder checks it
against its ``bake.json`` first (through :func:`neuralbake.io.bundle.read_bundle`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from neuralbake.bakes.neural_material import render_neural_material
from neuralbake.cli.common import print_done, run_action
from neuralbake.core.device import resolve_device
from neuralbake.core.events import progress_task
from neuralbake.core.report import metric_text, write_report
from neuralbake.errors import ConfigError
from neuralbake.export.neural_material import export_neural_material_shader
from neuralbake.io.files import prepare_output_dir
from neuralbake.material.loader import load_material
from neuralbake.render.preview import SCENES, render_preview, write_preview

__all__ = ["material_app"]

_out = Console()

material_app = typer.Typer(
    help="Layered materials (.json or MaterialX .mtlx): preview them, bake them into neural materials, render, export and pack those as shaders.",
    no_args_is_help=True,
)


@material_app.command("preview")
def material_preview(
    material: Annotated[Path, typer.Argument(help="A neuralbake material (.json, docs/material-format.md) or a MaterialX document (.mtlx).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the PNG and EXR previews and report.json.")],
    size: Annotated[int, typer.Option(help="Image side in pixels.")] = 256,
    spp: Annotated[int, typer.Option(help="Camera samples per pixel (each with a light and a BSDF sample).")] = 64,
    light: Annotated[str, typer.Option(help="both, directional or environment.")] = "both",
    environment: Annotated[Path | None, typer.Option(help="Equirectangular HDR map (.exr, .hdr or PNG). \\[default: a procedural sky with a sun]")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Render a material on a sphere and a tile under a directional light and an HDR environment."""
    def action() -> dict[str, Any]:

        torch_device = resolve_device(device)
        compiled = load_material(material, device=torch_device)
        folder = prepare_output_dir(out)

        with progress_task("rendering", len(SCENES) * size * size, enabled=not quiet, unit="pixels") as advance:
            images = render_preview(
                compiled, size=size, spp=spp, light=light, environment=environment, device=torch_device, seed=seed, progress=advance
            )
        files = write_preview(images, folder)
        stats = dict(images.stats)
        write_report(
            folder / "report.json",
            bake="material_preview",
            device=torch_device,
            metrics={"bsdf_evaluations_per_second": stats.get("bsdf_evaluations_per_second")},
            material=str(material),
            render=stats,
            files={name: Path(path).name for name, path in files.items()},
        )
        return stats

    stats = run_action(action, out=out)
    print_done(
        f"{stats['size']}x{stats['size']} at {stats['spp']} spp in {metric_text(stats, 'seconds', spec='.1f')} s: "
        f"{metric_text(stats, 'bsdf_evaluations_per_second', spec='.3f', scale=1e-6)} M BSDF samples/s -> {out}",
    )


@material_app.command("render")
def material_render(
    bundle: Annotated[Path, typer.Argument(help="A neural material folder written by `neuralbake material bake`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for comparison.png, the EXRs and report.json.")],
    material: Annotated[Path | None, typer.Option(help="The reference material, if not at the path the bundle recorded.")] = None,
    allow_other_material: Annotated[
        bool,
        typer.Option("--allow-other-material", help="Compare against --material even if it is not the material the bundle was baked from."),
    ] = False,
    size: Annotated[int | None, typer.Option(help="Image side in pixels. \\[default: 256 on a GPU, 128 on a CPU]")] = None,
    spp: Annotated[int | None, typer.Option(help="Camera samples per pixel, the same directions for both materials. \\[default: 64 on a GPU, 16 on a CPU]")] = None,
    precision: Annotated[str, typer.Option(help="Decoder and latent precision: fp16 (as shipped) or fp32.")] = "fp16",
    u8: Annotated[bool, typer.Option("--u8", help="Use the 8-bit latent texture.")] = False,
    filter_latents: Annotated[
        bool, typer.Option("--filter-latents", help="Fetch the latents trilinearly at each pixel's footprint (else level 0); adds the receding plane scene.")
    ] = False,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Render a neural material and its reference on the preview scenes: reference | neural | FLIP error."""
    def action() -> dict[str, Any]:

        if precision not in ("fp16", "fp32"):

            raise ConfigError(f"unknown precision {precision!r}.", field="--precision", fix="use fp16 or fp32.")
        on_gpu = resolve_device(device).type == "cuda"
        side = size if size is not None else (256 if on_gpu else 128)
        samples = spp if spp is not None else (64 if on_gpu else 16)
        if size is None or spp is None:
            _out.print(f"rendering {side}x{side} at {samples} spp ({'GPU' if on_gpu else 'CPU'} defaults; --size and --spp choose)", highlight=False, markup=False)
        return render_neural_material(
            bundle, out, material=material, size=side, spp=samples, precision=precision, quantized=u8, device=device,  # type: ignore[arg-type]
            allow_other_material=allow_other_material, filter_latents=filter_latents, progress=not quiet,
        )

    report = run_action(action, out=out)
    scenes = ", ".join(
        f"{name} {metric_text(report, 'scenes', name, 'psnr_db', unit=' dB')} "
        f"/ FLIP {metric_text(report, 'scenes', name, 'flip', spec='.3f')}"
        for name in report["scenes"]
    )
    print_done(f"{scenes} -> {out / 'comparison.png'}")


_PRECISION_HELP = "Weight storage in the shader's buffer: fp32 or fp16 (arithmetic is fp32 either way)."
_LATENTS_HELP = "Latent storage: fp16, or u8 (8-bit codes with a per-channel scale and offset)."


def _summary(written: Any) -> str:
    import json

    weights, latents = written.weights.stat().st_size, written.latents.stat().st_size
    tensor = json.loads(written.manifest.read_text()).get("tensor_kernels", [])
    kernels = [entry["entry"] for entry in tensor if entry["entry"]]
    missing = [f"{entry['material']} ({entry['reason']})" for entry in tensor if not entry["entry"]]
    files = f"{written.slang.name} + {written.hlsl.name}, weights {weights} B, latents {latents} B"
    lines = [f"{files} ({', '.join(written.materials)}) -> {written.slang.parent}"]
    if kernels:
        lines.append(f"tensor-core batch kernels in {written.slang.name}: {', '.join(kernels)}")
    if missing:
        lines.append(f"no tensor-core kernel for {'; '.join(missing)}")
    return "\n".join(lines)


@material_app.command("export")
def material_export(
    bundle: Annotated[Path, typer.Argument(help="A neural material folder written by `neuralbake material bake`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the .slang/.hlsl shaders, their buffers and the shader manifest.")],
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "fp16",
    latents: Annotated[str, typer.Option(help=_LATENTS_HELP)] = "fp16",
    name: Annotated[str | None, typer.Option(help="Shader name (nb_NAME_eval); default: the baked material's file name.")] = None,
) -> None:
    """Export a neural material as a Slang module and HLSL: nb_NAME_eval(uv, wi, wo, mip) -> f cos."""
    def action() -> Any:

        return export_neural_material_shader(bundle, out, precision=precision, latent_format=latents, name=name)

    print_done(_summary(run_action(action, out=out)))


