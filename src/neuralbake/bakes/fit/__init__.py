"""PBR-to-LOD fitting (``neuralbake fit``): the view-dependent look of a glTF PBR asset fitted into
cheap unlit storage -- one texture in a non-overlapping uv1 atlas, per-vertex colours, or
luminance in uv0 times chrominance in uv1 -- by gradient descent through the deferred renderer.

How a fit runs (the Mythal approach of the GDC talk in the seeds):

* **Reference.** A fixed, deterministic light scene (one directional light, optionally the
  procedural sky as an importance-sampled environment with a fixed Sobol seed) renders the PBR
  asset from a pool of training views (a Fibonacci orbit) and from held-out views (a seeded random
  orbit). Images are compared in *display space*: ``tone_map(hdr, display_tone_map,
  exposure)`` -- tone-mapped, sRGB encoded -- which is what a player sees.
* **LOD image.** The stored values (texels or vertex colours) are read through the *same*
  G-buffer (visibility is not differentiable; gradients flow to texels and vertex colours only),
  exactly as a glTF viewer would: sRGB texels are decoded to linear, filtered (trilinear mips,
  clamp-to-edge), the unlit output written to an sRGB framebuffer; vertex colours (``COLOR_0``,
  linear) are interpolated. With ``tonemap="fit"`` the stored values are LDR codes that a shader
  decodes with a fitted *inverse tone map* (the seed's first- or second-order rational forms) into
  HDR radiance, which is then display-tone-mapped like the reference.
* **Optimisation.** Adam over the stored values (projected back to [0, 1] after each step) and
  the tone-map parameters; each step renders one random training view (``views_per_step``);
  an **epoch is one pass over the training-view pool** in a fresh random order. The stored values
  are initialised by splatting the reference pixels onto their nearest texel / vertex (the
  "brute-force bake" of the seed), so the gradient steps only have to add the view dependence.
* **Quantisation.** ``quantize=8`` trains through 8-bit rounding of the stored values, either
  with the straight-through estimator (forward rounds, backward is the identity) or with a soft
  quantiser (a tanh staircase whose sharpness is annealed to hard rounding); the written values
  are exact 8-bit codes in both cases.
* **Artist weights.** ``weights`` is a greyscale mask in the asset's **uv0 texture space** (so a
  painted region stays put as the camera moves; a screen-space mask would not survive random
  views): each pixel's loss weight is ``1 + (weight_max - 1) * mask(uv0)``. ``warm_start`` starts
  from a previous fit's checkpoint (same asset, target and sizes) instead of the splat: with a
  newly painted mask, the fit goes on from where it stood. Run with ``previews=True`` (the
  service does), the fit publishes a live triptych every epoch and its first held-out views with
  their uv0 buffers (``paint_view`` events), on which the service's web UI lets an artist paint
  the mask (:mod:`neuralbake.service.paint`, :mod:`neuralbake.render.paint`).

Trained on the shared :class:`~neuralbake.nn.trainer.Trainer` (phase ``fit``, fp32): a batch is a set
of training views, the fit brings its own forward/backward (a view's loss runs over its hit pixels),
projects the stored values after every step and follows the step with the soft quantiser's
temperature (:mod:`~neuralbake.bakes.fit.training`); so it checkpoints, resumes bit-identically
(``--resume``), stops cleanly on Ctrl-C or SIGTERM and guards against NaN like every bake.

Outputs in ``out_dir`` (through :mod:`neuralbake.bakes.run`): ``lod.gltf`` (+ ``.bin``, PNGs; ``KHR_materials_unlit``, uv1 and/or
``COLOR_0``), ``triptych.png`` (reference | LOD | error heat map, every held-out view),
``loss.png``, ``report.json``, ``config.json``, ``events.jsonl``, ``bake.json``; luma-chroma also writes
``luma_uv0.png`` and ``chroma_uv1.png`` (glTF core cannot multiply two textures, so ``lod.gltf``
carries their product baked into uv1 for standard viewers); a tone-map fit writes ``codes*.png``
(the LDR codes a custom shader decodes) and ``tonemap.json`` (the fitted curve).

The package: :mod:`~neuralbake.bakes.fit.config` (settings, device defaults),
:mod:`~neuralbake.bakes.fit.views` (light scene, orbits, reference renders),
:mod:`~neuralbake.bakes.fit.model` (the stored values, initialisation, loss, evaluation),
:mod:`~neuralbake.bakes.fit.training` (sampler, forward/backward), :mod:`~neuralbake.bakes.fit.outputs`
(glTF, textures, triptych) and :mod:`~neuralbake.bakes.fit.bake` (the body and :data:`FIT`). The uv
atlas and texture-space rasteriser live in :mod:`neuralbake.render.uv_raster`.
"""

from neuralbake.bakes.fit.bake import FIT, fit_lod
from neuralbake.bakes.fit.config import FIT_TARGETS, MAX_VIEWS, FitConfig, device_defaults
from neuralbake.bakes.fit.views import estimated_view_bytes

__all__ = ["FIT", "FIT_TARGETS", "MAX_VIEWS", "FitConfig", "device_defaults", "estimated_view_bytes", "fit_lod"]
