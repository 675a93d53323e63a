"""Small fully connected networks for shading: the MLP and the frequency-encoded coordinate network.

These are the networks that run inline in shaders: a few hidden layers of 16-128 neurons. The
forward pass runs in whatever dtype the weights have (fp32 masters, or the fp16/bf16 copies the
trainer makes), so mixed precision needs no separate model class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import nn

from neuralbake.io.device_layout import LayerTensors
from neuralbake.nn.activations import ACTIVATIONS, DEFAULT_LEAK, activation_fn
from neuralbake.nn.encoding import FrequencyEncoding

__all__ = ["MLP", "CoordinateNetwork", "CoordinateNetworkConfig", "LayerShape", "MLPConfig", "register_mlp_kernels"]


def _check_activation(name: str, field: str) -> None:
    if name not in ACTIVATIONS:
        raise ValueError(f"{field}: unknown activation {name!r}; choose one of {sorted(ACTIVATIONS)}")


MLPRunner = Callable[[torch.Tensor], torch.Tensor]

_MLP_KERNELS: dict[str, Callable[[MLP], MLPRunner]] = {}


def register_mlp_kernels(name: str, build: Callable[[MLP], MLPRunner]) -> None:
    """Let ``MLP.kernels = name`` run an MLP's forward (and, through autograd, its backward) as ``build(mlp)(x)``.

    :mod:`neuralbake.kernels` registers its fused kernels as ``"triton"`` when it is imported: this layer sits below
    the kernels, so the MLP names them only through this table. Registering a name again replaces its builder.
    """
    _MLP_KERNELS[name] = build


MAX_LAYERS = 64
"""Most hidden layers a network may have (shader networks have 2-5; the bound keeps a config's
arithmetic and its memory estimate finite before anything is built)."""


@dataclass(kw_only=True)
class LayerShape:
    """Hidden layers, outputs and activations: what every MLP-based network config shares.

    Keyword-only, like the configs built on it, so a field added here cannot shift positional
    arguments.
    """

    hidden: int = 64
    """Neurons per hidden layer."""
    layers: int = 4
    """Number of hidden layers (the network has ``layers + 1`` linear transforms)."""
    outputs: int = 3
    """Number of output values (3 for RGB, 4 for RGBA, 1 for grey; bakes set it from the data)."""
    hidden_activation: str = "leaky_relu"
    """Activation after every hidden layer: relu, leaky_relu, tanh, exp, sigmoid, clamped_gelu or none."""
    output_activation: str = "sigmoid"
    """Activation on the output layer (sigmoid keeps colours in [0, 1]; none for HDR or latents)."""
    leak: float = DEFAULT_LEAK
    """Negative slope of leaky_relu."""

    def layer_shape(self) -> dict[str, int | float | str]:
        """The shared fields as keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(LayerShape)}


@dataclass(kw_only=True)
class MLPConfig(LayerShape):
    """Shape of a multilayer perceptron."""

    inputs: int = 12
    """Number of input values (after any encoding)."""

    def widths(self) -> list[int]:
        """Every layer's width in evaluation order: inputs, the hidden layers, outputs."""
        return [self.inputs] + [self.hidden] * self.layers + [self.outputs]

    def validate(self) -> None:
        for name in ("inputs", "hidden", "outputs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.layers <= MAX_LAYERS:
            raise ValueError(f"layers must be in [0, {MAX_LAYERS}], got {self.layers}")
        _check_activation(self.hidden_activation, "hidden_activation")
        _check_activation(self.output_activation, "output_activation")


class MLP(nn.Module):
    """``inputs -> [hidden] x layers -> outputs`` with per-layer activations.

    Input shape ``[..., inputs]``, output ``[..., outputs]``, computed in the weights' dtype.
    """

    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        widths = config.widths()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self._hidden_act = activation_fn(config.hidden_activation, config.leak)
        self._output_act = activation_fn(config.output_activation, config.leak)
        self.kernels = "torch"
        """``"torch"``: PyTorch's layers. Another name runs forward and backward through what
        :func:`register_mlp_kernels` registered under it (``"triton"``: the fused kernels'
        :class:`neuralbake.kernels.training.FusedMLP`); set from a bake's resolved ``--kernels``."""
        self.runner: MLPRunner | None = None
        """The kernels' forward for :attr:`kernels`, built at the first forward that needs it (None: not yet)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels != "torch":
            if self.runner is None:
                build = _MLP_KERNELS.get(self.kernels)
                if build is None:
                    known = ", ".join(["torch", *sorted(_MLP_KERNELS)])
                    raise ValueError(f"MLP.kernels is {self.kernels!r}; registered: {known} (import neuralbake.kernels for triton)")
                self.runner = build(self)
            return self.runner(x)
        x = x.to(self.layers[0].weight.dtype)
        for layer in self.layers[:-1]:
            x = self._hidden_act(layer(x))
        return self._output_act(self.layers[-1](x))

    def parameter_count(self) -> int:
        """Number of trainable scalars (weights and biases)."""
        return sum(p.numel() for p in self.parameters())

    def linear_layers(self, prefix: str = "") -> list[LayerTensors]:
        """The linear layers in evaluation order, for packing into a device layout."""
        return [LayerTensors(f"{prefix}layers.{i}", layer.weight, layer.bias) for i, layer in enumerate(self.layers)]


@dataclass(kw_only=True)
class CoordinateNetworkConfig(LayerShape):
    """A frequency-encoded MLP mapping coordinates (e.g. UV) to values (e.g. RGB)."""

    coordinates: int = 2
    """Number of input coordinates (2 for UV)."""
    frequencies: int = 3
    """Frequency octaves per coordinate; each gives sin and cos, so the MLP sees coordinates x 2 x frequencies inputs (2 x 6 = 12 for UV at 3)."""

    def mlp_config(self) -> MLPConfig:
        return MLPConfig(inputs=self.coordinates * 2 * self.frequencies, **self.layer_shape())


class CoordinateNetwork(nn.Module):
    """Frequency encoding followed by an MLP.

    Input ``[..., coordinates]`` (float32; encoded in float32, then cast to the weight dtype),
    output ``[..., outputs]`` in the weight dtype.
    """

    def __init__(self, config: CoordinateNetworkConfig) -> None:
        super().__init__()
        self.config = config
        self.encoding = FrequencyEncoding(config.coordinates, config.frequencies)
        self.mlp = MLP(config.mlp_config())

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.encoding(coords))

    def parameter_count(self) -> int:
        return self.mlp.parameter_count()
