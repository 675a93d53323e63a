"""Block-compression (BCn) round trips: the fixed-rate GPU formats neural textures are measured against.

Encoding goes through etcpak (Bartosz Taudul's fast BC1/BC4/BC5/BC7 encoders, PyPI ``etcpak``)
and decoding through texture2ddecoder (Perfare's reference-style decoders, PyPI
``texture2ddecoder``); nothing here encodes or decodes blocks by hand. A round trip quantises the
float image to 8 bits per channel, encodes, decodes and returns the decoded texels as float32 in
``[0, 1]`` together with the size of the compressed data, so a report can put
``PSNR(decoded, original)`` beside the bits per pixel.

Channel order, checked by ``tests/mipmap/test_bcn.py`` on a coloured image: etcpak reads RGBA
bytes, texture2ddecoder writes BGRA bytes (the layout of Unity's ``Texture2D`` it was written
for), so the decoded channels are swapped back here.

Formats:

- ``bc1`` (4 bpp): RGB. etcpak writes opaque four-colour blocks only, so alpha is not stored;
  an RGBA input comes back with alpha 1 (use ``bc7`` when alpha matters).
- ``bc7`` (8 bpp): RGB or RGBA, etcpak's port of bc7enc with all modes and 64 partitions,
  *linear* RGBA error weights (bc7enc's default weighs errors in YCbCr, which loses about 1.5 dB
  of RGB PSNR on a smooth gradient and is wrong for data textures such as normals) and uber
  level 1 (``bc7_uber_level``: 0 fastest to 4 best; on a 1024^2 albedo 0 / 1 / 4 give 48.3 /
  48.6 / 48.8 dB in 0.34 / 0.46 / 0.69 s on one core).
- ``bc5`` (8 bpp): two channels, e.g. a tangent-space normal's X and Y (Z is rebuilt in the
  shader as ``sqrt(1 - x^2 - y^2)``). etcpak has a BC5 encoder (two BC4 blocks), used as is.
- ``bc3`` (8 bpp): RGB as BC1 plus a BC4 alpha block (alpha 1 for an RGB input).
- ``bc4`` (4 bpp): one channel (etcpak encodes the red byte), e.g. roughness.

Decoded values are 8-bit (texture2ddecoder's output), which slightly understates BC4/BC5's
precision (their interpolated values are finer than 1/255); the error this adds is at most
half a step, well below the format's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from neuralbake.errors import ConfigError, InputError

__all__ = ["BC_BITS_PER_PIXEL", "BC_CHANNELS", "bc_encode_mip_chain", "bc_mip_chain_roundtrip", "bc_roundtrip", "mip_chain_bytes", "pad_to_blocks"]

BC_BITS_PER_PIXEL = {"bc1": 4, "bc3": 8, "bc4": 4, "bc5": 8, "bc7": 8}
"""Bits per texel of each format (a 4x4 block is 8 bytes for bc1 and bc4, 16 for bc3, bc5 and bc7)."""

BC_CHANNELS = {"bc1": (3, 4), "bc3": (3, 4), "bc4": (1,), "bc5": (2,), "bc7": (3, 4)}
"""Channel counts each format accepts in :func:`bc_roundtrip`."""

BLOCK = 4
"""Side of a compressed block in texels."""


def _check_format(fmt: str) -> str:
    if not isinstance(fmt, str) or fmt.lower() not in BC_BITS_PER_PIXEL:
        raise ConfigError(
            f"unknown block-compression format {fmt!r}.",
            field="fmt",
            fix=f"use one of {', '.join(sorted(BC_BITS_PER_PIXEL))}.",
        )
    return fmt.lower()


def _check_image(image: np.ndarray, fmt: str) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.ndim != 3:
        shape = getattr(image, "shape", type(image).__name__)
        raise InputError(
            f"expected a float image of shape [H, W, C], got {shape}.",
            field="image",
            fix="pass a numpy array [height, width, channels] with values in [0, 1].",
        )
    height, width, channels = image.shape
    if channels not in BC_CHANNELS[fmt]:
        wanted = " or ".join(str(c) for c in BC_CHANNELS[fmt])
        hint = {"bc5": "pass the normal's X and Y channels (image[..., :2])", "bc4": "pass one channel (image[..., :1])"}.get(fmt, "pass an RGB or RGBA image")
        raise InputError(f"{fmt} takes {wanted} channels, got {channels}.", field="image", fix=f"{hint}.")
    if height == 0 or width == 0 or height % BLOCK or width % BLOCK:
        raise InputError(
            f"{fmt} compresses 4x4 blocks, so width and height must be multiples of 4; got {width}x{height}.",
            field="image",
            fix="pad or resize the image to a multiple of 4 per side (bc_mip_chain_roundtrip pads small mips itself).",
        )
    if not np.issubdtype(image.dtype, np.floating):
        raise InputError(f"expected a float image in [0, 1], got dtype {image.dtype}.", field="image", fix="divide 8-bit data by 255.")
    if not np.all(np.isfinite(image)):
        raise InputError("the image holds NaN or infinite values.", field="image", fix="replace them (np.nan_to_num) first.")
    return image


def _to_rgba8(image: np.ndarray) -> np.ndarray:
    height, width, channels = image.shape
    quantised = np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)
    rgba = np.zeros((height, width, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    rgba[..., :channels] = quantised
    return rgba


def _encode(rgba: np.ndarray, fmt: str, bc7_uber_level: int) -> bytes:
    import etcpak

    height, width = rgba.shape[:2]
    data = np.ascontiguousarray(rgba).tobytes()
    if fmt == "bc1":
        return etcpak.compress_bc1(data, width, height)
    if fmt in ("bc3", "bc4", "bc5"):
        return getattr(etcpak, f"compress_{fmt}")(data, width, height)
    params = etcpak.BC7CompressBlockParams()
    params.init_linear_weights()
    params.m_uber_level = bc7_uber_level
    return etcpak.compress_bc7(data, width, height, params)


def _decode(data: bytes, width: int, height: int, fmt: str) -> np.ndarray:
    import texture2ddecoder

    decoder = getattr(texture2ddecoder, f"decode_{fmt}")
    bgra = np.frombuffer(decoder(data, width, height), dtype=np.uint8).reshape(height, width, 4)
    return bgra[..., [2, 1, 0, 3]]


def _check_uber(level: int) -> int:
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 4:
        raise ConfigError(f"must be an integer from 0 to 4, got {level!r}.", field="bc7_uber_level", fix="use 0 (fastest) to 4 (best).")
    return level


def bc_roundtrip(image: np.ndarray, fmt: str, *, bc7_uber_level: int = 1) -> tuple[np.ndarray, int]:
    """Compress ``image`` to ``fmt`` and decode it again.

    Parameters
    ----------
    image:
        float ``[H, W, C]`` in ``[0, 1]`` (values outside are clipped); ``C`` = 3 or 4 for
        ``bc1``/``bc3``/``bc7``, 2 for ``bc5``, 1 for ``bc4`` (a normal's X and Y, stored ``0.5 n + 0.5``). ``H`` and
        ``W`` must be multiples of 4.
    fmt:
        ``"bc1"``, ``"bc3"``, ``"bc4"``, ``"bc5"`` or ``"bc7"`` (case-insensitive).
    bc7_uber_level:
        bc7enc's search effort for ``bc7``, 0 (fastest) to 4 (best); ignored by other formats.

    Returns
    -------
    (decoded, compressed_bytes):
        the decoded image, float32 ``[H, W, C]`` (for ``bc1``, alpha is 1: see the module
        docstring), and the size of the compressed data, ``W * H * bpp / 8`` bytes.

    Raises
    ------
    ConfigError
        Unknown format, or ``bc7_uber_level`` outside 0-4.
    InputError
        Not a 3-D float array, wrong channel count for the format, a side that is not a multiple
        of 4, or NaN/inf values.
    """
    decoded, compressed = _roundtrip_blocks(image, fmt, bc7_uber_level)
    return decoded, len(compressed)


def _roundtrip_blocks(image: np.ndarray, fmt: str, bc7_uber_level: int) -> tuple[np.ndarray, bytes]:
    """:func:`bc_roundtrip`, returning the compressed blocks themselves."""
    fmt = _check_format(fmt)
    _check_uber(bc7_uber_level)
    image = _check_image(image, fmt)
    height, width, channels = image.shape
    compressed = _encode(_to_rgba8(image), fmt, bc7_uber_level)
    expected = width * height * BC_BITS_PER_PIXEL[fmt] // 8
    if len(compressed) != expected:  # an encoder that wrote the wrong amount must not pass silently
        raise RuntimeError(f"etcpak wrote {len(compressed)} bytes of {fmt} for {width}x{height}, expected {expected}")
    decoded = _decode(compressed, width, height, fmt)[..., :channels].astype(np.float32) / 255.0
    return decoded, compressed


def mip_chain_bytes(height: int, width: int, fmt: str) -> int:
    """Bytes of a ``fmt`` texture of ``width`` x ``height`` with its full mip chain, every level
    padded to whole 4x4 blocks (as :func:`bc_mip_chain_roundtrip` counts them)."""
    block = BC_BITS_PER_PIXEL[_check_format(fmt)] * BLOCK * BLOCK // 8
    total = 0
    while True:
        total += -(-height // BLOCK) * -(-width // BLOCK) * block
        if height == 1 and width == 1:
            return total
        height, width = max(1, height // 2), max(1, width // 2)


def pad_to_blocks(image: np.ndarray) -> np.ndarray:
    """``image`` ``[H, W, C]`` with its edge texels repeated up to whole 4x4 blocks."""
    height, width = image.shape[:2]
    pad_h, pad_w = (-height) % BLOCK, (-width) % BLOCK
    if pad_h == 0 and pad_w == 0:
        return image
    return np.pad(image, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")


def bc_mip_chain_roundtrip(levels: Sequence[np.ndarray], fmt: str, *, bc7_uber_level: int = 1) -> tuple[list[np.ndarray], list[int]]:
    """:func:`bc_roundtrip` every level of a mip chain, one level at a time.

    Levels whose sides are not multiples of 4 (the 2x2 and 1x1 tail of a chain, or odd sizes)
    are padded by repeating their edge texels up to whole 4x4 blocks, compressed, decoded and
    cropped back. The byte count of such a level is that of the padded blocks (a 2x2 or 1x1 mip
    is stored as one full block, as GPUs lay out compressed mips), so for the tail it is larger
    than ``W * H * bpp / 8``.

    Returns ``(decoded_levels, bytes_per_level)``, each decoded level float32 with the shape of
    its input.
    """
    decoded, blocks = bc_encode_mip_chain(levels, fmt, bc7_uber_level=bc7_uber_level)
    return decoded, [len(data) for data in blocks]


def bc_encode_mip_chain(
    levels: Sequence[np.ndarray], fmt: str, *, bc7_uber_level: int = 1, progress: Callable[[int], None] | None = None
) -> tuple[list[np.ndarray], list[bytes]]:
    """Compress every level of a mip chain to ``fmt``: ``(decoded_levels, blocks_per_level)``.

    The blocks of each level are what a GPU reads (row-major 4x4 blocks, the 2x2 and 1x1 tail
    padded to one block as :func:`bc_mip_chain_roundtrip` describes), ready for a container such as
    :mod:`neuralbake.io.dds`; the decoded levels are those blocks decoded again, cropped to each
    level's size. ``progress`` (if given) is called with 1 after each level.
    """
    if len(levels) == 0:
        raise InputError("the mip chain is empty.", field="levels", fix="pass at least one level.")
    fmt = _check_format(fmt)
    decoded_levels: list[np.ndarray] = []
    blocks: list[bytes] = []
    for index, level in enumerate(levels):
        if not isinstance(level, np.ndarray) or level.ndim != 3:
            shape = getattr(level, "shape", type(level).__name__)
            raise InputError(
                f"level {index} is not an [H, W, C] array (got {shape}).", field=f"levels[{index}]", fix="pass float arrays [H, W, C]."
            )
        height, width = level.shape[:2]
        if height == 0 or width == 0:
            raise InputError(f"level {index} is empty ({width}x{height}).", field=f"levels[{index}]", fix="drop empty levels.")
        decoded, data = _roundtrip_blocks(pad_to_blocks(level), fmt, bc7_uber_level)
        decoded_levels.append(decoded[:height, :width])
        blocks.append(data)
        if progress is not None:
            progress(1)
    return decoded_levels, blocks
