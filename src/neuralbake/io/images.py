"""Reading and writing images as float arrays, with the checks a bake needs at its edge.

Pillow reads every common format, but it silently truncates 16-bit RGB(A) PNGs to 8 bits; those
(and every other 16-bit PNG) are decoded with pypng instead so that no precision is lost. Images
come back as ``float32`` arrays of shape ``[height, width, channels]`` in ``[0, 1]`` with 1 (grey),
2 (grey + alpha), 3 (RGB) or 4 (RGBA) channels; values are stored values (no sRGB decode).

Nothing is decoded before the file's header has been checked: its width and height (read from
the PNG ``IHDR`` ourselves, or from Pillow's lazy open for other formats) against the side limits
and :data:`~neuralbake.io.limits.MAX_IMAGE_PIXELS`, and the memory the decoded float array will
take against what the machine has. A small file can announce a huge image (a 140 KB all-zero PNG
of 12000x12000 pixels), so the file's size proves nothing. Every failure (missing, a folder, a
FIFO, unreadable, empty, truncated, corrupt, too large) is an :class:`~neuralbake.errors.InputError`.
"""

from __future__ import annotations

import stat
import struct
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import png
from PIL import Image, UnidentifiedImageError

from neuralbake.errors import InputError
from neuralbake.io.files import atomic_path
from neuralbake.io.limits import MAX_IMAGE_PIXELS, check_image_pixels, check_memory

__all__ = ["MAX_IMAGE_SIDE", "ImageInfo", "load_image", "resize_image", "save_exr", "save_png"]

MAX_IMAGE_SIDE = 16384
"""Largest width or height accepted (the largest texture any current GPU samples)."""

MIN_IMAGE_SIDE = 2
"""Smallest width or height accepted: a single texel has nothing to learn."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Pillow's own decompression-bomb guard (it warns above the limit and refuses above twice it,
# inside Image.open) uses the same limit as ours, so the two never disagree about what is too
# large; ours runs first, with the caller's limit and a message that names the fix.
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS

# What a damaged file can make the decoders raise besides OSError (Pillow and pypng are not
# consistent: a broken chunk is a SyntaxError in Pillow, a struct or zlib error in pypng...).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError, struct.error, zlib.error, png.Error)


@dataclass(frozen=True)
class ImageInfo:
    """What was read from an image file."""

    path: str
    """The file it came from."""
    width: int
    """Width in pixels."""
    height: int
    """Height in pixels."""
    channels: int
    """1 grey, 2 grey + alpha, 3 RGB, 4 RGBA."""
    bit_depth: int
    """Bits per channel in the file (8 or 16)."""
    source_mode: str
    """The file's pixel layout as Pillow or pypng named it (e.g. ``RGB``, ``I;16``, ``RGBA;16``)."""


@dataclass(frozen=True)
class _PngHeader:
    width: int
    height: int
    bit_depth: int
    channels: int
    """Channels after decoding (a palette becomes RGB, or RGBA with a transparency chunk: assume 4)."""


def _fail(path: Path, problem: str, fix: str) -> InputError:
    return InputError(problem, path=path, fix=fix)


def _check_size(path: Path, width: int, height: int, max_pixels: int) -> None:
    if min(width, height) < MIN_IMAGE_SIDE:
        raise _fail(
            path,
            f"the image is {width}x{height} pixels; at least {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE} is needed.",
            "use a larger image (a texture is typically 64x64 or more).",
        )
    if max(width, height) > MAX_IMAGE_SIDE:
        raise _fail(
            path,
            f"the image is {width}x{height} pixels; at most {MAX_IMAGE_SIDE} per side is supported.",
            f"downscale it to {MAX_IMAGE_SIDE} pixels or less per side first.",
        )
    check_image_pixels(path, width, height, limit=max_pixels)


def _check_memory(path: Path, width: int, height: int, channels: int, sample_bytes: int) -> None:
    # Peak while decoding: the decoder's own buffer, one integer copy of it, and the float32 result.
    needed = width * height * channels * (4 + 2 * sample_bytes)
    check_memory(
        needed,
        what=f"decoding this {width}x{height} image ({channels} channels) into float32",
        path=path,
        fix="downscale the image, or run on a machine with more free memory.",
    )


_PNG_CHANNELS = {0: 1, 2: 3, 3: 4, 4: 2, 6: 4}  # colour type -> channels after decoding (palette: up to RGBA)


def _png_header(path: Path, head: bytes) -> _PngHeader | None:
    """The PNG's IHDR, or ``None`` if the file is not a PNG at all (another format, or damaged)."""
    if not head.startswith(_PNG_SIGNATURE):
        return None
    if len(head) < 33 or head[12:16] != b"IHDR":
        raise _fail(path, "the PNG is truncated or damaged (no IHDR header).", "re-export the image.")
    width, height = struct.unpack(">II", head[16:24])
    bit_depth, colour_type = head[24], head[25]
    if colour_type not in _PNG_CHANNELS or bit_depth not in (1, 2, 4, 8, 16):
        raise _fail(path, f"the PNG header is damaged (colour type {colour_type}, bit depth {bit_depth}).", "re-export the image.")
    return _PngHeader(width, height, bit_depth, _PNG_CHANNELS[colour_type])


def _read_png16(path: Path, header: _PngHeader) -> tuple[np.ndarray, ImageInfo]:
    # pypng has no decompression-bomb guard of its own: the header was checked before this call.
    try:
        width, height, rows, meta = png.Reader(filename=str(path)).asDirect()
        if (width, height) != (header.width, header.height):
            raise png.FormatError("the header changed between reads")
        planes = meta["planes"]
        data = np.empty((height, width * planes), dtype=np.uint16)
        count = 0
        for count, row in enumerate(rows, start=1):
            if count > height:
                raise png.FormatError("more rows than the header announces")
            data[count - 1] = row
        if count != height:
            raise png.FormatError(f"{count} of {height} rows")
    except _DECODE_ERRORS as exc:
        raise _fail(path, f"the 16-bit PNG is damaged or truncated ({exc}).", "re-export the image.") from exc
    array = data.reshape(height, width, planes).astype(np.float32)
    del data
    array /= np.float32(65535.0)
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[planes] + ";16"
    return array, ImageInfo(str(path), width, height, planes, 16, mode)


_MODE_CONVERSIONS = {"1": "L", "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB", "La": "LA", "RGBa": "RGBA"}
_READABLE_MODES = {"L", "LA", "RGB", "RGBA", "P", "PA", *_MODE_CONVERSIONS}


def _read_pillow(path: Path, max_pixels: int) -> tuple[np.ndarray, ImageInfo]:
    try:
        with warnings.catch_warnings():
            # Pillow warns above its limit; our own check below refuses with a clearer message.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(path)
    except UnidentifiedImageError as exc:
        raise _fail(path, "this is not an image file Pillow can read.", "pass a PNG, JPEG, TGA, BMP or TIFF image.") from exc
    except Image.DecompressionBombError as exc:
        raise _fail(
            path,
            f"the image is too large to open safely ({exc}).",
            f"downscale it to {MAX_IMAGE_SIDE} pixels or less per side first.",
        ) from exc
    except _DECODE_ERRORS as exc:
        raise _fail(path, f"the image header is damaged or unreadable ({exc}).", "re-export the image.") from exc
    with image:
        width, height = image.size
        _check_size(path, width, height, max_pixels)
        source_mode = image.mode
        if not (source_mode in _READABLE_MODES or source_mode.startswith("I;16")):
            raise _fail(
                path,
                f"pixel format {source_mode!r} (32-bit integer or float) is not supported.",
                "save the image as an 8- or 16-bit PNG.",
            )
        sample_bytes = 2 if source_mode.startswith("I;16") else 1
        channels = 4 if source_mode in ("P", "PA") else min(4, len(image.getbands()))
        _check_memory(path, width, height, channels, sample_bytes)
        try:
            image.load()
        except Image.DecompressionBombError as exc:
            raise _fail(path, f"the image is too large to decode safely ({exc}).", "downscale it first.") from exc
        except _DECODE_ERRORS as exc:
            raise _fail(path, f"the image data is damaged or truncated ({exc}).", "re-export the image.") from exc
        if image.size != (width, height):  # a few formats (ICO, ICNS) pick their frame only on load
            width, height = image.size
            _check_size(path, width, height, max_pixels)
        try:
            if image.mode == "P":
                image = image.convert("RGBA" if "transparency" in image.info else "RGB")
            elif image.mode == "PA":
                image = image.convert("RGBA")
            elif image.mode in _MODE_CONVERSIONS:
                image = image.convert(_MODE_CONVERSIONS[image.mode])
            if image.mode.startswith("I;16"):
                array = np.asarray(image).astype(np.float32)[..., None]
                array /= np.float32(65535.0)
                return array, ImageInfo(str(path), width, height, 1, 16, source_mode)
            if image.mode not in ("L", "LA", "RGB", "RGBA"):
                raise _fail(
                    path,
                    f"pixel format {image.mode!r} (32-bit integer or float) is not supported.",
                    "save the image as an 8- or 16-bit PNG.",
                )
            array = np.asarray(image).astype(np.float32)
        except _DECODE_ERRORS as exc:
            raise _fail(path, f"the image data cannot be converted ({exc}).", "re-export the image as an 8- or 16-bit PNG.") from exc
    array /= np.float32(255.0)
    if array.ndim == 2:
        array = array[..., None]
    return array, ImageInfo(str(path), width, height, array.shape[2], 8, source_mode)


def _read_head(path: Path) -> bytes:
    """The first bytes of ``path``, after checking that it is a regular, readable, non-empty file."""
    try:
        status = path.stat()
    except FileNotFoundError as exc:
        raise _fail(path, "the file does not exist.", "check the path (relative paths start from the current folder).") from exc
    except OSError as exc:
        raise _fail(path, f"the file cannot be read ({exc.strerror or exc}).", "check the path and its permissions.") from exc
    if stat.S_ISDIR(status.st_mode):
        raise _fail(path, "this is a folder, not an image file.", "pass the path of an image file.")
    if not stat.S_ISREG(status.st_mode):
        # A FIFO would block the read forever and a device never ends.
        raise _fail(path, "this is not a regular file (a device, pipe or socket).", "pass the path of an image file.")
    if status.st_size == 0:
        raise _fail(path, "the file is empty (0 bytes).", "re-export the image; the file was not written completely.")
    try:
        with open(path, "rb") as handle:
            return handle.read(33)
    except OSError as exc:
        raise _fail(path, f"the file cannot be read ({exc.strerror or exc}).", "check the file's permissions.") from exc


def load_image(path: str | Path, *, max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[np.ndarray, ImageInfo]:
    """Read an image as float32 ``[height, width, channels]`` in ``[0, 1]``.

    Grey, grey + alpha, RGB and RGBA images at 8 or 16 bits per channel are read as they are;
    palette and CMYK images are converted to RGB(A). ``max_pixels`` caps ``width * height``
    (checked from the header, before anything is decoded); the memory the result needs is
    compared with the machine's free memory before decoding too.

    Raises
    ------
    InputError
        Missing file, a folder or other non-regular file, unreadable (permissions), empty, not an
        image, damaged or truncated data, smaller than 2x2, larger than 16384 per side or than
        ``max_pixels``, more than the free memory, or an unsupported pixel format; the message
        names the file and the fix.
    """
    path = Path(path)
    head = _read_head(path)
    header = _png_header(path, head)
    if header is not None:
        _check_size(path, header.width, header.height, max_pixels)
        if header.bit_depth == 16:
            _check_memory(path, header.width, header.height, header.channels, 2)
            return _read_png16(path, header)
    return _read_pillow(path, max_pixels)


def resize_image(image: np.ndarray, width: int, height: int, *, nearest: bool = False) -> np.ndarray:
    """Resample ``[H, W, C]`` float image to ``[height, width, C]`` with an antialiased filter, clamped to [0, 1].
    ``nearest``: take the nearest pixel, unclamped, for maps whose values are labels (ids, segmentation colours)."""
    import torch
    import torch.nn.functional as F

    if image.shape[0] == height and image.shape[1] == width:
        return image
    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None]
    if nearest:
        return F.interpolate(tensor, size=(height, width), mode="nearest-exact")[0].permute(1, 2, 0).numpy()
    resized = F.interpolate(tensor, size=(height, width), mode="bilinear", antialias=True, align_corners=False)
    return resized[0].permute(1, 2, 0).clamp(0.0, 1.0).numpy()


_SAVE_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def save_png(path: str | Path, image: np.ndarray, *, bits: int = 8) -> None:
    """Write a float ``[H, W, C]`` image in ``[0, 1]`` (values are clipped) as an 8- or 16-bit PNG.

    The file appears atomically: a crash never leaves a partial PNG.
    """
    if image.ndim == 2:
        image = image[..., None]
    channels = image.shape[2]
    if channels not in _SAVE_MODES:
        raise ValueError(f"save_png: expected 1 to 4 channels, got an array of shape {image.shape}")
    clipped = np.clip(np.nan_to_num(image, nan=0.0), 0.0, 1.0)
    path = Path(path)
    with atomic_path(path) as tmp:
        if bits == 8:
            data = np.round(clipped * 255.0).astype(np.uint8)
            Image.fromarray(data if channels > 1 else data[..., 0], mode=_SAVE_MODES[channels]).save(tmp, format="PNG")
        elif bits == 16:
            data = np.round(clipped * 65535.0).astype(np.uint16)
            writer = png.Writer(
                width=data.shape[1],
                height=data.shape[0],
                bitdepth=16,
                greyscale=channels <= 2,
                alpha=channels in (2, 4),
            )
            with open(tmp, "wb") as handle:
                writer.write(handle, data.reshape(data.shape[0], -1).tolist())
        else:
            raise ValueError(f"save_png: bits must be 8 or 16, got {bits}")


_EXR_DEFAULT_CHANNELS = {1: ("Y",), 2: ("Y", "A"), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}


def save_exr(path: str | Path, image: Any, *, channels: Sequence[str] | None = None) -> None:
    """Write a linear float image as a float32, ZIP-compressed, scanline OpenEXR file, atomically.

    Parameters
    ----------
    path : str or Path
        The ``.exr`` file; it appears atomically (a crash never leaves a partial file).
    image : numpy.ndarray or torch.Tensor
        ``[H, W, C]`` (or ``[H, W]``, one channel) of any float dtype; stored as float32, unclipped.
        A tensor is detached and copied to the CPU.
    channels : sequence of str, optional
        One EXR channel name per ``C`` (e.g. a texture group's ``("normal_x", "normal_y")``).
        Default: ``Y`` for 1 channel, ``Y, A`` for 2, ``R, G, B`` for 3, ``R, G, B, A`` for 4.

    Raises
    ------
    ValueError
        A shape other than ``[H, W]`` or ``[H, W, C]``, no default names for ``C`` channels, or
        ``channels`` of the wrong length or with repeated names.
    """
    import OpenEXR

    if hasattr(image, "detach"):
        image = image.detach().cpu().numpy()
    data = np.asarray(image)
    if data.ndim == 2:
        data = data[..., None]
    if data.ndim != 3:
        raise ValueError(f"save_exr: {path}: expected an [H, W, C] image, got an array of shape {data.shape}")
    if channels is None:
        if data.shape[2] not in _EXR_DEFAULT_CHANNELS:
            raise ValueError(f"save_exr: {path}: {data.shape[2]} channels have no default names; pass channels=[...]")
        channels = _EXR_DEFAULT_CHANNELS[data.shape[2]]
    if len(channels) != data.shape[2] or len(set(channels)) != len(channels):
        raise ValueError(f"save_exr: {path}: channel names {list(channels)} do not name the {data.shape[2]} channels once each")
    planes = {name: np.ascontiguousarray(data[..., i], dtype=np.float32) for i, name in enumerate(channels)}
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with atomic_path(path) as tmp:
        OpenEXR.File(header, planes).write(str(tmp))
