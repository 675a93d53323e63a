"""What is learned: the encoder/decoder model, the reference sampler, the loss, and the baked material.

During training an *encoder* MLP maps the material's per-texel inputs (every layer parameter and
mask at ``uv``, see ``MaterialGraph.texel_inputs``) to a latent vector of ``latent`` channels, and
a *decoder* MLP maps ``(latent, wi, wo)`` (local shading frame, normal +z) to the cosine-weighted
BSDF value ``f(wi, wo) cos(theta_i)``, RGB, predicted as ``log(1 + f cos)``. After training only
the decoder ships, with the latent texture (:class:`NeuralMaterial`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from neuralbake.bakes.neural_material.sampling import proxy_pdf, proxy_sample, view_directions
from neuralbake.errors import ConfigError, TrainingError
from neuralbake.io.neural_material_bundle import DIRECTION_INPUTS, MAX_PROBES, DecoderInputLayout, InputSegment, decoder_input_layout
from neuralbake.material.frame import cosine_hemisphere_pdf, square_to_cosine_hemisphere
from neuralbake.material.texture import sample_texture
from neuralbake.nn.activations import activation_fn
from neuralbake.nn.mlp import MLP, MLPConfig
from neuralbake.nn.trainer import Batch

if TYPE_CHECKING:
    from neuralbake.bakes.neural_material.config import NeuralMaterialConfig

__all__ = [
    "tensor_kernel_reference",
    "DIRECTION_FEATURES",
    "NeuralMaterial",
    "NeuralMaterialLayer",
    "NeuralMaterialModel",
    "ReferenceSampler",
    "assemble_inputs",
    "decoder_inputs",
    "directions_above",
    "footprint_probes",
    "lod_from_derivatives",
    "relative_l1",
    "texel_features",
]

def _direction_feature(segment: InputSegment, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
    """One direction segment of the decoder's inputs, by its encoding (local frame, normal +z)."""
    if segment.encoding == "halfway":
        return F.normalize(wi + wo, dim=1, eps=1e-8)
    if segment.encoding == "identity":
        return {"wi": wi, "wo": wo}[segment.name]
    raise ValueError(f"no PyTorch encoding {segment.encoding!r} for direction input {segment.name!r}")


DIRECTION_FEATURES = {
    segment.name: (lambda wi, wo, segment=segment: _direction_feature(segment, wi, wo)) for segment in decoder_input_layout(0, DIRECTION_INPUTS).directions
}
"""Direction features a decoder can read after its latent (local frame, normal +z), by name."""


def assemble_inputs(layout: DecoderInputLayout, latent: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
    """The decoder's input rows, segment by segment as ``layout`` places them."""
    pieces = [latent if segment.source == "latent" else _direction_feature(segment, wi, wo).to(latent.dtype) for segment in layout.segments]
    order = sorted(range(len(pieces)), key=lambda index: layout.segments[index].offset)
    return torch.cat([pieces[index] for index in order], dim=1)


def decoder_inputs(latent: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor, direction_inputs: tuple[str, ...] | list[str]) -> torch.Tensor:
    """The decoder's input rows: ``[latent, feature(wi, wo) for each named direction feature]``
    (:func:`neuralbake.io.neural_material_bundle.decoder_input_layout`, which the shader export reads too)."""
    return assemble_inputs(decoder_input_layout(int(latent.shape[1]), direction_inputs), latent, wi, wo)


def lod_from_derivatives(duv_dx: torch.Tensor, duv_dy: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Level of detail ``[N]`` of pixel footprints: uv derivatives ``[N, 2]`` along the screen axes, level 0 ``size`` (width, height).

    ``log2`` of the longer footprint axis in level-0 texels (isotropic, as GPUs choose a mip level);
    the exported shader's ``nb_<m>_lod`` is the same formula. Negative under magnification (the
    fetch clamps it to level 0).
    """
    along_x, along_y = _texel_lengths(duv_dx, duv_dy, size)
    return torch.log2(torch.maximum(along_x, along_y).clamp(min=1e-8))


def _texel_lengths(duv_dx: torch.Tensor, duv_dy: torch.Tensor, size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Lengths ``[N]`` of the two uv derivative vectors in level-0 texels (``size`` is (width, height))."""
    scale = torch.tensor([float(size[0]), float(size[1])], dtype=torch.float32, device=duv_dx.device)
    return (duv_dx.float() * scale).norm(dim=1), (duv_dy.float() * scale).norm(dim=1)




def footprint_probes(
    duv_dx: torch.Tensor, duv_dy: torch.Tensor, size: tuple[int, int], max_probes: int = MAX_PROBES
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Anisotropic footprint: ``(lod [N], probes [N], axis [N, 2])``.

    The longer of the two derivative vectors (in level-0 texels) is the major axis; ``probes =
    min(ceil(major / minor), max_probes)`` trilinear fetches spaced along it, each at ``lod =
    log2(major / probes)``, cover the footprint; their mean is the filtered latent
    (:meth:`NeuralMaterial.latent_footprint`). One probe at the isotropic level when the footprint
    is round. The exported shader's ``nb_<m>_latent_footprint`` is the same.
    """
    along_x, along_y = _texel_lengths(duv_dx, duv_dy, size)
    x_major = along_x >= along_y
    major = torch.where(x_major, along_x, along_y)
    minor = torch.where(x_major, along_y, along_x)
    # NaN derivatives (a degenerate footprint) take one probe, so the result is NaN there, not an error
    probes = torch.nan_to_num(torch.clamp(torch.ceil(major / minor.clamp(min=1e-8)), 1.0, float(max_probes)), nan=1.0)
    lod = torch.log2((major / probes).clamp(min=1e-8))
    axis = torch.where(x_major[:, None], duv_dx.float(), duv_dy.float())
    return lod, probes, axis


def texel_features(material: Any, uv: torch.Tensor, normal: torch.Tensor) -> torch.Tensor:
    """Every per-texel input of a compiled material at ``uv``: ``[N, K]``."""
    return material.layer_and_inputs(uv, normal)[1]


class NeuralMaterialModel(torch.nn.Module):
    """Encoder (texel inputs -> latent) and decoder (latent, wi, wo -> log(1 + f cos)), trained jointly.

    ``forward(inputs [N, K + 6])`` takes the texel inputs followed by ``wi`` and ``wo`` and returns
    the decoder's ``[N, 3]`` prediction of ``log(1 + f cos)``.
    """

    capturable = True
    """Its forward and backward never read the host, so on a GPU the trainer replays the whole step as one CUDA graph,
    fed each batch from the reference sampler (which stays outside: the material graph syncs)."""

    def __init__(self, features: int, config: NeuralMaterialConfig) -> None:
        super().__init__()
        self.features = features
        self.latent = config.latent
        relu_linear = {"hidden_activation": "relu", "output_activation": "none"}
        self.encoder = MLP(MLPConfig(inputs=features, hidden=config.encoder_hidden, layers=config.encoder_layers, outputs=config.latent, **relu_linear))
        self.direction_inputs = tuple(config.direction_inputs)
        inputs = decoder_input_layout(config.latent, self.direction_inputs).width
        self.decoder = MLP(MLPConfig(inputs=inputs, hidden=config.decoder_hidden, layers=config.decoder_layers, outputs=3, **relu_linear))

    def share_decoder(self, decoder: MLP, layers: int) -> None:
        """Start from ``decoder``'s weights and freeze its first ``layers`` layers.

        The frozen weights become buffers, so the trainer (which optimises ``named_parameters``)
        leaves them alone while checkpoints and the bundle still carry them under the same names.
        """
        if decoder.config != self.decoder.config:
            raise ConfigError(
                f"the shared decoder's architecture {decoder.config} differs from this bake's {self.decoder.config}.",
                field="shared_decoder",
                fix="bake with the same --latent, decoder size and direction inputs as the shared bundle.",
            )
        self.decoder.load_state_dict(decoder.state_dict())
        for layer in self.decoder.layers[:layers]:
            for name in ("weight", "bias"):
                value = getattr(layer, name).detach().clone()
                delattr(layer, name)
                layer.register_buffer(name, value)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        latent = self.encoder(inputs[:, : self.features])
        wi, wo = inputs[:, self.features : self.features + 3], inputs[:, self.features + 3 :]
        return self.decoder(decoder_inputs(latent.to(inputs.dtype), wi, wo, self.direction_inputs))


def directions_above(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return square_to_cosine_hemisphere(torch.rand(n, 2, generator=generator, device=device))


REFERENCE_CHUNK = {"cuda": 1 << 22, "cpu": 1 << 18}
"""Reference samples per evaluation of the material graph by device type, when the config leaves it to the device.

The graph is about ten thousand elementwise launches whatever the chunk; at 2^20 samples on an H200 (2026-11-29)
each op ran about 2.3 us on the GPU, less than its launch took on the host, so the host set the pace: the graph
took about two thirds of a 10,000-step bake once the step was a CUDA graph. At 2^22 the GPU's own work exceeds the
launches. 2^22 samples keep about 3 GB (inputs, targets and the graph's temporaries)."""


class ReferenceSampler:
    """Training batches from the reference material: inputs ``[texel inputs, wi, wo]``, targets ``log(1 + f cos)``.

    A layered material's node graph is thousands of small tensor operations (hashed noise octaves,
    masks, lobes); launched once per training step they, not the networks, set the pace. So the
    sampler evaluates ``chunk`` independent samples in one call and serves ``batch_size`` of them per
    step until the chunk is used up. The samples are the same i.i.d. draws as one call per step
    would give; only their grouping into graph evaluations differs.
    """

    capturable = False  # the material graph syncs with the host (noise tables, masks)

    def __init__(
        self,
        material: Any,
        normal: torch.Tensor,
        batch_size: int,
        material_sampling: float,
        device: torch.device,
        *,
        chunk: int = 0,
        uniform_views: float = 0.0,
    ) -> None:
        self.material, self.normal, self.batch_size = material, normal, batch_size
        self.material_sampling, self.device, self.uniform_views = material_sampling, device, uniform_views
        per_chunk = chunk or REFERENCE_CHUNK.get(device.type, REFERENCE_CHUNK["cpu"])
        self.batches_per_chunk = max(1, per_chunk // batch_size)
        self._inputs: torch.Tensor | None = None
        self._targets: torch.Tensor | None = None
        self._next = 0

    def draw(self, n: int, generator: torch.Generator) -> Batch:
        """``n`` fresh reference samples in one evaluation of the material graph."""
        # an asset's material draws uv over the area its triangles cover; a layered material over the unit square
        sample_uv = getattr(self.material, "sample_uv", None)
        uv = sample_uv(n, generator) if sample_uv is not None else torch.rand(n, 2, generator=generator, device=self.device)
        normal = self.normal.expand(n, 3)
        wo = view_directions(n, self.uniform_views, generator, self.device)
        with torch.no_grad():
            bsdf, features = self.material.layer_and_inputs(uv, normal)
            wi_material, pdf = bsdf.sample(wo, torch.rand(n, 2, generator=generator, device=self.device))
            wi_cosine = directions_above(n, generator, self.device)
            use_material = (torch.rand(n, generator=generator, device=self.device) < self.material_sampling) & (pdf > 0)
            wi = torch.where(use_material[:, None], wi_material, wi_cosine)
            value = bsdf.eval(wi, wo)
        if not torch.isfinite(value).all():
            bad = (~torch.isfinite(value)).any(dim=1).nonzero()[0, 0]
            raise TrainingError(
                f"the reference material gave a non-finite value at uv={uv[bad].tolist()}, wi={wi[bad].tolist()}, wo={wo[bad].tolist()}.",
                field="material",
                fix="check the material's parameters and node graph at that uv.",
            )
        return Batch(inputs=torch.cat([features, wi, wo], dim=1), targets=torch.log1p(value.clamp(min=0.0)))

    def sample(self, generator: torch.Generator) -> Batch:
        if self._inputs is None or self._next == self.batches_per_chunk:
            chunk = self.draw(self.batch_size * self.batches_per_chunk, generator)
            self._inputs = chunk.inputs.reshape(self.batches_per_chunk, self.batch_size, -1)
            self._targets = chunk.targets.reshape(self.batches_per_chunk, self.batch_size, -1)
            self._next = 0
        assert self._targets is not None
        batch = Batch(inputs=self._inputs[self._next], targets=self._targets[self._next])
        self._next += 1
        return batch


RELATIVE_LOSS_FLOOR = 0.01
"""``f cos`` below which :func:`relative_l1` weighs absolute rather than relative errors."""


def relative_l1(prediction: torch.Tensor, target: torch.Tensor, floor: float = RELATIVE_LOSS_FLOOR) -> torch.Tensor:
    """The training loss: L1 in the decoder's ``log(1 + f cos)`` space, weighted to a relative error.

    ``log1p`` is linear below 1, so a plain L1 there weighs a dim sample's error absolutely: at a
    grazing light and view (``f cos ~ 0.005``) a factor-of-two, colour-shifting error costs almost
    nothing, and the texture view that shows it was at 10 dB. A change ``d`` of ``y = log(1 + x)``
    is a change ``(1 + x) d`` of ``x``, so the weight ``floor (1 + x) / (x + floor)`` (``x`` the
    target's ``f cos``) makes each term ``floor |dx| / (x + floor)``: relative above ``floor``,
    absolute below it, and exactly the old L1 for ``x = 0``. The gradient still flows for every
    prediction (the weights depend on the target only).
    """
    x = torch.expm1(target)
    weight = floor * (1.0 + x) / (x + floor)
    return torch.mean(weight * (prediction - target).abs())


# -- the baked, shippable material -----------------------------------------------------------------


class NeuralMaterial:
    """A baked neural material: latent mip pyramid + decoder. ``material(uv, normal) -> NeuralMaterialLayer``."""

    def __init__(self, latents: list[torch.Tensor], decoder: MLP, direction_inputs: tuple[str, ...] | list[str] = ("wi", "wo")) -> None:
        self.latents = latents
        self.decoder = decoder
        self.direction_inputs = tuple(direction_inputs)

    sampler: Any = None
    """The importance-sampling head (:class:`~neuralbake.bakes.neural_material.sampling.SamplingHead`), or ``None``: cosine sampling."""

    kernels = "torch"
    """Which decode runs: ``torch`` (this class, the reference) or ``triton`` (the fused kernel of
    :class:`neuralbake.kernels.fused.FusedNeuralMaterial`); set from a bake's resolved ``--kernels``."""

    @property
    def decode_kernel(self) -> str:
        """Which kernel has decoded: ``torch``, or the fused decode's ``triton`` or ``gluon``
        (:attr:`neuralbake.kernels.fused.FusedNeuralMaterial.kernel`; ``triton`` until its first decode)."""
        if self.kernels != "triton":
            return "torch"
        fused = getattr(self, "_fused", None)
        return "triton" if fused is None else fused.kernel

    def latent_at(self, uv: torch.Tensor, level: int = 0) -> torch.Tensor:
        """Bilinear (repeat-wrapped) latent lookup at ``uv`` from mip ``level``: ``[N, latent]``."""
        return sample_texture(self.latents[level], uv, wrap="repeat")

    def latent_footprint(self, uv: torch.Tensor, duv_dx: torch.Tensor, duv_dy: torch.Tensor, max_probes: int = MAX_PROBES) -> torch.Tensor:
        """Anisotropically filtered latent ``[N, latent]`` over pixel footprints given by uv derivatives (see :func:`footprint_probes`)."""
        level0 = self.latents[0]
        dtype = torch.promote_types(level0.dtype, torch.float32)  # fp32 at least; float64 latents stay float64 (gradient checks)
        lod, probes, axis = footprint_probes(duv_dx, duv_dy, (int(level0.shape[1]), int(level0.shape[0])), max_probes)
        total = torch.zeros(uv.shape[0], level0.shape[2], dtype=dtype, device=uv.device)
        for index in range(int(probes.max()) if probes.numel() else 0):
            used = (index < probes).to(dtype)
            offset = ((index + 0.5) / probes - 0.5)[:, None] * axis
            total = total + used[:, None] * self.latent_filtered(uv.to(dtype) + offset.to(dtype), lod)
        return total / probes[:, None].to(dtype)

    def latent_filtered(self, uv: torch.Tensor, lod: torch.Tensor) -> torch.Tensor:
        """Trilinear latent lookup: bilinear in the two levels around ``lod`` ``[N]`` (clamped to the pyramid), blended linearly."""
        dtype = torch.promote_types(self.latents[0].dtype, torch.float32)
        lod = lod.to(dtype).clamp(0.0, len(self.latents) - 1.0)
        out = torch.zeros(uv.shape[0], self.latents[0].shape[2], dtype=dtype, device=uv.device)
        for level in range(len(self.latents)):
            weight = torch.clamp(1.0 - (lod - level).abs(), min=0.0)
            out = out + weight[:, None] * self.latent_at(uv, level).to(dtype)
        return out

    def decode(self, uv: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor, lod: torch.Tensor | None = None) -> torch.Tensor:
        """``f(wi, wo) cos`` ``[N, 3]`` at ``uv``: latent fetch (bilinear, or trilinear at ``lod``) and decoder, on the ``kernels`` path."""
        if self.kernels == "triton":
            if getattr(self, "_fused", None) is None:
                from neuralbake.kernels.decoders import FusedNeuralMaterial  # needs triton, an optional dependency

                self._fused = FusedNeuralMaterial(self)
            return self._fused(uv, wi, wo, lod)
        latent = self.latent_at(uv) if lod is None else self.latent_filtered(uv, lod)
        return self.evaluate(latent, wi, wo)

    def evaluate(self, latent: torch.Tensor, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        """``f(wi, wo) cos`` from latents and local directions, ``[N, 3]``."""
        dtype = next(self.decoder.parameters()).dtype
        y = self.decoder(decoder_inputs(latent.float(), wi.float(), wo.float(), self.direction_inputs).to(dtype)).float()
        valid = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).float()[:, None]
        return torch.expm1(torch.clamp(y, min=0.0)) * valid

    filtering = False
    """Filter the latents over each sample's pixel footprint when a renderer gives one (``footprint``:
    anisotropic, up to :data:`MAX_PROBES` trilinear probes, :meth:`latent_footprint`); else level 0."""
    @property
    def takes_footprint(self) -> bool:
        """Renderers pass ``footprint=(duv_dx, duv_dy)`` when this is true (see :func:`neuralbake.render.preview.render_preview`): while filtering."""
        return self.filtering

    def __call__(
        self, uv: torch.Tensor, normal: torch.Tensor | None = None, footprint: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> NeuralMaterialLayer:
        layer = NeuralMaterialLayer(self, uv)
        if self.filtering and footprint is not None:
            layer.filtered_latent = self.latent_footprint(uv, footprint[0], footprint[1])
        return layer

    def to(self, dtype: torch.dtype) -> NeuralMaterial:
        """A copy whose decoder and latents run in ``dtype`` (e.g. fp16, as a shader would)."""
        decoder = MLP(self.decoder.config).to(next(self.decoder.parameters()).device)
        decoder.load_state_dict(self.decoder.state_dict())
        copy = NeuralMaterial([latent.to(dtype).float() for latent in self.latents], decoder.to(dtype), self.direction_inputs)
        copy.kernels = self.kernels
        copy.filtering = self.filtering
        copy.sampler = self.sampler
        return copy


class NeuralMaterialLayer:
    """The :class:`~neuralbake.material.layering.Layer` interface over a neural material.

    ``eval`` is the decoder; ``sample``/``pdf`` are the material's sampling head's proxy lobe where it
    has one (:mod:`~neuralbake.bakes.neural_material.sampling`), else cosine-weighted (any density
    is valid for an unbiased estimate). A renderer that samples this layer uses them; the comparison
    renders sample both images with the reference material's sampler.
    """

    def __init__(self, material: NeuralMaterial, uv: torch.Tensor) -> None:
        self.material, self.uv = material, uv
        self._latent: torch.Tensor | None = None
        self.filtered_latent: torch.Tensor | None = None
        """Set by a filtering material: the footprint-filtered latent, used instead of level 0."""

    @property
    def latent(self) -> torch.Tensor:
        """The latent at the layer's ``uv``: the filtered one if set, else bilinear from level 0 (fetched once, on first use)."""
        if self.filtered_latent is not None:
            return self.filtered_latent
        if self._latent is None:
            self._latent = self.material.latent_at(self.uv)
        return self._latent

    def eval(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        if self.material.kernels == "triton" and self.filtered_latent is None:
            return self.material.decode(self.uv, wi, wo)
        return self.material.evaluate(self.latent, wi, wo)

    def _lobe(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The sampling head's proxy lobe at this layer's latents (computed once), or ``None`` without a head."""
        if self.material.sampler is None:
            return None
        if getattr(self, "_proxy", None) is None:
            with torch.no_grad():
                self._proxy = self.material.sampler(self.latent.float())
        return self._proxy

    def sample(self, wo: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lobe = self._lobe()
        if lobe is not None:
            wi, pdf = proxy_sample(*lobe, wo.float(), u.float())
            return wi.to(wo.dtype), pdf.to(wo.dtype)
        wi = square_to_cosine_hemisphere(u)
        return wi, cosine_hemisphere_pdf(wi) * (wo[:, 2] > 0)

    def pdf(self, wi: torch.Tensor, wo: torch.Tensor) -> torch.Tensor:
        lobe = self._lobe()
        if lobe is not None:
            return proxy_pdf(*lobe, wi.float(), wo.float()).to(wi.dtype)
        return cosine_hemisphere_pdf(wi) * (wo[:, 2] > 0)


def tensor_kernel_reference(material: Any, latent: Any, wi: Any, wo: Any) -> Any:
    """PyTorch model of the kernel's arithmetic: ``f cos`` ``[N, 3]`` for a ``NeuralMaterial``'s latents and directions.

    Inputs and every hidden activation rounded to fp16, weights rounded to fp16, products summed
    in fp32, biases added in fp32 (as stored: pass a material whose decoder holds the exported
    precision's values). The kernel differs from it only in summation order.
    """
    config = material.decoder.config
    layers = list(material.decoder.layers)
    x = decoder_inputs(latent.float(), wi.float(), wo.float(), material.direction_inputs).half().float()
    hidden = activation_fn(config.hidden_activation, config.leak)
    output = activation_fn(config.output_activation, config.leak)
    for index, layer in enumerate(layers):
        y = x @ layer.weight.detach().half().float().T + layer.bias.detach().float()
        x = hidden(y).half().float() if index < len(layers) - 1 else output(y)
    valid = ((wi[:, 2] > 0) & (wo[:, 2] > 0)).float()[:, None]
    return torch.clamp(torch.exp(x) - 1.0, min=0.0) * valid
