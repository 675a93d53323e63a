"""File formats: images, network bundles, crash-safe writes."""

from neuralbake.io.bundle import Bundle, LayerTensors, read_bundle, read_device_layout, write_bundle
from neuralbake.io.images import ImageInfo, load_image, resize_image, save_png

__all__ = [
    "Bundle",
    "ImageInfo",
    "LayerTensors",
    "load_image",
    "read_bundle",
    "read_device_layout",
    "resize_image",
    "save_png",
    "write_bundle",
]
