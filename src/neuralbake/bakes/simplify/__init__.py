"""Appearance-driven mesh simplification (``neuralbake simplify``), seed 003's geometry half of the
LOD pipeline: QEM decimation that keeps materials, uv charts and normals
(:mod:`~neuralbake.bakes.simplify.decimate`, MeshLab through pymeshlab), optionally run a second
time with the vertices weighted up where the first result's renders differ from the original's
(``image_guidance``), then the decimated shape fitted to renders of the original over an orbit of
views with the large-steps parametrisation and backtracking (:mod:`~neuralbake.bakes.simplify.shape`).
Artists protect regions by material name or with a uv0 mask. The report judges QEM alone against
the fitted LOD on held-out views (PSNR, FLIP) at the same budget and lists the LOD's high-error
regions; ``triptych.png`` shows original | QEM | fitted LOD | error.

Outputs in ``out_dir`` (through :mod:`neuralbake.bakes.run`): ``lod.glb`` (one binary glTF with the
original's materials and textures), ``triptych.png``, ``report.json``, ``config.json``,
``events.jsonl``, ``bake.json``. Skinned assets are refused for now (a static copy would lose the
animation); their decimation already keeps skins (:func:`decimate_scene`).
"""

from neuralbake.bakes.simplify.bake import SIMPLIFY, simplify_lod
from neuralbake.bakes.simplify.config import SimplifyConfig, device_defaults
from neuralbake.bakes.simplify.decimate import Decimated, decimate_scene, triangle_budget

__all__ = ["SIMPLIFY", "Decimated", "SimplifyConfig", "decimate_scene", "device_defaults", "simplify_lod", "triangle_budget"]
