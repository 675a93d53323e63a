"""Multi-pass composition (seed 004): several diffusion passes over one render, each with its own
prompt, LoRA and strength, blended by the render's object or material masks.

The masks come from the index pass (:func:`neuralbake.postfx.conditions.id_masks`), so their edges
are the true silhouettes. Each mask is feathered (a Gaussian blur of ``feather`` pixels, OpenCV) so
that a pass fades into its neighbours over a few pixels instead of a hard seam, then the passes are
laid over the base in order: ``out = out * (1 - w) + pass * w`` with ``w`` the feathered mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neuralbake.errors import ConfigError

__all__ = ["compose", "feather", "pass_mask"]


def pass_mask(ids: np.ndarray, wanted: Sequence[int]) -> np.ndarray:
    """``[H, W]`` float mask of the pixels whose index is in ``wanted``."""
    if not wanted:
        raise ConfigError("a composition pass names no ids.", field="passes.ids", fix="list the object or material indexes the pass covers, e.g. ids = [2, 3].")
    return np.isin(ids, np.asarray(list(wanted), dtype=ids.dtype)).astype(np.float32)


def feather(mask: np.ndarray, radius: float) -> np.ndarray:
    """Soften a ``[H, W]`` mask in [0, 1] with a Gaussian of standard deviation ``radius`` pixels (0: as it is)."""
    if radius <= 0:
        return mask.astype(np.float32)
    import cv2

    return np.clip(cv2.GaussianBlur(mask.astype(np.float32), (0, 0), sigmaX=float(radius), borderType=cv2.BORDER_REPLICATE), 0.0, 1.0)


def compose(base: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]], *, radius: float = 0.0) -> np.ndarray:
    """Lay ``layers`` (``(image [H, W, 3], mask [H, W])`` in order) over ``base`` by their feathered masks."""
    out = base.astype(np.float32).copy()
    for index, (image, mask) in enumerate(layers):
        if image.shape != base.shape or mask.shape != base.shape[:2]:
            raise ValueError(f"layer {index}: image {image.shape} and mask {mask.shape} must match the base {base.shape}")
        weight = feather(mask, radius)[..., None]
        out = out * (1.0 - weight) + image.astype(np.float32) * weight
    return out
