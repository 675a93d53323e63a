"""Devices, configs, events, metrics and reports shared by every bake."""

from neuralbake.core.config import config_from_dict, config_to_dict, field_docs, load_config, save_config
from neuralbake.core.device import describe_device, resolve_device, seed_everything, versions
from neuralbake.core.events import EventWriter, JsonlSink, ListSink, ProgressSink
from neuralbake.core.metrics import mse, psnr

__all__ = [
    "EventWriter",
    "JsonlSink",
    "ListSink",
    "ProgressSink",
    "config_from_dict",
    "config_to_dict",
    "describe_device",
    "field_docs",
    "load_config",
    "mse",
    "psnr",
    "resolve_device",
    "save_config",
    "seed_everything",
    "versions",
]
