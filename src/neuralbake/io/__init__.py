"""File formats: images, network bundles, MaterialX documents, crash-safe writes."""

from neuralbake.io.bundle import Bundle, read_bundle, read_device_layout, write_bundle
from neuralbake.io.device_layout import LayerTensors
from neuralbake.io.images import ImageInfo, load_image, resize_image, save_png
from neuralbake.io.materialx import MaterialXDocument, load_materialx, require_supported, surface_parameters, unsupported_nodes

__all__ = [
    "Bundle",
    "ImageInfo",
    "LayerTensors",
    "MaterialXDocument",
    "load_image",
    "load_materialx",
    "read_bundle",
    "read_device_layout",
    "require_supported",
    "resize_image",
    "save_png",
    "surface_parameters",
    "unsupported_nodes",
    "write_bundle",
]
