"""The ``neuralbake`` command line: one command group per bake, built on the bakes' configs.

Option help comes from the config fields' docstrings, so the CLI, the saved ``config.json`` and
the docs say the same thing. Settings resolve as: built-in defaults, then ``--config FILE``
(JSON or TOML), then the flags given on the command line.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from neuralbake.bakes.neural_texture import NeuralTextureConfig, bake_neural_texture, render_saved_network
from neuralbake.cli_run import option_help, print_done, run_action
from neuralbake.core.config import load_config
from neuralbake.nn.mlp import CoordinateNetworkConfig
from neuralbake.nn.trainer import TrainerConfig

__all__ = ["app", "main", "parse_size"]

_out = Console()


class _DefaultSubcommandGroup(TyperGroup):
    """A group that runs its ``bake`` subcommand when the first argument names no subcommand.

    So ``neuralbake texture photo.png`` and ``neuralbake texture bake photo.png`` are the same,
    while ``neuralbake texture infer DIR`` still reaches ``infer``.
    """

    default_command = "bake"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="neuralbake",
    help="Bake heavy graphics assets into compact ones that render fast (neural textures, materials, LODs).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
texture_app = typer.Typer(
    cls=_DefaultSubcommandGroup,
    help="Neural texture (RTX Neural Shaders simple training): learn an image as a tiny MLP of UV. "
    "`neuralbake texture IMAGE --out DIR` is short for `neuralbake texture bake IMAGE --out DIR`.",
    no_args_is_help=True,
)
app.add_typer(texture_app, name="texture")
material_app = typer.Typer(
    help="Layered materials (.json or MaterialX .mtlx): preview them, bake them into neural materials, render, export and pack those as shaders.",
    no_args_is_help=True,
)
app.add_typer(material_app, name="material")
from neuralbake.cli_export import register as _register_material_export  # noqa: E402

_register_material_export(material_app)

from neuralbake.cli_mipmap import mipmap as _mipmap  # noqa: E402

app.command("mipmap")(_mipmap)

from neuralbake.cli_ntc import ntc_app as _ntc_app  # noqa: E402

app.add_typer(_ntc_app, name="ntc")

from neuralbake.cli_fit import register as _register_fit  # noqa: E402

_register_fit(app)


@app.callback()
def _root(
    allow_outside_refs: Annotated[
        bool,
        typer.Option(
            "--allow-outside-refs",
            help="Let files an input refers to (glTF buffers and images, material textures, MaterialX includes) "
            "lie outside that input's folder. Off by default: only trust inputs you made. May also follow the command.",
        ),
    ] = False,
) -> None:
    """Bake heavy graphics assets into compact ones that render fast (neural textures, materials, LODs)."""
    if allow_outside_refs:
        from neuralbake.io.refs import allow_outside_refs_for_this_process

        allow_outside_refs_for_this_process()


_doc = option_help


def parse_size(text: str) -> tuple[int, int]:
    """Parse ``WxH`` (or ``N`` for N x N) into ``(width, height)``."""
    parts = text.lower().replace("×", "x").split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) < 1:
        raise typer.BadParameter(f"{text!r} is not a size; write WIDTHxHEIGHT, e.g. 512x512.")
    return values[0], values[1]


@app.command()
def version() -> None:
    """Print the neuralbake version and the versions it runs on."""
    from neuralbake.core.device import versions

    for name, value in versions().items():
        _out.print(f"{name} {value}", highlight=False)


_NET = CoordinateNetworkConfig()
_TRAIN = NeuralTextureConfig().train
_TEX = NeuralTextureConfig()


@texture_app.command("bake")
def texture_bake(
    image: Annotated[Path, typer.Argument(help="Reference image (PNG, JPEG, TGA, BMP, TIFF; 8/16-bit; grey, RGB or RGBA).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the bundle, pictures and report.")],
    steps: Annotated[int | None, typer.Option(help=_doc(TrainerConfig, "steps", _TRAIN))] = None,
    size: Annotated[str | None, typer.Option(help="Resample the reference to WxH before training (at most 4096x4096). \\[default: its own size]")] = None,
    transform: Annotated[str | None, typer.Option(help=_doc(NeuralTextureConfig, "transform", _TEX))] = None,
    seed: Annotated[int | None, typer.Option(help=_doc(TrainerConfig, "seed", _TRAIN))] = None,
    device: Annotated[str | None, typer.Option(help=_doc(NeuralTextureConfig, "device", _TEX))] = None,
    hidden: Annotated[int | None, typer.Option(help=_doc(CoordinateNetworkConfig, "hidden", _NET))] = None,
    layers: Annotated[int | None, typer.Option(help=_doc(CoordinateNetworkConfig, "layers", _NET))] = None,
    frequencies: Annotated[int | None, typer.Option(help=_doc(CoordinateNetworkConfig, "frequencies", _NET))] = None,
    activation: Annotated[str | None, typer.Option(help=_doc(CoordinateNetworkConfig, "hidden_activation", _NET))] = None,
    precision: Annotated[str | None, typer.Option(help=_doc(TrainerConfig, "precision", _TRAIN, extra="On a CPU, fp32 runs about 10x faster than fp16."))] = None,
    loss_scale: Annotated[str | None, typer.Option(help=_doc(TrainerConfig, "loss_scale", _TRAIN))] = None,
    lr: Annotated[float | None, typer.Option(help=_doc(TrainerConfig, "learning_rate", _TRAIN))] = None,
    schedule: Annotated[str | None, typer.Option(help=_doc(TrainerConfig, "schedule", _TRAIN))] = None,
    batch_size: Annotated[int | None, typer.Option(help=_doc(NeuralTextureConfig, "batch_size", _TEX))] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Load settings from a JSON or TOML file (flags given here win).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the interrupted bake in --out from its checkpoint.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Train a neural texture from IMAGE and write network, preview, loss curve and report to --out."""

    def action() -> dict[str, Any]:
        cfg = load_config(NeuralTextureConfig, config) if config else NeuralTextureConfig()
        cfg.image = str(image)
        top = {"transform": transform, "device": device, "batch_size": batch_size}
        net = {"hidden": hidden, "layers": layers, "frequencies": frequencies, "hidden_activation": activation}
        train = {"steps": steps, "seed": seed, "precision": precision, "loss_scale": loss_scale, "learning_rate": lr, "schedule": schedule}
        cfg = dataclasses.replace(cfg, **{k: v for k, v in top.items() if v is not None})
        cfg.network = dataclasses.replace(cfg.network, **{k: v for k, v in net.items() if v is not None})
        cfg.train = dataclasses.replace(cfg.train, **{k: v for k, v in train.items() if v is not None})
        if size is not None:
            cfg.size = parse_size(size)
        return bake_neural_texture(cfg, out, resume=resume, progress=not quiet)

    report = run_action(action, out=out)
    low_key = f"psnr_{report['precision']}_db"
    print_done(
        f"{report['steps']} steps in {report['seconds']:.1f} s on {report['device']['name']} "
        f"({report['device']['type']}): PSNR {report['psnr_db']:.2f} dB (fp32 weights), "
        f"{report[low_key]:.2f} dB ({report['precision']}), {report['params']} parameters -> {out}",
    )


@texture_app.command("infer")
def texture_infer(
    bundle: Annotated[Path, typer.Argument(help="Folder written by `neuralbake texture` (holds network.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")],
    size: Annotated[str, typer.Option(help="Output size WxH.")] = "512x512",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    precision: Annotated[str, typer.Option(help="Inference precision: fp32, fp16 (as a shader would run it) or bf16.")] = "fp32",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Render a saved neural texture at any size."""
    width, height = parse_size(size)

    def action() -> Path:
        from neuralbake.errors import InputError

        if out.is_dir():
            raise InputError("--out names a folder; infer writes one PNG file.", path=out, field="--out", fix="pass a file name such as big.png.")
        if out.suffix.lower() != ".png":
            raise InputError(
                f"infer writes PNG images, but --out ends in {out.suffix or '(no extension)'!r}.", path=out, field="--out", fix="name the output *.png."
            )
        return render_saved_network(bundle, width, height, out, device=device, precision=precision, progress=not quiet)

    path = run_action(action, out=out.parent)
    _out.print(f"wrote {path} ({width}x{height})", highlight=False, markup=False)


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
        from neuralbake.core.device import resolve_device
        from neuralbake.core.report import write_report
        from neuralbake.io.files import prepare_output_dir
        from neuralbake.material.loader import load_material
        from neuralbake.render.preview import render_preview, write_preview

        torch_device = resolve_device(device)
        compiled = load_material(material, device=torch_device)
        folder = prepare_output_dir(out)
        from neuralbake.core.events import progress_task
        from neuralbake.render.preview import SCENES

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
        f"{stats['size']}x{stats['size']} at {stats['spp']} spp in {stats['seconds']:.1f} s: "
        f"{stats['bsdf_evaluations_per_second'] / 1e6:.3f} M BSDF samples/s -> {out}",
    )


@material_app.command("bake")
def material_bake(
    material: Annotated[Path, typer.Argument(help="A neuralbake material (.json) or a MaterialX document (.mtlx).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for the latent texture, decoder bundle, comparison and report.")],
    latent: Annotated[int, typer.Option(help="Latent channels per texel (4, 8 or 16).")] = 8,
    resolution: Annotated[int, typer.Option(help="Latent texture side in texels (mip 0).")] = 512,
    steps: Annotated[int, typer.Option(help="Training steps.")] = 2000,
    batch_size: Annotated[int, typer.Option(help="(uv, wi, wo) samples per step.")] = 4096,
    lr: Annotated[float, typer.Option(help="Peak Adam learning rate.")] = 0.005,
    seed: Annotated[int, typer.Option(help="Seed for initialisation and sampling.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    compare_size: Annotated[int, typer.Option(help="Side of the reference-vs-neural preview renders that score the bake.")] = 128,
    compare_spp: Annotated[int, typer.Option(help="Samples per pixel of those renders.")] = 32,
    shared_decoder: Annotated[Path | None, typer.Option(help="A baked neural material whose first decoder layer(s) this bake reuses, frozen.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted bake in --out.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Bake a layered material into a latent texture + decoder MLP (a neural material)."""

    def action() -> dict[str, Any]:
        from neuralbake.bakes.neural_material import NeuralMaterialConfig, bake_neural_material

        config = NeuralMaterialConfig(
            material=str(material), latent=latent, resolution=resolution, batch_size=batch_size, device=device,
            compare_size=compare_size, compare_spp=compare_spp, shared_decoder=str(shared_decoder or ""),
        )
        config.train = dataclasses.replace(config.train, steps=steps, learning_rate=lr, seed=seed)
        return bake_neural_material(config, out, resume=resume, progress=not quiet)

    report = run_action(action, out=out)
    print_done(
        f"{report['steps']} steps in {report['seconds']:.1f} s: PSNR {report['psnr_db']:.2f} dB, FLIP {report['flip']:.3f} "
        f"on preview renders vs the reference (8-bit latents on texture views: {report['texture_views']['psnr_u8_latents_db']:.2f} dB "
        f"vs {report['texture_views']['psnr_db']:.2f} dB), decoder {report['decoder_params']} parameters, "
        f"{report['throughput']['speedup']:.1f}x the reference's samples/s on {report['device']['type']} -> {out}",
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
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Render a neural material and its reference on the preview scenes: reference | neural | FLIP error."""

    def action() -> dict[str, Any]:
        from neuralbake.bakes.neural_material import render_neural_material
        from neuralbake.core.device import resolve_device

        if precision not in ("fp16", "fp32"):
            from neuralbake.errors import ConfigError

            raise ConfigError(f"unknown precision {precision!r}.", field="--precision", fix="use fp16 or fp32.")
        on_gpu = resolve_device(device).type == "cuda"
        side = size if size is not None else (256 if on_gpu else 128)
        samples = spp if spp is not None else (64 if on_gpu else 16)
        if size is None or spp is None:
            _out.print(f"rendering {side}x{side} at {samples} spp ({'GPU' if on_gpu else 'CPU'} defaults; --size and --spp choose)", highlight=False, markup=False)
        return render_neural_material(
            bundle, out, material=material, size=side, spp=samples, precision=precision, quantized=u8, device=device,  # type: ignore[arg-type]
            allow_other_material=allow_other_material, progress=not quiet,
        )

    report = run_action(action, out=out)
    scenes = ", ".join(f"{name} {s['psnr_db']:.2f} dB / FLIP {s['flip']:.3f}" for name, s in report["scenes"].items())
    print_done(f"{scenes} -> {out / 'comparison.png'}")


def _normalise_argv(argv: list[str]) -> list[str]:
    """Accept ``--allow-outside-refs`` anywhere on the line, and refuse an empty ``--out``.

    An empty ``--out ""`` would silently mean the current folder (``Path("")`` is ``.``).
    """
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--out=") else argv[i + 1] if arg in ("--out", "-o") and i + 1 < len(argv) else None
        if value is not None and not value.strip():
            Console(stderr=True).print("error: --out is empty. Fix: name the output folder (or file), e.g. --out out/result.", highlight=False, markup=False)
            raise SystemExit(2)
    flag = "--allow-outside-refs"
    if flag in argv[1:]:
        argv = [flag] + [a for a in argv if a != flag]
    return argv


def main() -> None:
    """Entry point of the ``neuralbake`` script."""
    app(args=_normalise_argv(sys.argv[1:]), prog_name="neuralbake")


if __name__ == "__main__":
    sys.exit(main())
