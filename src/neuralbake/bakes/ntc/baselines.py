"""Block-compression baselines for NTC: every group's mip chain round-tripped through BC1 and BC7 (BC5 for normals).

The codecs are :mod:`neuralbake.io.bcn` (etcpak + texture2ddecoder); bits per texel count every
mip level, 4x4-block padded tails included, as the NTC file's do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from neuralbake.bakes.ntc.decode import set_quality
from neuralbake.bakes.ntc.texture_set import ChannelGroup
from neuralbake.io.bcn import bc_mip_chain_roundtrip

__all__ = ["bc_baselines"]


def _bc_format(group: ChannelGroup, family: str) -> str:
    channels = len(group.channels)
    if channels == 2:
        return "bc5"
    if family == "bc1" and channels == 4:
        return "bc7"  # etcpak's BC1 stores no alpha; an RGBA texture would ship as BC7 (or BC3)
    return family


def bc_baselines(
    reference_levels: Sequence[np.ndarray],
    groups: Sequence[ChannelGroup],
    width: int,
    height: int,
    *,
    bc7_uber_level: int = 1,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Round-trip every group's mip chain through BC1 and BC7 (BC5 for two-channel groups, e.g. normal XY).

    One-channel groups are replicated to RGB. Returns per family the measured bpp (all mip levels'
    compressed bytes, 4x4-padded tails included, per texel of mip 0), the bytes (``group_bytes``)
    and format of each group, the decoded chain and its quality (:func:`set_quality`).
    ``progress`` (if given) is called with 1 after each group's round trip (``2 * len(groups)``
    calls in all).
    """
    results: dict[str, Any] = {}
    for family in ("bc1", "bc7"):
        decoded_groups, group_bytes, formats = [], {}, {}
        start = 0
        for group in groups:
            stop = start + len(group.channels)
            chain = [level[..., start:stop] for level in reference_levels]
            if len(group.channels) == 1:
                chain = [np.repeat(level, 3, axis=2) for level in chain]
            fmt = _bc_format(group, family)
            decoded, sizes = bc_mip_chain_roundtrip(chain, fmt, bc7_uber_level=bc7_uber_level)
            decoded_groups.append([level[..., : stop - start] for level in decoded])
            group_bytes[group.name] = sum(sizes)
            formats[group.name] = fmt
            start = stop
            if progress is not None:
                progress(1)
        levels = [np.concatenate([g[i] for g in decoded_groups], axis=2) for i in range(len(reference_levels))]
        total_bytes = sum(group_bytes.values())
        results[family] = {
            "bytes": total_bytes,
            "group_bytes": group_bytes,
            "bpp": round(8.0 * total_bytes / (width * height), 4),
            "formats": formats,
            "quality": set_quality(levels, reference_levels, groups),
            "levels": levels,
        }
    return results
