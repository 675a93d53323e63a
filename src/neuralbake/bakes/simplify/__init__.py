"""Appearance-driven mesh simplification (seed 003's geometry half of the LOD pipeline).

So far: :mod:`~neuralbake.bakes.simplify.decimate`, QEM decimation (pymeshlab) that keeps
materials, uv seams, normals, colours and skins, steered by per-vertex weights.
"""

from neuralbake.bakes.simplify.decimate import Decimated, decimate_scene, triangle_budget

__all__ = ["Decimated", "decimate_scene", "triangle_budget"]
