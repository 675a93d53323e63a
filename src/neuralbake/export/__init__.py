"""Exporters that hand baked networks to engines: shader source evaluating a bundle's device layout."""

from neuralbake.export.slang import ShaderExport, export_bundle_shader, generate_mlp_hlsl, generate_mlp_slang

__all__ = ["ShaderExport", "export_bundle_shader", "generate_mlp_hlsl", "generate_mlp_slang"]
