"""Saving and loading networks as bundles (``neuralbake.io.bundle``) and rebuilding the modules."""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from neuralbake.errors import BundleError
from neuralbake.io.bundle import Bundle, check_mlp_tensors, read_bundle, write_bundle
from neuralbake.io.bundle_manifest import manifest_float, manifest_int, manifest_object, manifest_str
from neuralbake.nn.activations import ACTIVATIONS
from neuralbake.nn.mlp import CoordinateNetwork, CoordinateNetworkConfig

__all__ = ["COORDINATE_NETWORK_KIND", "coordinate_network_config", "load_coordinate_network", "save_coordinate_network"]

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
    """Read and verify a bundle written by :func:`save_coordinate_network` and rebuild the network.

    The manifest's ``config`` is checked field by field (types and ranges), and the weights'
    shapes against the network it describes, before the network is built
    (:func:`coordinate_network_config`).
    """
    bundle = read_bundle(directory, kind=COORDINATE_NETWORK_KIND)
    config = coordinate_network_config(bundle)
    try:
        network = CoordinateNetwork(config)
        network.load_state_dict(bundle.tensors, strict=True)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise BundleError(
            f"the weights do not fit the architecture in the manifest ({exc}).",
            path=bundle.manifest_path,
            field="config",
            fix="the weights and manifest come from different bakes; copy a matching pair.",
        ) from exc
    return network.to(device), bundle


def coordinate_network_config(bundle: Bundle) -> CoordinateNetworkConfig:
    """The checked network config of a coordinate-network bundle.

    ``config`` field by field (types, ranges, known activations), the weights' and device
    layouts' shapes against it, and the descriptive ``architecture`` (which shader exports read)
    against it. Raises BundleError naming the manifest and the field.
    """
    manifest_path = bundle.manifest_path
    raw = bundle.manifest.get("config")
    if not isinstance(raw, dict):
        raise BundleError("the manifest has no 'config' object.", path=manifest_path, field="config", fix="re-export the bundle.")
    known = {f.name for f in fields(CoordinateNetworkConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BundleError(f"unknown network settings {unknown}.", path=manifest_path, field="config", fix="use the neuralbake version that wrote it.")
    settings = dict(raw)
    for key, minimum in (("coordinates", 1), ("frequencies", 1), ("hidden", 1), ("layers", 0), ("outputs", 1)):
        if key in settings:
            settings[key] = manifest_int(settings[key], path=manifest_path, field=f"config.{key}", minimum=minimum)
    for key in ("hidden_activation", "output_activation"):
        if key in settings:
            manifest_str(settings[key], path=manifest_path, field=f"config.{key}", choices=sorted(ACTIVATIONS))
    if "leak" in settings:
        settings["leak"] = manifest_float(settings["leak"], path=manifest_path, field="config.leak")
    config = CoordinateNetworkConfig(**settings)
    if config.frequencies > MAX_FREQUENCIES:
        raise BundleError(
            f"{config.frequencies} frequency octaves; at most {MAX_FREQUENCIES} are meaningful in float32.",
            path=manifest_path,
            field="config.frequencies",
            fix="re-export the bundle.",
        )
    mlp = config.mlp_config()
    check_mlp_tensors(bundle, prefix="mlp.", inputs=mlp.inputs, hidden=mlp.hidden, layers=mlp.layers, outputs=mlp.outputs, field="config")
    _check_architecture(bundle.manifest.get("architecture"), config, manifest_path)
    return config


MAX_FREQUENCIES = 24
"""Most frequency octaves a loaded network may have (``2^k pi x`` loses every bit of ``x`` in float32 well before)."""


def _check_architecture(architecture: Any, config: CoordinateNetworkConfig, manifest_path: Path) -> None:
    """The manifest's descriptive ``architecture`` (which shader exports read) must agree with ``config``."""
    if architecture is None:
        return
    architecture = manifest_object(architecture, path=manifest_path, field="architecture")
    expected = {
        "inputs": config.mlp_config().inputs,
        "hidden": config.hidden,
        "hidden_layers": config.layers,
        "outputs": config.outputs,
        "hidden_activation": config.hidden_activation,
        "output_activation": config.output_activation,
    }
    if "leak" in architecture and manifest_float(architecture["leak"], path=manifest_path, field="architecture.leak") != config.leak:
        expected["leak"] = config.leak
    for key, value in expected.items():
        if key in architecture and architecture[key] != value:
            raise BundleError(
                f"is {architecture[key]!r} but the network's config says {value!r}.",
                path=manifest_path,
                field=f"architecture.{key}",
                fix="the manifest was edited; re-export the bundle.",
            )
