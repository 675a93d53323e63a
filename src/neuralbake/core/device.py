"""Choosing the compute device and describing the machine a result was made on."""

from __future__ import annotations

import platform
import random
from typing import Any

import numpy as np
import torch

from neuralbake.errors import ConfigError
from neuralbake.io import limits
from neuralbake.version import __version__

__all__ = ["describe_device", "device_memory_bytes", "resolve_device", "seed_everything", "versions"]


def resolve_device(name: str) -> torch.device:
    """Turn ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` into a usable :class:`torch.device`.

    ``auto`` picks CUDA when a GPU is present, else the CPU.

    Raises
    ------
    ConfigError
        If CUDA is asked for but no GPU is visible, or the name is not a device.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"{name!r} is not a device.", field="device", fix="use auto, cpu, cuda or cuda:N.") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "CUDA was requested but PyTorch sees no GPU here.",
                field="device",
                fix="use --device cpu, or install a CUDA build of PyTorch on a machine with an NVIDIA GPU.",
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"{name} does not exist; this machine has {torch.cuda.device_count()} GPU(s).", field="device", fix="use cuda:0."
            )
    elif device.type != "cpu":
        raise ConfigError(f"device type {device.type!r} is not supported.", field="device", fix="use auto, cpu or cuda.")
    return device


def device_memory_bytes(device: torch.device) -> int | None:
    """Memory a bake on ``device`` can still have: the GPU's free memory, or the host's available
    memory on a CPU; ``None`` if unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return limits.available_memory_bytes()  # looked up on the module: tests stand in a smaller machine there


def describe_device(device: torch.device) -> dict[str, Any]:
    """Name and size of the device, for reports."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "type": "cuda",
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
        }
    return {
        "type": "cpu",
        "name": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }


def versions() -> dict[str, str]:
    """Versions of neuralbake and of the libraries that shape its numbers."""
    info = {
        "neuralbake": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    if torch.version.cuda:
        info["cuda"] = torch.version.cuda
    return info


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
