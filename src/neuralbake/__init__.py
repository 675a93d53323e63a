"""neuralbake: bake heavy graphics assets into compact ones that render fast.

Layered materials become neural materials, PBR-shaded meshes become LOD assets, texture sets become
neurally compressed textures; each bake is ``config -> sampler -> model -> trainer -> bundle +
report`` on PyTorch, from a laptop CPU to a GPU.
"""

from __future__ import annotations

from neuralbake.version import __version__

__all__ = ["__version__"]
