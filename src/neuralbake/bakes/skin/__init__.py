"""Skin-weight fitting (``neuralbake skin``), seed 003's last LOD step: a simplified mesh gets the
original's skeleton and is weighted to deform like it.

1. **Transfer.** Each LOD vertex is bound to the closest point of the original's rest surface
   (Warp's BVH point query, or brute force in PyTorch without warp-lang) and takes that point's
   weights, interpolated barycentrically over the original triangle's vertices.
2. **Fit.** Over frames of the original's first clip (the rest pose always among them), the
   weights of each vertex's strongest candidate joints (``candidates``, softmax of learned logits:
   non-negative and normalised by construction) are fitted with Adam so that the skinned LOD
   vertices follow their bound points of the posed original, plus an image term (renders of LOD and
   original at orbit views and frames, silhouettes included).
3. **Prune** to ``influences`` joints (glTF's ``JOINTS_0`` holds four), renormalise, and report what
   pruning cost.

The report judges transferred against fitted weights on held-out frames (between the fitted ones):
the vertex error and the renders' PSNR; ``frames.png`` shows original | transferred | fitted at held-out
frames. ``lod.glb`` carries the original's skeleton, skin and clips. The seed initialises with a
graph network (SkinNet); no such network is trained or shipped here, so the weights start from the
transfer (recorded in the report).
"""

from neuralbake.bakes.skin.bake import SKIN, skin_lod
from neuralbake.bakes.skin.config import SkinConfig, device_defaults

__all__ = ["SKIN", "SkinConfig", "device_defaults", "skin_lod"]
