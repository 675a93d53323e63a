"""``neuralbake ntc``: neural texture compression of a material's texture set.

``compress`` (generated from :class:`~neuralbake.bakes.ntc.NTCConfig`) takes images (``PATH`` or
``NAME=PATH``) or one glTF file and one or more rates: ``--bpp 4`` writes ``texture.ntc`` +
``manifest.json`` + ``report.json`` into ``--out``; several (``--bpp 1,2,4``, or ``--bpp`` repeated)
write one folder per rate (``--out/bpp_<X>/``) plus ``rd.json`` and ``rd.png`` (the
rate-distortion curve with the BC1 and BC7 sets as points). ``decompress`` checks a compressed
folder and decodes every group and mip level to PNG or EXR; ``transcode`` decodes it and
BC-encodes every texture into a DDS file with its mips, as an engine would at load time;
``export`` writes a Slang module and HLSL that decode it where the texture is sampled (texels,
bilinear, trilinear and stochastic filtering, a tensor-core batch kernel), its two GPU buffers and
a JSON manifest of bindings and dispatch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from neuralbake.bakes.ntc import decompress
from neuralbake.bakes.ntc.export import export_ntc
from neuralbake.bakes.ntc.transcode import transcode
from neuralbake.cli.common import print_done, run_action
from neuralbake.core.report import metric_text

__all__ = ["ntc_app"]


class _RepeatedRates(TyperGroup):
    """Accept ``--bpp X --bpp Y`` as ``--bpp X,Y`` (the generated option takes one comma-separated value)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _join_repeated(args, "--bpp"))


def _join_repeated(args: list[str], flag: str) -> list[str]:
    """``args`` with every ``flag VALUE`` (or ``flag=VALUE``) merged into one at the first's place."""
    kept: list[str] = []
    values: list[str] = []
    at: int | None = None
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            kept += args[index:]
            break
        if arg == flag and index + 1 < len(args) or arg.startswith(flag + "="):
            at = len(kept) if at is None else at
            values.append(arg.split("=", 1)[1] if "=" in arg else args[index + 1])
            index += 1 if "=" in arg else 2
            continue
        kept.append(arg)
        index += 1
    if len(values) < 2 or at is None:
        return args
    return [*kept[:at], flag, ",".join(values), *kept[at:]]


ntc_app = typer.Typer(
    cls=_RepeatedRates,
    help="Neural texture compression: a material's textures (up to 16 channels) as quantised latent grids + a tiny decoder.",
    no_args_is_help=True,
)


@ntc_app.command("decompress")
def ntc_decompress(
    folder: Annotated[Path, typer.Argument(help="A folder written by `neuralbake ntc compress` (texture.ntc + manifest.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for <group>_mip<k>.png/.exr.")],
    image_format: Annotated[str, typer.Option("--format", help="png (8-bit RGB; normal Z rebuilt) or exr (float32, stored channels).")] = "png",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    kernels: Annotated[str, typer.Option(help="triton (the fused Triton decode on a CUDA GPU), torch, or auto (PyTorch: the fp32 decode's Triton kernels compile for minutes).")] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Check the folder (every file against bake.json), then decode every channel group at every mip level from texture.ntc alone."""
    written = run_action(lambda: decompress(folder, out, image_format=image_format, device=device, progress=not quiet, kernels=kernels), out=out)
    print_done(f"{len(written)} images -> {out}")




@ntc_app.command("transcode")
def ntc_transcode(
    folder: Annotated[Path, typer.Argument(help="A folder written by `neuralbake ntc compress` (one rate: texture.ntc + manifest.json).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder for <texture>.dds and report.json.")],
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            metavar="FORMAT|NAME=FORMAT",
            help="bc1, bc3, bc4, bc5 or bc7 for every texture it fits, and/or NAME=FORMAT for one (comma-separated or repeated). "
            "Default per texture: colour -> bc7 (sRGB), normal -> bc5, 1-channel data -> bc4, 2-channel -> bc5, 3-4-channel -> bc7; "
            "a bare format leaves textures it cannot hold (e.g. normals) at their default.",
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N (where the NTC decode runs).")] = "auto",
    kernels: Annotated[str, typer.Option(help="triton (the fused Triton decode on a CUDA GPU), torch, or auto (PyTorch).")] = "auto",
    bc7_uber_level: Annotated[int, typer.Option(help="bc7enc effort for BC7, 0 (fastest) to 4 (best).", min=0, max=4)] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Decode every mip of every texture and BC-encode it into one DDS file per texture (DX10 header, all mips, sRGB for colour), with report.json."""
    report = run_action(
        lambda: transcode(folder, out, formats=formats, device=device, kernels=kernels, bc7_uber_level=bc7_uber_level, progress=not quiet), out=out
    )
    source = report["reference"]["kind"] == "source"
    versus = "the source" if source else "the NTC decode (sources not readable)"
    plain = f" (plain BCn of the source {metric_text(report, 'plain_bcn_of_source', 'quality', 'overall_db', unit=' dB')})" if source else ""
    print_done(
        f"{len(report['textures'])} DDS files, {metric_text(report, 'bpp', spec='.2f')} bpp: PSNR {metric_text(report, 'psnr_db', unit=' dB')} "
        f"at mip 0 vs {versus}{plain} -> {out}"
    )


@ntc_app.command("export")
def ntc_export(
    folder: Annotated[Path, typer.Argument(help="A folder written by `neuralbake ntc compress` (one rate: texture.ntc + manifest.json).")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output folder for <name>.slang, .hlsl, .weights.int8.bin, .latents.bin and .json.")
    ],
    name: Annotated[
        str | None,
        typer.Option(
            help="Shader name: the functions are ntc_<name>_sample, ntc_<name>_texel ... \\[default: the folder's name as an identifier]"
        ),
    ] = None,
) -> None:
    """Write a Slang module (with tensor-core batch kernels) and HLSL that decode the set on the GPU, its buffers and a binding manifest."""
    summary = run_action(lambda: export_ntc(folder, out, name=name), out=out)
    stochastic = summary["stochastic"]["trilinear"]
    print_done(
        f"ntc_{summary['name']}: Slang + HLSL, {len(summary['entry_points'])} entry points, {summary['gpu_bytes'] / 1024:.1f} KB of GPU buffers "
        f"({summary['gpu_bpp']:.2f} bpp; texture.ntc {summary['container_bytes'] / 1024:.1f} KB); stochastic filter: bias "
        f"{metric_text(stochastic, 'bias', spec='.1e')}, noise RMSE {metric_text(stochastic, 'noise_rmse', spec='.4f')} -> {out}"
    )
