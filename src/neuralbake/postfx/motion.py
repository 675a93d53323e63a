"""Motion between frames for an animation's render pass: Blender's Vector pass read as pixel offsets
(:func:`read_motion`) and the previous frame's picture carried along them (:func:`warp`), so each
frame's img2img start can lean on the output before it without smearing what moved."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from neuralbake.errors import InputError
from neuralbake.postfx.conditions import pick_channels, read_exr_channels

__all__ = ["read_motion", "warp"]


def read_motion(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """``[H, W, 2]`` pixel offsets (x right, y down) from each pixel to where it was in the previous frame."""
    found = pick_channels(read_exr_channels(path, field="motion"), [["Vector.X", "Vector.Y"], ["X", "Y"], ["R", "G"]])
    if found is None:
        raise InputError("the file has no motion channels (Vector.X/Y, X/Y or R/G).", path=path, field="motion",
                         fix="render with the Vector pass on (Blender: View Layer Properties > Passes > Data > Vector; motion blur off).")
    vector = np.nan_to_num(np.stack(found, -1).astype(np.float32))
    if vector.shape[:2] != shape:
        raise InputError(f"the motion pass is {vector.shape[1]}x{vector.shape[0]} but the render is {shape[1]}x{shape[0]}.", path=path, field="motion",
                         fix="render the Vector pass with the frame.")
    # Blender's pixel y runs up; image rows run down.
    vector[..., 1] = -vector[..., 1]
    return vector


def warp(image: np.ndarray, motion: np.ndarray) -> np.ndarray:
    """The previous frame's ``image`` moved to this frame: each pixel takes the previous frame's
    colour at ``pixel + motion`` (bilinear; edges clamped)."""
    height, width = image.shape[:2]
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    return cv2.remap(image.astype(np.float32), xs + motion[..., 0], ys + motion[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
