"""The ``texture.ntc`` container: bit-packed latent codes + int8 decoder weights, written and read back.

Layout (little-endian): 8-byte magic, u16 version, u32 header length, a compact JSON header
(sizes, groups, grid shapes, bits, decoder shape), the packed latent codes (each grid's codes
bit-packed, padded to a byte), then per layer the int8 weights, one float32 scale and float32
biases. ``manifest.json`` beside it holds its size and sha256. The format is small and fixed
because no library stores "bit-packed latents + int8 MLP" and the byte count must be exactly
what the rate controller counted.

It lives with the bake rather than in :mod:`neuralbake.io`: reading it dequantises the codes
(:mod:`neuralbake.nn.quantize`) into the bake's :class:`~neuralbake.bakes.ntc.layout.NTCLayout`,
and writing it packs a trained :class:`~neuralbake.bakes.ntc.model.NTCModel`; ``io`` sits below
``nn`` and the bakes and may not import them.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neuralbake.bakes.ntc.layout import CONTAINER_VERSION, MAGIC, MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH, MAX_PE_FREQUENCIES, PREFIX, NTCLayout
from neuralbake.bakes.ntc.model import NTCModel
from neuralbake.bakes.ntc.texture_set import MAX_CHANNELS
from neuralbake.errors import BundleError, InputError
from neuralbake.io.limits import MAX_IMAGE_PIXELS, load_json_file, parse_json_text
from neuralbake.io.manifest import verify_bake_folder
from neuralbake.io.refs import resolve_reference
from neuralbake.nn.activations import ACTIVATIONS
from neuralbake.nn.quantize import codes_to_latents, latent_codes, pack_codes, quantize_int8, unpack_codes

__all__ = ["CONTAINER_NAME", "MANIFEST_NAME", "NTCContainer", "open_container", "pack_container", "read_container", "refuse_rate_sweep"]

CONTAINER_NAME = "texture.ntc"
MANIFEST_NAME = "manifest.json"


@dataclass
class NTCContainer:
    """A decoded ``texture.ntc``: the layout plus dequantised latents and int8-derived weights (float32, CPU)."""

    layout: NTCLayout
    latents_high: torch.Tensor
    latents_low: torch.Tensor
    weights_int8: list[torch.Tensor]
    scales: list[torch.Tensor]
    biases: list[torch.Tensor]

    def weights(self) -> list[torch.Tensor]:
        return [q.to(torch.float32) * s for q, s in zip(self.weights_int8, self.scales)]

    def to(self, device: torch.device | str) -> NTCContainer:
        move = lambda ts: [t.to(device) for t in ts]
        return NTCContainer(
            self.layout, self.latents_high.to(device), self.latents_low.to(device), move(self.weights_int8), move(self.scales), move(self.biases)
        )


def pack_container(model: NTCModel) -> bytes:
    """The ``texture.ntc`` bytes of a trained model: latents hard-quantised, weights int8."""
    layout = model.layout
    bits = layout.shape.bits
    parts = [PREFIX.pack(MAGIC, CONTAINER_VERSION, len(layout.header_bytes())), layout.header_bytes()]
    for latents in (model.latents_high, model.latents_low):
        parts.append(pack_codes(latent_codes(latents, bits).cpu().numpy(), bits))
    for layer in model.layers:
        weight = layer.weight.detach().float()
        codes, scale = quantize_int8(weight)
        parts += [codes.cpu().numpy().tobytes(), np.float32(scale.item()).tobytes(), layer.bias.detach().float().cpu().numpy().astype("<f4").tobytes()]
    data = b"".join(parts)
    if len(data) != layout.file_bytes():  # the rate controller's count must be the file's
        raise RuntimeError(f"container is {len(data)} bytes, layout predicted {layout.file_bytes()}")
    return data



_MAX_HEADER_BYTES = 1 << 20
"""Largest container header read (a real one is well under 1 KiB)."""
_GROUP_KINDS = ("color", "normal_xy", "data")


def _check_header(header: Any, path: Path | None) -> None:
    """Check the container header's structure, types and ranges before :meth:`NTCLayout.from_header` uses it.

    Sizes within the decode limit, group names usable as file names (decompress writes
    ``<group>_mip<k>.png``), channel counts, latent shape and decoder widths in range.
    """

    def fail(problem: str, field: str) -> BundleError:
        return BundleError(problem, path=path, field=f"header.{field}", fix="compress the textures again.")

    def obj(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(f"must be an object, not {type(value).__name__}.", field)
        return value

    def get(mapping: dict[str, Any], key: str, field: str) -> Any:
        if key not in mapping:
            raise fail(f"the header has no {key!r}.", f"{field}.{key}" if field else key)
        return mapping[key]

    def integer(value: Any, field: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise fail(f"must be an integer from {low} to {high}, not {str(value)[:40]!r}.", field)
        return value

    def text(value: Any, field: str) -> str:
        if not isinstance(value, str) or not value or len(value) > 64 or any(char in value for char in '/\\:\x00') or value in (".", ".."):
            raise fail(f"must be a short name without path separators, not {str(value)[:40]!r}.", field)
        return value

    header = obj(header, "")
    side = 1 << 16
    width, height = integer(get(header, "width", ""), "width", 1, side), integer(get(header, "height", ""), "height", 1, side)
    if width * height > MAX_IMAGE_PIXELS:
        raise fail(f"{width}x{height} is more than the {MAX_IMAGE_PIXELS:,} texels decoded.", "width")
    groups = get(header, "groups", "")
    if not isinstance(groups, list) or not groups:
        raise fail("must be a non-empty list.", "groups")
    channels, names = 0, set()
    for index, group in enumerate(groups):
        where = f"groups[{index}]"
        group = obj(group, where)
        name = text(get(group, "name", where), f"{where}.name")
        if name in names:
            raise fail(f"group name {name!r} appears twice.", f"{where}.name")
        names.add(name)
        kind = get(group, "kind", where)
        if not isinstance(kind, str) or kind not in _GROUP_KINDS:
            raise fail(f"kind must be one of {list(_GROUP_KINDS)}, not {str(kind)[:40]!r}.", f"{where}.kind")
        group_channels = get(group, "channels", where)
        if not isinstance(group_channels, list) or not 1 <= len(group_channels) <= (2 if kind == "normal_xy" else 4):
            raise fail("must list 1 to 4 channel names (normal_xy: 2).", f"{where}.channels")
        if kind == "normal_xy" and len(group_channels) != 2:
            raise fail("a normal_xy group has exactly 2 channels (X, Y).", f"{where}.channels")
        for k, channel in enumerate(group_channels):
            text(channel, f"{where}.channels[{k}]")
        channels += len(group_channels)
    if channels > MAX_CHANNELS:
        raise fail(f"{channels} channels; at most {MAX_CHANNELS} fit one set.", "groups")
    latents = obj(get(header, "latents", ""), "latents")
    integer(get(latents, "high_div", "latents"), "latents.high_div", 1, 64)
    integer(get(latents, "features", "latents"), "latents.features", 1, 64)
    integer(get(latents, "bits", "latents"), "latents.bits", 1, 8)
    decoder = obj(get(header, "decoder", ""), "decoder")
    hidden = get(decoder, "hidden", "decoder")
    if not isinstance(hidden, list) or len(hidden) > MAX_HIDDEN_LAYERS:
        raise fail(f"must be a list of at most {MAX_HIDDEN_LAYERS} layer widths.", "decoder.hidden")
    for k, value in enumerate(hidden):
        integer(value, f"decoder.hidden[{k}]", 1, MAX_HIDDEN_WIDTH)
    integer(get(decoder, "pe_frequencies", "decoder"), "decoder.pe_frequencies", 0, MAX_PE_FREQUENCIES)
    activation = get(decoder, "activation", "decoder")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise fail(f"unknown activation {str(activation)[:40]!r}.", "decoder.activation")
    leak = get(decoder, "leak", "decoder")
    if isinstance(leak, bool) or not isinstance(leak, (int, float)) or not math.isfinite(leak):
        raise fail("must be a finite number.", "decoder.leak")


def read_container(source: str | Path | bytes) -> NTCContainer:
    """Parse a ``texture.ntc`` file (or its bytes); raises BundleError on anything malformed."""
    path = None if isinstance(source, bytes) else Path(source)
    if path is not None:
        if not path.is_file():
            raise BundleError("the NTC file does not exist.", path=path, fix="pass a folder written by `neuralbake ntc compress`.")
        data = path.read_bytes()
    else:
        data = source  # type: ignore[assignment]
    return _parse_container(data, path)


def _parse_container(data: bytes, path: Path | None) -> NTCContainer:
    """The container in ``data``; ``path`` (the file it came from, if any) is what errors name."""
    if len(data) < PREFIX.size:
        raise BundleError("the file is too short to be an NTC container.", path=path, fix="compress the textures again.")
    magic, version, header_len = PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise BundleError("this is not a neuralbake NTC container (wrong magic bytes).", path=path, fix="pass a texture.ntc file.")
    if version != CONTAINER_VERSION:
        raise BundleError(f"container version {version} is not supported (this neuralbake reads {CONTAINER_VERSION}).", path=path, fix="compress again with this version.")
    if header_len > len(data) - PREFIX.size or header_len > _MAX_HEADER_BYTES:
        raise BundleError(
            f"the header claims {header_len} bytes but the file has {len(data) - PREFIX.size} after the prefix (truncated or damaged).",
            path=path,
            field="header",
            fix="copy the file again or compress the textures again.",
        )
    try:
        text = data[PREFIX.size : PREFIX.size + header_len].decode("utf-8")
        header = parse_json_text(text, source=path or CONTAINER_NAME, what="container header", fix="compress the textures again.")
    except UnicodeDecodeError as exc:
        raise BundleError(f"the container header is not UTF-8 ({exc.reason}).", path=path, field="header", fix="compress the textures again.") from exc
    except InputError as exc:
        raise BundleError(exc.problem, path=path, field="header", fix=exc.fix) from exc
    _check_header(header, path)
    try:
        layout = NTCLayout.from_header(header)
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"the container header is damaged ({exc}).", path=path, field="header", fix="compress the textures again.") from exc
    if len(layout.header_bytes()) != header_len:
        raise BundleError(
            f"the header is {header_len} bytes, but the layout it describes writes {len(layout.header_bytes())} (edited or damaged).",
            path=path,
            field="header",
            fix="compress the textures again.",
        )
    sections = layout.section_bytes()
    if len(data) != layout.file_bytes():
        raise BundleError(
            f"the file has {len(data)} bytes but its header describes {layout.file_bytes()} (truncated or padded).",
            path=path,
            fix="copy the file again or compress the textures again.",
        )
    cursor = PREFIX.size + header_len
    high_cells, low_cells = layout.latent_cells()
    features, bits = layout.shape.features, layout.shape.bits
    latents = []
    for cells, key in ((high_cells, "latents_high"), (low_cells, "latents_low")):
        codes = unpack_codes(data[cursor : cursor + sections[key]], cells * features, bits)
        latents.append(codes_to_latents(torch.from_numpy(codes).reshape(cells, features), bits))
        cursor += sections[key]
    widths = layout.layer_widths
    weights, scales, biases = [], [], []
    for fan_in, fan_out in itertools.pairwise(widths):
        weights.append(torch.from_numpy(np.frombuffer(data, np.int8, fan_in * fan_out, cursor).copy().reshape(fan_out, fan_in)))
        cursor += fan_in * fan_out
        scales.append(torch.tensor(np.frombuffer(data, "<f4", 1, cursor)[0], dtype=torch.float32))
        cursor += 4
        biases.append(torch.from_numpy(np.frombuffer(data, "<f4", fan_out, cursor).astype(np.float32)))
        cursor += 4 * fan_out
    return NTCContainer(layout, latents[0], latents[1], weights, scales, biases)



def refuse_rate_sweep(folder: str | Path) -> None:
    """InputError when ``folder`` is a rate-distortion sweep (``rd.json`` and a ``bpp_<X>`` folder per rate), not one rate's folder."""
    folder = Path(folder)
    if (folder / "rd.json").is_file() and not (folder / CONTAINER_NAME).exists():
        rates = _rate_folders(folder)
        raise InputError(
            "this is a rate-distortion sweep; each rate is its own NTC folder.", path=folder, fix=f"pass one of its rate folders ({', '.join(rates) or 'bpp_<X>'})."
        )


def _rate_folders(folder: Path) -> list[str]:
    """The ``bpp_<X>`` folders with a container that a multi-rate compression wrote into ``folder``, lowest rate first."""

    def rate(name: str) -> float:
        try:
            return float(name.removeprefix("bpp_"))
        except ValueError:
            return math.inf

    found = [p.name for p in folder.glob("bpp_*") if p.is_dir() and (p / CONTAINER_NAME).is_file()]
    return sorted(found, key=lambda name: (rate(name), name))


def open_container(folder: str | Path) -> NTCContainer:
    """Read ``folder/texture.ntc`` after checking the folder.

    Every file that ``folder/bake.json`` lists is checked first (size and sha256, naming the file
    that changed), then the container against ``folder/manifest.json``; a folder written before
    bake manifests existed relies on the latter alone.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError("the folder does not exist.", path=folder, fix="pass a folder written by `neuralbake ntc compress`.")
    verify_bake_folder(folder)
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        rates = _rate_folders(folder)
        if rates:  # the parent of a multi-rate compression (--bpp 2,4): each rate is a folder of its own
            listed = ", ".join(f"{folder / name}/" for name in rates)
            raise BundleError(f"this folder holds several rates ({', '.join(f'{name}/' for name in rates)}), not a {CONTAINER_NAME} of its own.",
                              path=folder, fix=f"pass one rate's folder: {listed}.")
        raise BundleError(f"{MANIFEST_NAME} or {CONTAINER_NAME} is missing.", path=folder, fix="pass a folder written by `neuralbake ntc compress`.")
    fix = "compress the textures again."
    try:
        manifest = load_json_file(manifest_path, what="NTC manifest", fix=fix)
    except InputError as exc:
        raise BundleError(exc.problem, path=manifest_path, fix=exc.fix) from exc
    if not isinstance(manifest, dict):
        raise BundleError("the manifest is not a JSON object.", path=manifest_path, fix=fix)
    name = manifest.get("file", CONTAINER_NAME)
    if name != CONTAINER_NAME:  # neuralbake always writes texture.ntc beside the manifest
        raise BundleError(f"names the file {str(name)[:60]!r}; an NTC folder holds {CONTAINER_NAME!r}.", path=manifest_path, field="file", fix=fix)
    try:
        file_path = resolve_reference(manifest_path, CONTAINER_NAME, field="file", what="NTC container")
    except InputError as exc:  # texture.ntc is a symlink out of the folder
        raise BundleError(exc.problem, path=manifest_path, field="file", fix=exc.fix) from exc
    if not file_path.is_file():
        raise BundleError(f"{MANIFEST_NAME} or {CONTAINER_NAME} is missing.", path=folder, fix="pass a folder written by `neuralbake ntc compress`.")
    expected = manifest.get("sha256")
    if not isinstance(expected, str) or len(expected) != 64:
        raise BundleError("the manifest has no sha256 (64 hex digits) of the container.", path=manifest_path, field="sha256", fix=fix)
    size = manifest.get("bytes")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size != file_path.stat().st_size):
        raise BundleError(
            f"the file has {file_path.stat().st_size} bytes but the manifest records {str(size)[:40]} (truncated or replaced).",
            path=file_path,
            field="bytes",
            fix="copy it again or compress again.",
        )
    data = file_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != expected:
        raise BundleError("the file's sha256 does not match the manifest (damaged or replaced).", path=file_path, field="sha256", fix="copy it again or compress again.")
    return _parse_container(data, file_path)

