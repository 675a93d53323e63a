"""``neuralbake ntc``: neural texture compression of a material's texture set.

``compress`` takes images (``PATH`` or ``NAME=PATH``) or one glTF file and one or more ``--bpp``
values: one value writes ``texture.ntc`` + ``manifest.json`` + ``report.json`` into ``--out``;
several write one folder per rate (``--out/bpp_<X>/``) plus ``rd.json`` and ``rd.png`` (the
rate-distortion curve with the BC1 and BC7 sets as points). ``decompress`` decodes every group
and mip level of a compressed folder to PNG or EXR.

This module is a self-contained ``typer.Typer()`` sub-app (``ntc_app``) and does not import
``neuralbake.cli``; register it there with ``app.add_typer(ntc_app, name="ntc")``. It has its
own copy of the CLI's error handling: a neuralbake error is one red line and exit code 2, Ctrl-C
during training exits 130 after saving a checkpoint.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from neuralbake.cli.common import option_help, print_done, run_action
from neuralbake.core.config import load_config
from neuralbake.errors import ConfigError

__all__ = ["ntc_app", "ntc_compress", "ntc_decompress"]


ntc_app = typer.Typer(
    help="Neural texture compression: a material's textures (up to 16 channels) as quantised latent grids + a tiny decoder.",
    no_args_is_help=True,
)


def _doc(name: str) -> str:
    from neuralbake.bakes.ntc import NTCConfig

    return option_help(NTCConfig, name, NTCConfig())


def _train_doc(name: str, extra: str = "") -> str:
    from neuralbake.bakes.ntc import NTCConfig

    train = NTCConfig().train
    return option_help(type(train), name, train, extra=extra)


def _parse_hidden(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        widths = ()
    if not widths:
        raise ConfigError(f"{text!r} is not a list of layer widths.", field="hidden", fix="write e.g. 64,48,32.")
    return widths


@ntc_app.command("compress")
def ntc_compress(
    sources: Annotated[list[str], typer.Argument(help="Texture images (PATH or NAME=PATH; a group named normal keeps X and Y) or one .gltf file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (one rate), or parent of bpp_<X>/ folders (several rates).")],
    bpp: Annotated[
        list[float] | None, typer.Option(help=_doc("bpp") + " Repeat --bpp for a rate-distortion curve.")
    ] = None,
    material: Annotated[str | None, typer.Option(help=_doc("material"))] = None,
    size: Annotated[int | None, typer.Option(help=_doc("size"))] = None,
    steps: Annotated[int | None, typer.Option(help=_train_doc("steps", "(Steps of the main, noise-quantised phase.)"))] = None,
    finetune_steps: Annotated[int | None, typer.Option(help=_doc("finetune_steps"))] = None,
    lr: Annotated[float | None, typer.Option(help=_train_doc("learning_rate"))] = None,
    batch_size: Annotated[int | None, typer.Option(help=_doc("batch_size"))] = None,
    hidden: Annotated[str | None, typer.Option(help="Decoder hidden widths (RTXNTC's size by default). 256,256,128 gives 2.7-6.5 dB more on 2048² sets at 13.6x the decode work; its weights count in --bpp. \\[default: 64,48,32]")] = None,
    pe_frequencies: Annotated[int | None, typer.Option(help=_doc("pe_frequencies"))] = None,
    precision: Annotated[str | None, typer.Option(help=_train_doc("precision"))] = None,
    seed: Annotated[int | None, typer.Option(help=_train_doc("seed"))] = None,
    baselines: Annotated[bool | None, typer.Option("--baselines/--no-baselines", help=_doc("baselines"), show_default=False)] = None,
    device: Annotated[str | None, typer.Option(help=_doc("device"))] = None,
    config: Annotated[Path | None, typer.Option("--config", help="Load settings from a JSON or TOML file (flags given here win).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted single-rate compression in --out.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars.")] = True,
) -> None:
    """Compress a texture set to texture.ntc at one or several bit rates."""

    def action() -> Any:
        from neuralbake.bakes.ntc import NTCConfig, compress_rate_distortion, compress_texture_set

        cfg = load_config(NTCConfig, config) if config else NTCConfig()
        cfg.sources = list(sources)
        top = {
            "material": material, "size": size, "finetune_steps": finetune_steps, "batch_size": batch_size,
            "pe_frequencies": pe_frequencies, "device": device, "baselines": baselines,
        }
        cfg = dataclasses.replace(cfg, **{k: v for k, v in top.items() if v is not None})
        if hidden is not None:
            cfg.hidden = _parse_hidden(hidden)
        train = {"steps": steps, "learning_rate": lr, "precision": precision, "seed": seed}
        cfg.train = dataclasses.replace(cfg.train, **{k: v for k, v in train.items() if v is not None})
        rates = [cfg.bpp] if not bpp else bpp
        if len(rates) == 1:
            cfg.bpp = float(rates[0])
            return [compress_texture_set(cfg, out, resume=resume, progress=progress)]
        if resume:
            raise ConfigError("--resume works with one --bpp at a time.", field="resume", fix="resume each bpp_<X> folder with its own --bpp.")
        return compress_rate_distortion(cfg, rates, out, progress=progress)

    result = run_action(action, out=out)
    if isinstance(result, list):
        report = result[0]
        bc = report.get("bcn", {})
        extra = "".join(f", {k.upper()} set {v['bpp']:.2f} bpp {v['quality']['overall_db']:.2f} dB" for k, v in bc.items())
        print_done(
            f"{report['bpp_measured']:.3f} bpp ({report['bytes']} B, {report['latent_shape']['name']}): "
            f"PSNR {report['ntc']['overall_db']:.2f} dB at mip 0{extra} -> {out}",
        )
    else:
        points = ", ".join(f"{p['bpp']:.2f} bpp {p['psnr_db']:.2f} dB" for p in result["ntc"])
        print_done(f"NTC {points}; rd.json + rd.png -> {out}")


@ntc_app.command("decompress")
def ntc_decompress(
    folder: Annotated[Path, typer.Argument(help="A folder written by `neuralbake ntc compress` (texture.ntc + manifest.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for <group>_mip<k>.png/.exr.")],
    image_format: Annotated[str, typer.Option("--format", help="png (8-bit RGB; normal Z rebuilt) or exr (float32, stored channels).")] = "png",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Decode every channel group at every mip level from texture.ntc alone."""

    def action() -> Any:
        from neuralbake.bakes.ntc import decompress

        return decompress(folder, out, image_format=image_format, device=device, progress=progress)

    written = run_action(action, out=out)
    print_done(f"{len(written)} images -> {out}")



def register(app: typer.Typer) -> None:
    """Add ``ntc`` (compress, decompress) to the main CLI."""
    app.add_typer(ntc_app, name="ntc")
