"""``ntc transcode``: decode a compressed set at load time and BC-encode it, for GPUs without fast NTC inference.

Every mip level of ``texture.ntc`` is decoded (on the GPU when the device is one, as
:func:`~neuralbake.bakes.ntc.decode.decode_all_levels` does), each texture (channel group) is
BC-encoded level by level with etcpak (:func:`neuralbake.io.bcn.bc_encode_mip_chain`) and written
as one DDS file with every mip and a DX10 header (:mod:`neuralbake.io.dds`): ``<group>.dds``.

Formats: ``--format`` takes a format for every texture it fits, ``NAME=FORMAT`` for one texture,
or both (``bc1,normal=bc5``). Without one, each texture gets the format of its kind: colour ->
bc7 (sRGB), a normal's XY -> bc5, one-channel data -> bc4, two-channel data -> bc5, three- or
four-channel data -> bc7 (linear). A bare format goes to every texture whose channel count it
holds (bc1: 3; bc3, bc7: 3-4; bc4: 1; bc5: 2); the others keep their default, so normals stay
bc5. Colour textures are written with the ``_SRGB`` format (their values are sRGB-encoded, as the
glTF and image sources store them); normals and data are linear. Every PSNR is measured on the
stored values (sRGB-encoded for colour), as the ``ntc compress`` report measures its own.

Quality is measured against the textures the set was compressed from when its ``config.json``
names them and they still load to the same groups and size (the compressor's own reference:
the box-filtered mip chain of the sources, resampled as the bake resampled them). Otherwise the
reference is the NTC decode itself, and the report says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.ntc.container import CONTAINER_NAME, open_container
from neuralbake.bakes.ntc.decode import decode_all_levels, resolve_decode_kernels, set_quality
from neuralbake.bakes.ntc.texture_set import ChannelGroup, check_texture_set, load_texture_set
from neuralbake.core.device import resolve_device
from neuralbake.core.events import progress_task
from neuralbake.core.report import write_report
from neuralbake.errors import ConfigError, InputError, NeuralbakeError
from neuralbake.io.bcn import bc_encode_mip_chain, bc_mip_chain_roundtrip
from neuralbake.io.dds import DDS_FORMATS, mip_sizes, write_dds
from neuralbake.io.limits import load_json_file
from neuralbake.io.manifest import BAKE_MANIFEST

__all__ = ["FORMAT_CHANNELS", "TRANSCODE_FORMATS", "EncodedTexture", "choose_formats", "default_format", "encode_textures", "parse_formats", "stack_groups", "transcode"]

TRANSCODE_FORMATS = ("bc1", "bc3", "bc4", "bc5", "bc7")
FORMAT_CHANNELS = {"bc1": (3,), "bc3": (3, 4), "bc4": (1,), "bc5": (2,), "bc7": (3, 4)}
"""Channel counts each format holds (etcpak's BC1 stores no alpha, so a four-channel texture is not offered it)."""
_SRGB_KINDS = ("color",)


def default_format(group: ChannelGroup) -> str:
    """The format a texture gets when ``--format`` names none for it (see the module docstring)."""
    channels = len(group.channels)
    if group.kind == "normal_xy" or channels == 2:
        return "bc5"
    return "bc4" if channels == 1 else "bc7"


def parse_formats(spec: str | Sequence[str] | None) -> tuple[str | None, dict[str, str]]:
    """``--format`` values (comma-separated, repeatable) -> (the format for all, ``{texture: format}``)."""
    items = [spec] if isinstance(spec, str) else list(spec or [])
    bare: str | None = None
    named: dict[str, str] = {}
    for item in (part.strip() for text in items for part in str(text).split(",")):
        if not item:
            continue
        name, _, fmt = item.rpartition("=")
        fmt = fmt.strip().lower()
        if fmt not in TRANSCODE_FORMATS:
            raise ConfigError(
                f"unknown format {fmt or item!r}" + (f" in {item!r}." if name else "."),
                field="--format",
                fix=f"use one of {', '.join(TRANSCODE_FORMATS)}, or NAME=FORMAT for one texture.",
            )
        if name:
            named[name.strip()] = fmt
        elif bare is not None and bare != fmt:
            raise ConfigError(f"two formats for every texture ({bare}, {fmt}).", field="--format", fix="give one bare format; name the others NAME=FORMAT.")
        else:
            bare = fmt
    return bare, named


def choose_formats(groups: Sequence[ChannelGroup], spec: str | Sequence[str] | None) -> dict[str, str]:
    """The format of every texture of the set, from ``--format`` (see the module docstring); ConfigError names a bad entry."""
    bare, named = parse_formats(spec)
    by_name = {group.name: group for group in groups}
    listing = ", ".join(f"{g.name} ({len(g.channels)} channel{'s' if len(g.channels) > 1 else ''})" for g in groups)
    for name, fmt in named.items():
        if name not in by_name:
            raise ConfigError(f"the set has no texture {name!r}; it holds {listing}.", field="--format", fix="name one of its textures.")
        channels = len(by_name[name].channels)
        if channels not in FORMAT_CHANNELS[fmt]:
            fits = [f for f in TRANSCODE_FORMATS if channels in FORMAT_CHANNELS[f]]
            raise ConfigError(f"{fmt} cannot hold {name} ({channels} channels).", field="--format", fix=f"use {' or '.join(fits)} for {name}.")
    if bare is not None and not any(len(g.channels) in FORMAT_CHANNELS[bare] for g in groups if g.name not in named):
        raise ConfigError(
            f"{bare} fits none of the textures it would apply to ({listing}).",
            field="--format",
            fix="pick a format that fits them, or name textures with NAME=FORMAT.",
        )
    chosen = {}
    for group in groups:
        fmt = named.get(group.name)
        if fmt is None:
            fmt = bare if bare is not None and len(group.channels) in FORMAT_CHANNELS[bare] else default_format(group)
        chosen[group.name] = fmt
    return chosen


# -- the reference -------------------------------------------------------------------------------


def _source_reference(folder: Path, groups: Sequence[ChannelGroup], size: tuple[int, int]) -> tuple[list[np.ndarray] | None, dict[str, Any]]:
    """The mip chain of the textures the set was compressed from, or ``None`` and why not."""
    config_path = next((p for p in (folder / "config.json", folder.parent / "config.json") if p.is_file()), None)
    if config_path is None:
        return None, {"why_not_source": "the folder records no config.json naming the source textures"}
    try:
        config = load_json_file(config_path, what="bake config", fix="compress the textures again.")
        sources, material = config["sources"], str(config.get("material", "0"))
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise InputError("its sources are not a list of paths.", path=config_path, field="sources", fix="compress again.")
        texture_set = load_texture_set(sources, material=material)
        if (texture_set.width, texture_set.height) != size and max(texture_set.width, texture_set.height) > max(size):
            texture_set = texture_set.resized(max(size))  # as the bake resampled it (texture_size)
            check_texture_set(texture_set)
    except (NeuralbakeError, KeyError, TypeError, OSError) as exc:
        return None, {"why_not_source": f"the sources in {config_path.name} do not load ({exc})"}
    shape = lambda gs: [(g.name, len(g.channels), g.kind) for g in gs]
    if shape(texture_set.groups) != shape(groups) or (texture_set.width, texture_set.height) != size:
        return None, {"why_not_source": f"the sources in {config_path.name} no longer match the set's textures or size"}
    return texture_set.mip_chain(), {"sources": texture_set.sources}


# -- the output folder ---------------------------------------------------------------------------


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError("the output path exists and is a file, not a folder.", path=out, fix="pass a folder path with --out, or remove the file.")


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A staging folder beside ``out`` whose files move into ``out`` only when the block succeeds."""
    _check_out(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".staging", dir=out.parent))
        mask = os.umask(0o022)  # mkdtemp makes the folder 0700; it becomes --out, so give it the usual mode
        os.umask(mask)
        os.chmod(staging, 0o777 & ~mask)
    except OSError as exc:
        raise InputError(f"the output folder cannot be written ({exc.strerror or exc}).", path=out, fix="choose a folder you can write to with --out.") from exc
    try:
        yield staging
        if not out.exists():
            os.replace(staging, out)
            return
        for item in sorted(staging.iterdir()):
            os.replace(item, out / item.name)
        staging.rmdir()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- the transcode -------------------------------------------------------------------------------


def _quality(levels: Sequence[np.ndarray], reference: Sequence[np.ndarray], group: ChannelGroup) -> dict[str, Any]:
    return set_quality(levels, reference, [group])["groups"][group.name]


@dataclass(frozen=True)
class EncodedTexture:
    """One texture (channel group) of a decoded set, BC-encoded level by level."""

    group: ChannelGroup
    format: str
    """The BCn format (:data:`TRANSCODE_FORMATS`)."""
    channels: slice
    """Its channels in the set's stacked levels."""
    source: list[np.ndarray]
    """What was encoded: float32 ``[H_l, W_l, len(group.channels)]`` per level, the set's channels of this texture."""
    levels: list[np.ndarray]
    """The blocks decoded again: float32, the shapes of ``source``."""
    blocks: list[bytes]
    """Each level's compressed blocks (4x4-padded tails included), as the DDS file stores them."""

    @property
    def data_bytes(self) -> int:
        """Bytes of every level's blocks (the DDS file less its header)."""
        return sum(len(b) for b in self.blocks)


def encode_textures(
    decoded: Sequence[np.ndarray],
    groups: Sequence[ChannelGroup],
    formats: dict[str, str],
    *,
    bc7_uber_level: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[EncodedTexture]:
    """BC-encode every texture of a decoded set as ``ntc transcode`` does, one :class:`EncodedTexture` per group.

    ``decoded``: float32 ``[H_l, W_l, channels]`` per mip level (every group's channels, in the
    groups' order, as :func:`~neuralbake.bakes.ntc.decode.decode_all_levels` returns them);
    ``formats``: ``{group name: format}`` (:func:`choose_formats`). ``progress`` (if given) is
    called with 1 after each level of each texture (``len(groups) * len(decoded)`` calls).
    """
    encoded, start = [], 0
    for group in groups:
        channels = slice(start, start + len(group.channels))
        chain = [np.ascontiguousarray(level[..., channels]) for level in decoded]
        levels, blocks = bc_encode_mip_chain(chain, formats[group.name], bc7_uber_level=bc7_uber_level, progress=progress)
        encoded.append(EncodedTexture(group, formats[group.name], channels, chain, levels, blocks))
        start = channels.stop
    return encoded


def stack_groups(per_group: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Every group's chain (``[H_l, W_l, C_g]`` per level) side by side: ``[H_l, W_l, sum C_g]`` per level, the set's layout."""
    return [np.concatenate([chain[i] for chain in per_group], axis=2) for i in range(len(per_group[0]))]


def transcode(
    folder: str | Path,
    out_dir: str | Path,
    *,
    formats: str | Sequence[str] | None = None,
    device: str = "auto",
    kernels: str = "auto",
    bc7_uber_level: int = 1,
    progress: bool = False,
) -> dict[str, Any]:
    """Decode ``folder`` (written by ``ntc compress``, one rate) and write ``<texture>.dds`` + ``report.json`` into ``out_dir``.

    Returns the report. Every check (the folder, the formats, the output path, the kernels) runs
    before any work; the files go into a staging folder and move into ``out_dir`` together at the end.
    """
    folder, out = Path(folder), Path(out_dir)
    parse_formats(formats)  # a misspelt format fails before the set is read
    _check_out(out)
    if (out / BAKE_MANIFEST).is_file():  # its report.json would be replaced: the NTC folder itself, or another bake's
        raise InputError("the output folder holds a bake (bake.json); its report.json would be overwritten.", path=out, fix="pass a new or empty folder with --out.")
    container = open_container(folder)  # a multi-rate folder (bpp_<X>/ beside rd.json) is named as such, as decompress names it
    torch_device = resolve_device(device)
    container = container.to(torch_device)
    decode_kernels = resolve_decode_kernels(container, kernels)
    layout = container.layout
    groups = list(layout.groups)
    chosen = choose_formats(groups, formats)
    width, height = layout.level_sizes[0]
    if list(layout.level_sizes) != mip_sizes(width, height):
        raise RuntimeError(f"the set's mip chain {layout.level_sizes} is not the chain DDS stores")
    reference, reference_info = _source_reference(folder, groups, (width, height))

    with _staged(out) as staging:
        start = time.perf_counter()
        with progress_task("decoding texture.ntc", sum(w * h for w, h in layout.level_sizes), enabled=progress, unit="texels") as advance:
            decoded = decode_all_levels(container, progress=advance, kernels=kernels)
        if torch_device.type == "cuda":
            torch.cuda.synchronize(torch_device)
        decode_seconds = time.perf_counter() - start

        tic = time.perf_counter()
        with progress_task("BC-encoding", len(groups) * len(layout.level_sizes), enabled=progress, unit="texture mips") as advance:
            encoded = encode_textures(decoded, groups, chosen, bc7_uber_level=bc7_uber_level, progress=advance)
        textures: dict[str, Any] = {}
        plain_levels: list[list[np.ndarray]] = []
        for texture in encoded:
            group, fmt = texture.group, texture.format
            srgb = group.kind in _SRGB_KINDS and DDS_FORMATS[fmt].dxgi_srgb is not None
            file_bytes = write_dds(staging / f"{group.name}.dds", width, height, fmt, texture.blocks, srgb=srgb, alpha=len(group.channels) == 4)
            textures[group.name] = {
                "file": f"{group.name}.dds",
                "format": fmt,
                "dxgi_format": _dxgi_name(fmt, srgb),
                "srgb": srgb,
                "kind": group.kind,
                "channels": list(group.channels),
                "mips": len(texture.blocks),
                "bytes": file_bytes,
                "data_bytes": texture.data_bytes,
                "bpp": round(8.0 * texture.data_bytes / (width * height), 4),
            }
        encode_seconds = time.perf_counter() - tic
        for texture in encoded:
            group, entry = texture.group, textures[texture.group.name]
            if reference is not None:
                ref = [level[..., texture.channels] for level in reference]
                plain, _ = bc_mip_chain_roundtrip(ref, texture.format, bc7_uber_level=bc7_uber_level)
                plain_levels.append(plain)
                entry["psnr"] = {
                    "transcoded_vs_source": _quality(texture.levels, ref, group),
                    "plain_bcn_of_source": _quality(plain, ref, group),
                    "ntc_vs_source": _quality(texture.source, ref, group),
                }
            else:
                entry["psnr"] = {"transcoded_vs_ntc_decode": _quality(texture.levels, texture.source, group)}
        total_data = sum(t["data_bytes"] for t in textures.values())
        ntc_bytes = (folder / CONTAINER_NAME).stat().st_size
        key = "transcoded_vs_source" if reference is not None else "transcoded_vs_ntc_decode"
        whole = stack_groups([texture.levels for texture in encoded])
        against = reference if reference is not None else decoded
        overall = set_quality(whole, against, groups)
        metrics = {"psnr_db": overall["overall_db"], "bpp": round(8.0 * total_data / (width * height), 4)}
        fields: dict[str, Any] = {
            "reference": {
                "kind": "source" if reference is not None else "ntc_decode",
                "what": (
                    "the source textures the set was compressed from (their box-filtered mip chain, at the set's size)"
                    if reference is not None
                    else "the NTC decode of texture.ntc (the sources could not be read, so each PSNR is the BCn round trip of the decode)"
                ),
                **reference_info,
            },
            "ntc_folder": str(folder),
            "size": [width, height],
            "mips": len(layout.level_sizes),
            "textures": textures,
            "psnr_key": key,
            "transcoded": {"bytes": sum(t["bytes"] for t in textures.values()), "data_bytes": total_data, "bpp": metrics["bpp"], "quality": overall},
            "ntc": {"bytes": ntc_bytes, "bpp": round(8.0 * ntc_bytes / (width * height), 4)},
            "bpp_counts": "compressed blocks of every mip level (4x4-padded tails included) * 8 / texels of mip 0; bytes include the 148-byte DDS headers",
            "decode_seconds": round(decode_seconds, 4),
            "encode_seconds": round(encode_seconds, 4),
            "seconds_count": "decode: texture.ntc to float texels, every level (device synchronised); encode: etcpak, the check decode and the DDS writes",
            "kernels": {"decode": decode_kernels},
            "bc7_uber_level": bc7_uber_level,
        }
        if reference is not None:
            fields["ntc"]["quality_vs_source"] = set_quality(decoded, reference, groups)
            fields["plain_bcn_of_source"] = {"data_bytes": total_data, "bpp": metrics["bpp"], "quality": set_quality(stack_groups(plain_levels), reference, groups)}
        report = write_report(staging / "report.json", bake="ntc_transcode", device=torch_device, metrics=metrics, **fields)
    return report


def _dxgi_name(fmt: str, srgb: bool) -> str:
    return f"DXGI_FORMAT_{fmt.upper()}_UNORM{'_SRGB' if srgb else ''}"
