"""Saving and loading networks as bundles (``neuralbake.io.bundle``) and rebuilding the modules."""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import BundleError
from neuralbake.io.bundle import Bundle, read_bundle, write_bundle
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig

__all__ = ["COORDINATE_NETWORK_KIND", "load_coordinate_network", "save_coordinate_network"]

COORDINATE_NETWORK_KIND = "coordinate_network"


def save_coordinate_network(
    directory: str | Path,
    network: CoordinateNetwork,
    *,
    training_precision: str,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``network`` as a bundle (weights, device layouts, manifest); returns the manifest path."""
    config = network.config
    mlp_config = network.mlp.config
    metadata = {
        "architecture": {
            "type": "mlp",
            "inputs": mlp_config.inputs,
            "hidden": mlp_config.hidden,
            "hidden_layers": mlp_config.layers,
            "outputs": mlp_config.outputs,
            "hidden_activation": mlp_config.hidden_activation,
            "output_activation": mlp_config.output_activation,
            "leak": mlp_config.leak,
            "parameters": network.parameter_count(),
        },
        "encoding": {
            "type": "frequency",
            "coordinates": config.coordinates,
            "frequencies": config.frequencies,
            "outputs": network.encoding.output_dim,
            "formula": "per coordinate x, for k in 0..frequencies-1: sin(2^k*pi*x), cos(2^k*pi*x)",
        },
        "precision": {"training": training_precision, "master_weights": "fp32", "stored": "fp32"},
        "config": asdict(config),
        **(extra or {}),
    }
    return write_bundle(
        directory,
        network.state_dict(),
        kind=COORDINATE_NETWORK_KIND,
        metadata=metadata,
        layers=network.mlp.linear_layers(prefix="mlp."),
    )


def load_coordinate_network(directory: str | Path, *, device: torch.device | str = "cpu") -> tuple[CoordinateNetwork, Bundle]:
    """Read and verify a bundle written by :func:`save_coordinate_network` and rebuild the network."""
    bundle = read_bundle(directory, kind=COORDINATE_NETWORK_KIND)
    manifest_path = Path(directory) / "network.json"
    raw = bundle.manifest.get("config")
    if not isinstance(raw, dict):
        raise BundleError("the manifest has no 'config' object.", path=manifest_path, field="config", fix="re-export the bundle.")
    known = {f.name for f in fields(CoordinateNetworkConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BundleError(f"unknown network settings {unknown}.", path=manifest_path, field="config", fix="use the neuralbake version that wrote it.")
    try:
        network = CoordinateNetwork(CoordinateNetworkConfig(**raw))
        network.load_state_dict(bundle.tensors, strict=True)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise BundleError(
            f"the weights do not fit the architecture in the manifest ({exc}).",
            path=manifest_path,
            field="config",
            fix="the weights and manifest come from different bakes; copy a matching pair.",
        ) from exc
    return network.to(device), bundle
