"""Reading and writing images as float arrays, with the checks a bake needs at its edge.

Pillow reads every common format, but it silently truncates 16-bit RGB(A) PNGs to 8 bits; those
(and every other 16-bit PNG) are decoded with pypng instead so that no precision is lost. Images
come back as ``float32`` arrays of shape ``[height, width, channels]`` in ``[0, 1]`` with 1 (grey),
2 (grey + alpha), 3 (RGB) or 4 (RGBA) channels; values are stored values (no sRGB decode).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import png
from PIL import Image, UnidentifiedImageError

from neuralbake.errors import InputError
from neuralbake.io.files import atomic_path

__all__ = ["MAX_IMAGE_SIDE", "ImageInfo", "load_image", "resize_image", "save_png"]

MAX_IMAGE_SIDE = 16384
"""Largest width or height accepted (the largest texture any current GPU samples)."""

MIN_IMAGE_SIDE = 2
"""Smallest width or height accepted: a single texel has nothing to learn."""

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


def _fail(path: Path, problem: str, fix: str) -> InputError:
    return InputError(problem, path=path, fix=fix)


def _check_size(path: Path, width: int, height: int) -> None:
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


def _png_bit_depth(path: Path) -> int | None:
    with open(path, "rb") as handle:
        head = handle.read(33)
    if len(head) < 33 or not head.startswith(_PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return None
    return head[24]


def _read_png16(path: Path) -> tuple[np.ndarray, ImageInfo]:
    try:
        reader = png.Reader(filename=str(path))
        width, height, _, meta = reader.read()
        _check_size(path, width, height)
        width, height, rows, meta = png.Reader(filename=str(path)).asDirect()
        planes = meta["planes"]
        data = np.vstack([np.asarray(row, dtype=np.uint16) for row in rows])
    except png.Error as exc:
        raise _fail(path, f"the 16-bit PNG is damaged ({exc}).", "re-export the image.") from exc
    array = data.reshape(height, width, planes).astype(np.float32) / 65535.0
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[planes] + ";16"
    return array, ImageInfo(str(path), width, height, planes, 16, mode)


_MODE_CONVERSIONS = {"1": "L", "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB", "La": "LA", "RGBa": "RGBA"}


def _read_pillow(path: Path) -> tuple[np.ndarray, ImageInfo]:
    try:
        image = Image.open(path)
    except UnidentifiedImageError as exc:
        raise _fail(path, "this is not an image file Pillow can read.", "pass a PNG, JPEG, TGA, BMP or TIFF image.") from exc
    except Image.DecompressionBombError as exc:
        raise _fail(
            path,
            f"the image is too large to open safely ({exc}).",
            f"downscale it to {MAX_IMAGE_SIDE} pixels or less per side first.",
        ) from exc
    with image:
        width, height = image.size
        _check_size(path, width, height)
        source_mode = image.mode
        try:
            image.load()
        except OSError as exc:
            raise _fail(path, f"the image data is damaged or truncated ({exc}).", "re-export the image.") from exc
        if image.mode == "P":
            image = image.convert("RGBA" if "transparency" in image.info else "RGB")
        elif image.mode == "PA":
            image = image.convert("RGBA")
        elif image.mode in _MODE_CONVERSIONS:
            image = image.convert(_MODE_CONVERSIONS[image.mode])
        if image.mode.startswith("I;16"):
            array = np.asarray(image, dtype=np.float32)[..., None] / 65535.0
            return array, ImageInfo(str(path), width, height, 1, 16, source_mode)
        if image.mode not in ("L", "LA", "RGB", "RGBA"):
            raise _fail(
                path,
                f"pixel format {image.mode!r} (32-bit integer or float) is not supported.",
                "save the image as an 8- or 16-bit PNG.",
            )
        array = np.asarray(image, dtype=np.float32) / 255.0
    if array.ndim == 2:
        array = array[..., None]
    return array, ImageInfo(str(path), width, height, array.shape[2], 8, source_mode)


def load_image(path: str | Path) -> tuple[np.ndarray, ImageInfo]:
    """Read an image as float32 ``[height, width, channels]`` in ``[0, 1]``.

    Grey, grey + alpha, RGB and RGBA images at 8 or 16 bits per channel are read as they are;
    palette and CMYK images are converted to RGB(A).

    Raises
    ------
    InputError
        Missing file, a folder, not an image, damaged data, smaller than 2x2, larger than
        16384 per side, or an unsupported pixel format; the message names the file and the fix.
    """
    path = Path(path)
    if not path.exists():
        raise _fail(path, "the file does not exist.", "check the path (relative paths start from the current folder).")
    if path.is_dir():
        raise _fail(path, "this is a folder, not an image file.", "pass the path of an image file.")
    if _png_bit_depth(path) == 16:
        return _read_png16(path)
    return _read_pillow(path)


def resize_image(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Resample ``[H, W, C]`` float image to ``[height, width, C]`` with an antialiased filter."""
    import torch
    import torch.nn.functional as F

    if image.shape[0] == height and image.shape[1] == width:
        return image
    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None]
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
