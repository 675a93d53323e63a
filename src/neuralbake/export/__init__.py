"""Exporters that hand baked networks to engines: shader source evaluating a bundle's device layout."""

from neuralbake.export.neural_material import NeuralMaterialShaderExport, export_material_pack_shader, export_neural_material_shader
from neuralbake.export.slang import ShaderExport, export_bundle_shader, generate_mlp_hlsl, generate_mlp_slang

__all__ = [
    "NeuralMaterialShaderExport",
    "ShaderExport",
    "export_bundle_shader",
    "export_material_pack_shader",
    "export_neural_material_shader",
    "generate_mlp_hlsl",
    "generate_mlp_slang",
]
