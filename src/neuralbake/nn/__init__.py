"""Neural-shading building blocks: encodings, activations, MLPs, mixed precision, the shared trainer."""

from neuralbake.nn.activations import ACTIVATIONS, activation_fn, clamped_gelu
from neuralbake.nn.encoding import FrequencyEncoding, frequency_encode
from neuralbake.nn.mlp import MLP, CoordinateNetwork, CoordinateNetworkConfig, MLPConfig
from neuralbake.nn.precision import LossScaler, compute_dtype
from neuralbake.nn.schedule import learning_rate_at
from neuralbake.nn.serialize import load_coordinate_network, save_coordinate_network
from neuralbake.nn.trainer import Batch, Trainer, TrainerConfig, TrainingInterrupted, TrainResult

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "Batch",
    "CoordinateNetwork",
    "CoordinateNetworkConfig",
    "FrequencyEncoding",
    "LossScaler",
    "MLPConfig",
    "TrainResult",
    "Trainer",
    "TrainerConfig",
    "TrainingInterrupted",
    "activation_fn",
    "clamped_gelu",
    "compute_dtype",
    "frequency_encode",
    "learning_rate_at",
    "load_coordinate_network",
    "save_coordinate_network",
]
