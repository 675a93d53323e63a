"""neuralbake: bake heavy graphics assets into compact ones that render fast.

Layered materials become neural materials, PBR-shaded meshes become LOD assets, texture sets become
neurally compressed textures; each bake is ``config -> sampler -> model -> trainer -> bundle +
report`` on PyTorch, from a laptop CPU to a GPU.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
