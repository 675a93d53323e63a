"""The neural material bake: a layered material becomes a latent texture plus a tiny decoder MLP.

After Zeltner et al. 2024, "Real-Time Neural Appearance Models": during training an *encoder* MLP
maps the material's per-texel inputs (every layer parameter and mask at ``uv``, see
``MaterialGraph.texel_inputs``) to a latent vector of ``latent`` channels, and a *decoder* MLP
maps ``(latent, wi, wo)`` (local shading frame, normal +z) to the cosine-weighted BSDF value
``f(wi, wo) cos(theta_i)``, RGB. Both train jointly with the shared trainer on random
``(uv, wi, wo)``: ``wo`` half cosine-distributed and half uniform over the hemisphere (more grazing
views than cosine alone gives, see ``uniform_views``), ``wi`` half cosine-distributed and half
drawn by the reference material's own sampler, so highlights are learned. The decoder predicts
``log(1 + f cos)``, which keeps HDR peaks from dominating, and the loss is L1 in that space
weighted to a relative error of ``f cos`` above 0.01 (:func:`relative_l1`), so that dim (grazing)
configurations are learned too; a shader undoes it with ``exp(y) - 1`` (clamped at 0).

After training, the encoder is run once per texel to bake the latent texture (``texture_size``
squared, with a mip pyramid whose lower levels come from the encoder applied to box-filtered
inputs, as the paper prescribes) and is then dropped: what ships is the latent texture (fp16, and
8-bit with a per-channel scale and offset) and the decoder in the network bundle format with its
packed device layouts.

Masks that depend on the world orientation (dust on up-facing areas) are baked for the surface
normal given in the config (default: facing up, +y), since a texture has no orientation of its
own, or, with ``asset``, for the world normal of the asset at each texel. A glTF asset's own
metal/rough material (its maps, the normal map included) is baked the same way from
:mod:`.asset`, and scored on renders of the asset.

The package, by concern: :mod:`.config` (settings, device defaults), :mod:`.model` (encoder and
decoder, reference sampler, loss, the baked material), :mod:`.latents` (latent pyramid, bundle
writing and reading), :mod:`.comparison` (scores and pictures), :mod:`.asset` (glTF assets:
their materials as references, renders of the asset), :mod:`.asset_scoring` (the bake scored on
the asset's renders), :mod:`.verdict` (NTC at the same bytes, and which tool fits an asset's
material), :mod:`.bake` (the bake on the runner, and several materials trained with one decoder)
and :mod:`.render` (``neuralbake material render``).
"""

from neuralbake.bakes.neural_material.bake import NEURAL_MATERIAL, bake_material, bake_materials_jointly, bake_neural_material
from neuralbake.bakes.neural_material.config import LATENT_CHANNELS, NeuralMaterialConfig
from neuralbake.bakes.neural_material.latents import BUNDLE_KIND, bake_latent_pyramid, load_neural_material, write_material_bundle
from neuralbake.bakes.neural_material.model import (
    DIRECTION_FEATURES,
    NeuralMaterial,
    NeuralMaterialLayer,
    NeuralMaterialModel,
    ReferenceSampler,
    decoder_inputs,
    relative_l1,
    texel_features,
)
from neuralbake.bakes.neural_material.render import render_neural_material
from neuralbake.bakes.neural_material.sampling import view_directions

__all__ = [
    "BUNDLE_KIND",
    "DIRECTION_FEATURES",
    "LATENT_CHANNELS",
    "NEURAL_MATERIAL",
    "NeuralMaterial",
    "NeuralMaterialConfig",
    "NeuralMaterialLayer",
    "NeuralMaterialModel",
    "ReferenceSampler",
    "bake_latent_pyramid",
    "bake_material",
    "bake_materials_jointly",
    "bake_neural_material",
    "decoder_inputs",
    "load_neural_material",
    "relative_l1",
    "render_neural_material",
    "texel_features",
    "view_directions",
    "write_material_bundle",
]
