"""The fused kernels' tiles and launch helpers, in one place that the launching modules read at every use.

:data:`TILES` holds each kernel kind's rows and warps per program; the launching modules
(:mod:`~neuralbake.kernels.packing`, :mod:`~neuralbake.kernels.decoders`, :mod:`~neuralbake.kernels.training`) read it
as ``tuning.TILES`` at every launch, so a benchmark sweep sets it here. Each table's docstring says what measurement
chose its values.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator

import torch


def pad_width(n: int, dtype: torch.dtype, minimum: int | None = None) -> int:
    """The kernels' width for ``n``: a power of two, at least ``minimum``; by default 16 (``tl.dot``'s smallest depth),
    32 for int8 (the int8 MMA's depth)."""
    if minimum is None:
        minimum = 32 if dtype == torch.int8 else 16
    return max(minimum, 1 << (int(n) - 1).bit_length())


TILES: dict[str, tuple[int, int]] = {
    "forward": (128, 2),
    "forward_wide": (64, 2),
    "trilinear": (128, 4),
    "trilinear_wide": (64, 2),
    "ntc": (128, 4),
    "ntc_wide": (32, 1),
    "train": (64, 4),
    "train_wide": (32, 2),
}
"""``(rows per program, warps per program)`` by kernel kind; ``_wide`` for hidden layers over 64.

Every launch compiles with Hopper's warpgroup MMA turned off (:func:`mma_sync`), so ``tl.dot``
is ``mma.sync`` whatever the warp count: Triton 3.6's warpgroup code for these kernels crashed
(compute-sanitizer: invalid shared-memory reads, out-of-range local addresses) or gave wrong values
in about half of the tile shapes tried with 4 or more warps (a fused MLP, the neural-material and
NTC decodes). The sizes are the fastest of sweeps on an H100 and H200s (bench/kernels.py --sweep;
tests/kernels/test_gpu_parity.py checks them); with ``mma.sync`` at any warp count the NTC decode and the
training step gained from 4 warps (2026-11-26, H200: 3.2 against 2.9 G texels/s, 485 against 321 M
training samples/s at 2^18 rows). ``trilinear`` is the neural-material decode with a level per sample
(two sets of bilinear taps): on an H100 (2026-11-26, ``--sweep trilinear``, 2^22 samples) it ran 10.2 G samples/s
at 128 x 4 against 8.5 at the bilinear decode's 128 x 2. ``trilinear_wide`` is
``forward_wide``'s tile, not swept (``--sweep trilinear`` sets the narrow key).
"""


CARRY_REGISTERS = 128
"""The most registers a thread the weight and bias gradients may take by :func:`carries_gradients`'s estimate (their fp32 values
over the program's threads). The estimate leaves out the working registers, the hoisted weights and the bias
accumulators' padding to 16 rows, so every carried kernel measured sits at the 255-register cap with some spills,
and was still as fast as the slots or faster (see docs/dev/benchmarks-diary.md)."""



def tile_key(kind: str, hidden: int) -> str:
    """The key of :data:`TILES` for a kernel kind and hidden width."""
    return f"{kind}_wide" if hidden > 64 else kind


def launch_options(kind: str, hidden: int) -> dict[str, int]:
    """Triton's launch options of a kernel kind: its warps (:data:`TILES`). The decodes are latency-bound at 12-19 %
    occupancy, limited by registers (Nsight Compute, H200, 2026-11-26), but register caps of 80-168 a thread moved the
    rates by no more than the machine-to-machine spread (about 10 %), so none is set."""
    return {"num_warps": TILES[tile_key(kind, hidden)][1]}


_MMA_LOCK = threading.Lock()


@contextlib.contextmanager
def mma_sync() -> Iterator[None]:
    """Compile the kernels launched inside with ``mma.sync`` only (Triton's ``DISABLE_MMA_V3``).

    Triton reads the variable when it compiles a kernel, and its on-disk cache is keyed on it; its
    in-memory cache of a process is not, so every launch of a ``tl.dot`` kernel in this module goes
    through here (a kernel first compiled outside would be reused inside). The variable is set only
    around these launches, and a lock keeps two of them from interleaving their set and restore.
    Other Triton code, such as ``torch.compile``'s GEMMs, keeps the warpgroup MMA, except a compile
    that happens on another thread during one of these launches: it sees the variable too (only a
    speed difference, never a wrong result).
    """
    with _MMA_LOCK:
        previous = os.environ.get("DISABLE_MMA_V3")
        os.environ["DISABLE_MMA_V3"] = "1"
        try:
            yield
        finally:
            if previous is None:
                del os.environ["DISABLE_MMA_V3"]
            else:
                os.environ["DISABLE_MMA_V3"] = previous


def wide_addresses(*element_counts: int) -> bool:
    """Whether a kernel must compute addresses in int64 (some buffer reaches 2^31 elements); int32 is faster."""
    return max(element_counts) >= 1 << 31


def nvidia_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of an NVIDIA GPU (None on a CPU or a ROCm GPU: the Gluon kernels' gates read it)."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" and torch.version.hip is None else None


def sm_count(device: torch.device) -> int:
    """The SMs of a CUDA GPU (1 elsewhere: a Gluon kernel on Triton's CPU interpreter runs one program at a time)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def gluon_failed(exc: Exception, work: str, fallback: str) -> str:
    """Why a Gluon kernel cannot run here after ``exc`` (a Triton that cannot compile or launch it), warned once for
    ``work``, which takes ``fallback`` from then on."""
    first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
    reason = f"the Gluon kernel failed here ({type(exc).__name__}: {first_line})"
    warnings.warn(f"{work}: {reason}; using {fallback}", RuntimeWarning, stacklevel=3)
    return reason


def block_rows(kind: str, hidden: int) -> int:
    """Rows per program of a kernel kind (:data:`TILES`)."""
    return TILES[tile_key(kind, hidden)][0]

