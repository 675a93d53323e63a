"""Material preview rendering: a sphere and a flat tile under a directional light and an HDR
environment (importance sampled, combined with BSDF sampling by MIS), written as linear EXR and
tone-mapped PNG. :func:`render_preview` renders, :func:`write_preview` writes; the environment
map, its sampler and the EXR/HDR readers live in :mod:`~neuralbake.render.envmap`, the display
transform in :mod:`~neuralbake.render.tonemap`.
"""

from neuralbake.render.envmap import (
    LUMINANCE_WEIGHTS,
    EnvironmentLight,
    as_environment_map,
    default_environment,
    direction_to_equirect,
    equirect_to_direction,
    load_environment,
    read_exr,
)
from neuralbake.render.preview import BACKGROUND_GREY, LIGHTS, SCENES, Material, PreviewImages, render_preview, write_preview
from neuralbake.render.tonemap import tone_map, tone_map_aces_fitted, tone_map_reinhard

__all__ = [
    "BACKGROUND_GREY",
    "LIGHTS",
    "LUMINANCE_WEIGHTS",
    "SCENES",
    "EnvironmentLight",
    "Material",
    "PreviewImages",
    "as_environment_map",
    "default_environment",
    "direction_to_equirect",
    "equirect_to_direction",
    "load_environment",
    "read_exr",
    "render_preview",
    "tone_map",
    "tone_map_aces_fitted",
    "tone_map_reinhard",
    "write_preview",
]
