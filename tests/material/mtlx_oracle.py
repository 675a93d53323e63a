"""MaterialX's own generated shader code as the oracle for neuralbake's MaterialX compiler.

For one material of a ``.mtlx`` document this module generates MaterialX's reference pixel shader
(Slang, with the pinned MaterialX Python package), turns it into a compute kernel, runs it on
slangpy's CPU device at sampled shading points and direction pairs, evaluates neuralbake's
:func:`~neuralbake.material.mtlx_compiler.compile_materialx` at the same samples, and compares
``BSDF * cos(theta_i)`` (see :func:`compare`). No library does this: MaterialX's own test suite
renders images on a GPU with a full viewer (MaterialXView / MaterialXRender), and slangpy knows
nothing of MaterialX. So the glue is written here, by hand, and kept small.

How the generated code is run (:func:`oracle_source`): the pixel stage is generated with a
complete uniform interface, no specular environment and one bound directional light; the
``cbuffer`` becomes static globals initialised with the document's values (read from the
generator's uniform blocks); ``fragmentMain`` becomes a plain function; ``fwidth`` (no derivatives
in compute) returns 0, which only the subsurface approximation reads; a compute entry point sets,
for each sample, the normal to +z, the tangent to +x, position and texcoord to the sample's, the
view position to ``P + wo`` and light 0 to a unit-intensity white directional light arriving
from ``wi``. The generated light loop returns ``intensity * response``, and every MaterialX BSDF's
``response`` already holds the ``cos(theta_i)`` factor (``NdotL`` cancelled in the microfacet
lobes, ``NdotL / pi`` in the diffuse one), with no further factor of pi: so the colour it writes
is ``f cos_i`` as our ``Layer.eval`` returns it. The environment and emission terms are zero (no
environment, emission refused on our side). The CPU device compiles Slang to C++ and builds it
with the host C++ compiler (``g++``); :func:`oracle_available` says why not when it cannot.

Known differences (why the agreement is not exact; the tolerances in
``tests/material/test_materialx_oracle.py`` are set from them):

* **Multiple-scattering energy compensation.** MaterialX multiplies every GGX lobe by
  ``1 + F (1 - E_ss) / E_ss`` (Turquin 2019) with ``E_ss`` from a rational fit
  (``mx_ggx_dir_albedo_analytic``); our lobes are single-scattering. Ours is darker for rough
  metals (up to ~30 % at roughness 1) and agrees for smooth ones.
* **Masking-shadowing.** MaterialX uses the height-correlated Smith ``G2`` with the isotropic
  ``sqrt(alpha_x alpha_y)``; ours the separable ``G1(wi) G1(wo)`` with the anisotropic alphas.
  The separable form is darker at grazing angles (a few per cent, more when rough).
* **Layering by albedo scaling.** MaterialX's ``layer`` scales the base by the top lobe's
  throughput ``1 - E(cos_o)`` only, with ``E`` from the same fit times the compensation; ours by
  ``(1 - E(cos_i)) (1 - E(cos_o))`` from an integrated table (reciprocal, see
  :mod:`~neuralbake.material.layering`). Differs most for the diffuse under a specular or coat
  layer at grazing ``wi``.
* **Weights below 1** (specular, coat, sheen, metalness): MaterialX scales the lobe and its
  albedo; ours mixes whole layers linearly (:func:`~neuralbake.material.layering.mix`).
  Identical for weights 0 and 1; the specular weight of a dielectric differs most.
* **Sheen.** Standard Surface: MaterialX uses the Imageworks (Charlie) distribution with the
  roughness as its ``r`` directly, Neubelt's ``1 / (4 (cos_i + cos_o - cos_i cos_o))`` in place
  of a visibility term, a fitted albedo and a scalar throughput ``1 - w E(cos_o)``; ours uses
  glTF's sheen (``alpha = roughness^2``, Estevez-Kulla's fitted visibility) and scales the base
  by ``1 - w max(colour) E`` on both directions. OpenPBR's fuzz in MaterialX is Zeltner et al.'s
  LTC sheen, a different lobe shape altogether. Sheen examples get the widest tolerances.
* **Coat colour.** MaterialX multiplies everything under the coat by ``lerp(1, coat_color,
  coat)``; ours is a Beer-Lambert absorption that equals ``coat_color`` at normal incidence and
  darkens towards grazing angles.
* **Coat and specular roughness.** Both follow the MaterialX graphs; equal.
* **Fresnel** of dielectric and conductor (with Gulbrandsen's artistic IOR): equal formulas.

Refused examples (transmission, thin film, emission, ...) are reported as refused with our
compiler's message; examples with image files are skipped (the generated code would need the
images bound as textures).
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from neuralbake.errors import InputError
from neuralbake.material.mtlx_compiler import compile_materialx

try:
    import MaterialX as mx
    import MaterialX.PyMaterialXGenShader as mx_gen_shader
    import MaterialX.PyMaterialXGenSlang as mx_gen_slang
except ImportError:  # pragma: no cover - MaterialX is a dependency of neuralbake
    mx = None
try:
    import slangpy
except ImportError:  # pragma: no cover - slangpy is a dev dependency
    slangpy = None

__all__ = [
    "FLOOR",
    "MIRROR_EXCLUSION",
    "Agreement",
    "OracleRun",
    "Samples",
    "agreement",
    "compare",
    "evaluate_ours",
    "oracle_available",
    "oracle_source",
    "run_oracle",
    "sample_set",
]

FLOOR = 0.01
"""Smallest denominator of the relative error, in units of ``f cos_i`` (a grey Lambert surface of
albedo 0.06 seen from above): below it an absolute difference of ``FLOOR`` reads as 100 %."""

_VERTEX_FIELDS = {
    "SV_Position": "float4(0.0)",
    "normalWorld": "float3(0.0, 0.0, 1.0)",
    "normalObject": "float3(0.0, 0.0, 1.0)",
    "tangentWorld": "float3(1.0, 0.0, 0.0)",
    "tangentObject": "float3(1.0, 0.0, 0.0)",
    "bitangentWorld": "float3(0.0, 1.0, 0.0)",
    "bitangentObject": "float3(0.0, 1.0, 0.0)",
    "positionWorld": "p",
    "positionObject": "p",
    "texcoord_0": "uv",
}
_VALUE_TYPES = {"float": ("float", 1), "vector2": ("float2", 2), "vector3": ("float3", 3), "color3": ("float3", 3)}
_VALUE_TYPES |= {"vector4": ("float4", 4), "color4": ("float4", 4)}


def oracle_available() -> str | None:
    """``None`` if the oracle can run here, else the reason it cannot (for ``pytest.skip``)."""
    if mx is None:
        return "MaterialX is not installed (pip install MaterialX==1.39.5)"
    if slangpy is None:
        return "slangpy is not installed (pip install slangpy==0.43.1); it runs MaterialX's generated code"
    if shutil.which("g++") is None and shutil.which("clang++") is None:
        return "no host C++ compiler (g++ or clang++): slangpy's CPU device builds the generated code with it (apt-get install g++)"
    return None


# --- MaterialX's generated code as a compute kernel ---------------------------------------------


def _shader_literal(type_name: str, value: object, where: str) -> str:
    if type_name == "boolean":
        return "true" if value else "false"
    if type_name == "integer":
        return str(int(value))
    if type_name not in _VALUE_TYPES:
        raise InputError(f"the generated shader has a uniform of type {type_name}.", path=where, fix="use an example without it.")
    slang_type, count = _VALUE_TYPES[type_name]
    numbers = [float(value)] if count == 1 else [float(x) for x in value]
    return f"{slang_type}({', '.join(repr(x) for x in numbers)})"


def _generate(path: Path) -> tuple[str, dict[str, str]]:
    """MaterialX's pixel stage for the document's first renderable material, and its uniforms' initialisers."""
    document = mx.createDocument()
    mx.readFromXmlFile(document, str(path))
    library = mx.createDocument()
    mx.loadLibraries(mx.getDefaultDataLibraryFolders(), mx.getDefaultDataSearchPath(), library)
    document.setDataLibrary(library)
    valid, message = document.validate()
    if not valid:
        raise InputError(f"MaterialX does not validate the document: {message}", path=path, fix="fix the document.")
    elements = mx_gen_shader.findRenderableElements(document)
    if not elements:
        raise InputError("MaterialX finds no renderable material.", path=path, fix="add a surfacematerial.")
    generator = mx_gen_slang.SlangShaderGenerator.create()
    context = mx_gen_shader.GenContext(generator)
    context.registerSourceCodeSearchPath(mx.getDefaultDataSearchPath())
    options = context.getOptions()
    options.shaderInterfaceType = mx_gen_shader.ShaderInterfaceType.SHADER_INTERFACE_COMPLETE
    options.hwSpecularEnvironmentMethod = mx_gen_shader.HwSpecularEnvironmentMethod.SPECULAR_ENVIRONMENT_NONE
    options.hwMaxActiveLightSources = 1
    # The HW generators emit a light loop only over bound light types; 1 is the type id set below.
    mx_gen_slang.SlangShaderGenerator.bindLightShader(library.getNodeDef("ND_directional_light"), 1, context)
    shader = generator.generate("oracle", elements[0], context)
    stage = shader.getStage(mx_gen_shader.PIXEL_STAGE)
    initialisers: dict[str, str] = {}
    for block in stage.getUniformBlocks().values():
        for i in range(block.size()):
            port = block[i]
            value = port.getValue()
            type_name = port.getType().getName()
            if type_name in ("filename", "string"):
                raise InputError(
                    f"the material reads a file ({port.getPath()}).",
                    path=path,
                    fix="the oracle binds no textures; compare a material without images.",
                )
            if value is not None:
                initialisers[port.getVariable()] = _shader_literal(type_name, value.getData(), str(path))
    return shader.getSourceCode(mx_gen_shader.PIXEL_STAGE), initialisers


def _static_globals(block: str, initialisers: dict[str, str]) -> str:
    lines = []
    for line in block.splitlines():
        match = re.match(r"\s*uniform\s+(\w+)\s+(\w+)(\[\w+\])?\s*;", line)
        if match:
            kind, name, array = match.groups()
            value = f" = {initialisers[name]}" if name in initialisers and not array else ""
            lines.append(f"static {kind} {name}{array or ''}{value};")
    return "\n".join(lines)


def oracle_source(path: str | Path) -> str:
    """MaterialX's generated Slang for the document at ``path``, patched into the compute kernel ``oracle_main``.

    ``oracle_main`` reads 11 floats a sample from ``oracle_inputs`` (``wi``, ``wo``, ``uv``,
    position) and writes ``f cos_i`` (RGB) to ``oracle_outputs``; ``oracle_count`` samples.
    """
    path = Path(path)
    source, initialisers = _generate(path)
    source = re.sub(r"cbuffer\s+\w+\s*\{(.*?)\n\}", lambda m: _static_globals(m.group(1), initialisers), source, flags=re.S)
    source = source.replace('[shader("fragment")]', "").replace(") : SV_Target", ")")
    if "static bool u_refractionTwoSided" not in source:
        source = "static bool u_refractionTwoSided = false;\n" + source
    fields = re.search(r"struct VertexData\s*\{(.*?)\}", source, flags=re.S)
    names = re.findall(r"\w+\s+(\w+)\s*:", fields.group(1)) if fields else []
    unknown = [n for n in names if n not in _VERTEX_FIELDS]
    if unknown:
        problem = f"the generated shader reads vertex data {unknown} the oracle does not set."
        raise InputError(problem, path=path, fix="extend _VERTEX_FIELDS.")
    assignments = "\n".join(f"    v.{name} = {_VERTEX_FIELDS[name]};" for name in names)
    return f"""#define fwidth(x) (0.0 * (x))
{source}
StructuredBuffer<float> oracle_inputs;
RWStructuredBuffer<float> oracle_outputs;
uniform uint oracle_count;

[shader("compute")]
[numthreads(32, 1, 1)]
void oracle_main(uint3 thread : SV_DispatchThreadID)
{{
    uint i = thread.x;
    if (i >= oracle_count)
        return;
    float3 wi = float3(oracle_inputs[11 * i], oracle_inputs[11 * i + 1], oracle_inputs[11 * i + 2]);
    float3 wo = float3(oracle_inputs[11 * i + 3], oracle_inputs[11 * i + 4], oracle_inputs[11 * i + 5]);
    float2 uv = float2(oracle_inputs[11 * i + 6], oracle_inputs[11 * i + 7]);
    float3 p = float3(oracle_inputs[11 * i + 8], oracle_inputs[11 * i + 9], oracle_inputs[11 * i + 10]);
    VertexData v;
{assignments}
    u_viewPosition = p + wo;
    u_numActiveLightSources = 1;
    u_lightData[0].type = 1;
    u_lightData[0].direction = -wi;
    u_lightData[0].color = float3(1.0);
    u_lightData[0].intensity = 1.0;
    float4 colour = fragmentMain(v);
    oracle_outputs[3 * i] = colour.x;
    oracle_outputs[3 * i + 1] = colour.y;
    oracle_outputs[3 * i + 2] = colour.z;
}}
"""


_devices: dict[str, object] = {}
_module_count = [0]


def run_oracle(source: str, inputs: np.ndarray) -> np.ndarray:
    """Dispatch :func:`oracle_source`'s kernel over ``inputs`` ``[N, 11]`` on slangpy's CPU device; ``[N, 3]`` float32."""
    if "cpu" not in _devices:
        _devices["cpu"] = slangpy.create_device(type=slangpy.DeviceType.cpu)
    device = _devices["cpu"]
    _module_count[0] += 1
    module = device.load_module_from_source(f"mtlx_oracle_{_module_count[0]}", source)
    kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point("oracle_main")]))
    n = inputs.shape[0]
    data = np.ascontiguousarray(inputs, dtype=np.float32).reshape(-1)
    input_buffer = device.create_buffer(data=data, struct_size=4, usage=slangpy.BufferUsage.shader_resource)
    output_buffer = device.create_buffer(
        data=np.full(3 * n, np.nan, dtype=np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access
    )
    kernel.dispatch(thread_count=[n, 1, 1], vars={"oracle_inputs": input_buffer, "oracle_outputs": output_buffer, "oracle_count": n})
    return output_buffer.to_numpy().view(np.float32).reshape(n, 3)


# --- samples and the comparison -----------------------------------------------------------------


@dataclass(frozen=True)
class Samples:
    """``points`` shading points, each seen from one ``wo`` and lit from the same number ``per_point`` of ``wi``.

    Tensors are float32 with ``N = points * per_point`` rows, grouped by point: ``wi``, ``wo``
    ``[N, 3]`` (local frame, normal +z), ``uv`` ``[N, 2]``, ``position`` ``[N, 3]``, ``weight``
    ``[N]``: ``sum(f cos_i * weight)`` over a point's rows estimates its directional albedo (the
    "hemisphere sum"), as the multi-sample balance-heuristic estimator of :func:`sample_set`'s
    mixture.
    """

    wi: torch.Tensor
    wo: torch.Tensor
    uv: torch.Tensor
    position: torch.Tensor
    weight: torch.Tensor
    points: int
    per_point: int

    def packed(self) -> np.ndarray:
        """The ``[N, 11]`` rows :func:`run_oracle` reads."""
        return torch.cat((self.wi, self.wo, self.uv, self.position), dim=1).numpy()


def _uniform_hemisphere(u: torch.Tensor, min_cos: float) -> torch.Tensor:
    z = min_cos + (1.0 - min_cos) * u[:, 0]
    r = torch.sqrt(torch.clamp(1.0 - z * z, min=0.0))
    phi = 2.0 * math.pi * u[:, 1]
    return torch.stack((r * torch.cos(phi), r * torch.sin(phi), z), dim=-1)


_CONES = (0.3, 0.03, 0.003)
"""Half-angles (radians) of the cones about the mirror direction that a quarter of the ``wi`` are drawn
from in three equal parts: without them a mirror-like metal (gold, roughness 0.02, GGX alpha 4e-4)
would be compared only where both sides are 0."""
_MIN_COS_I = 0.01


def _frame_about(r: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    # Orthonormal basis with r as z (Duff et al. 2017), local [.., 3] -> world.
    sign = torch.where(r[:, 2] >= 0.0, 1.0, -1.0)
    a = -1.0 / (sign + r[:, 2])
    b = r[:, 0] * r[:, 1] * a
    t = torch.stack((1.0 + sign * r[:, 0] ** 2 * a, sign * b, -sign * r[:, 0]), dim=-1)
    s = torch.stack((b, sign + r[:, 1] ** 2 * a, -r[:, 1]), dim=-1)
    return local[:, :1] * t + local[:, 1:2] * s + local[:, 2:] * r


def _cone_pdf(wi: torch.Tensor, r: torch.Tensor, half_angle: float) -> torch.Tensor:
    # Uniform in the cone, folded into the upper hemisphere (a sample below is mirrored in z).
    c = math.cos(half_angle)
    flipped = wi * torch.tensor([1.0, 1.0, -1.0], dtype=wi.dtype)
    inside = ((wi * r).sum(-1) >= c).to(wi.dtype) + ((flipped * r).sum(-1) >= c).to(wi.dtype)
    return inside / (2.0 * math.pi * (1.0 - c))


def sample_set(points: int = 32, per_point: int = 64, seed: int = 0) -> Samples:
    """A fixed-seed :class:`Samples`: ``wo`` with ``cos >= 0.05``; half the ``wi`` stratified uniform over the
    hemisphere (``cos >= 0.01``), the rest in :data:`_CONES` about the mirror direction of ``wo``."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    uv = torch.rand(points, 2, generator=g, dtype=f64)
    position = torch.rand(points, 3, generator=g, dtype=f64) * 2.0 - 1.0
    wo = _uniform_hemisphere(torch.rand(points, 2, generator=g, dtype=f64), 0.05)
    n_uniform = per_point // 2
    side = max(d for d in range(1, math.isqrt(n_uniform) + 1) if n_uniform % d == 0)  # strata that tile the square
    rows_of_strata = n_uniform // side
    strata = torch.arange(n_uniform, dtype=f64)
    jitter = torch.rand(points, n_uniform, 2, generator=g, dtype=f64)
    u = torch.stack(((strata % side)[None] + jitter[..., 0], (strata // side)[None] + jitter[..., 1]), dim=-1)
    u = u / torch.tensor([side, rows_of_strata], dtype=f64)
    wi_uniform = _uniform_hemisphere(u.reshape(-1, 2), _MIN_COS_I)
    mirror = wo * torch.tensor([-1.0, -1.0, 1.0], dtype=f64)
    counts = [(per_point - n_uniform) // len(_CONES) + (k < (per_point - n_uniform) % len(_CONES)) for k in range(len(_CONES))]
    cones = []
    for half_angle, count in zip(_CONES, counts, strict=True):
        u = torch.rand(points * count, 2, generator=g, dtype=f64)
        z = 1.0 - u[:, 0] * (1.0 - math.cos(half_angle))
        r = torch.sqrt(torch.clamp(1.0 - z * z, min=0.0))
        local = torch.stack((r * torch.cos(2.0 * math.pi * u[:, 1]), r * torch.sin(2.0 * math.pi * u[:, 1]), z), dim=-1)
        w = _frame_about(mirror.repeat_interleave(count, dim=0), local)
        folded = torch.cat((w[:, :2], w[:, 2:].abs()), dim=-1)  # below the horizon: mirrored in z
        cones.append(folded.reshape(points, count, 3))
    wi = torch.cat((wi_uniform.reshape(points, n_uniform, 3), *cones), dim=1).reshape(-1, 3)
    wi = wi / wi.norm(dim=-1, keepdim=True)
    mirror_rows = mirror.repeat_interleave(per_point, dim=0)
    density = n_uniform * (wi[:, 2] >= _MIN_COS_I).to(f64) / (2.0 * math.pi * (1.0 - _MIN_COS_I))
    for half_angle, count in zip(_CONES, counts, strict=True):
        density = density + count * _cone_pdf(wi, mirror_rows, half_angle)

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t.repeat_interleave(per_point, dim=0).float()

    return Samples(wi.float(), rows(wo), rows(uv), rows(position), (1.0 / density).float(), points, per_point)


@dataclass(frozen=True)
class Agreement:
    """How closely ours follows MaterialX's generated code on one material (see :func:`compare`)."""

    median: float
    """Median over samples and RGB of ``|ours - theirs| / max(theirs, FLOOR)``."""
    p95: float
    """Its 95th percentile."""
    albedo: float
    """Mean over points and RGB of the relative error of the hemisphere sum (directional albedo)."""
    albedo_ours: float
    """Mean directional albedo, ours (mean over points and RGB)."""
    albedo_theirs: float
    """Mean directional albedo, MaterialX's."""

    def row(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 4) for k in ("median", "p95", "albedo", "albedo_ours", "albedo_theirs")}


MIRROR_EXCLUSION = 0.05
"""Half-angle (radians) about the mirror direction left out of the comparison when a lobe is
perfectly smooth (:attr:`OracleRun.delta`): MaterialX clamps GGX alpha to 1e-8, a delta that a
directional light never hits (its response is 0 at every sampled pair); ours clamps it to
:data:`~neuralbake.material.microfacet.MIN_ALPHA` (1e-4), a spike whose tails stay above
:data:`FLOOR` to ~0.03 rad from the mirror direction."""


def agreement(ours: np.ndarray, theirs: np.ndarray, samples: Samples, exclude_mirror: float = 0.0) -> Agreement:
    """The :class:`Agreement` of two ``[N, 3]`` arrays of ``f cos_i`` at ``samples``.

    Rows whose ``wi`` lies within ``exclude_mirror`` radians of the mirror direction of ``wo``
    count as 0 on both sides in the sums and are left out of the per-sample statistics.
    """
    mirror = samples.wo.numpy() * np.array([-1.0, -1.0, 1.0], dtype=np.float32)
    kept = (samples.wi.numpy() * mirror).sum(axis=1) < math.cos(exclude_mirror) if exclude_mirror > 0.0 else np.ones(len(ours), bool)
    ours, theirs = np.where(kept[:, None], ours, 0.0), np.where(kept[:, None], theirs, 0.0)
    relative = (np.abs(ours - theirs) / np.maximum(theirs, FLOOR))[kept]
    weight = samples.weight.numpy()[:, None]
    sum_ours = (ours * weight).reshape(samples.points, samples.per_point, 3).sum(axis=1)
    sum_theirs = (theirs * weight).reshape(samples.points, samples.per_point, 3).sum(axis=1)
    albedo = np.abs(sum_ours - sum_theirs) / np.maximum(sum_theirs, FLOOR)
    return Agreement(
        float(np.median(relative)),
        float(np.quantile(relative, 0.95)),
        float(albedo.mean()),
        float(sum_ours.mean()),
        float(sum_theirs.mean()),
    )


@dataclass(frozen=True)
class OracleRun:
    """Both sides' ``f cos_i`` for one document, ``[N, 3]`` float32 each, and the samples."""

    ours: np.ndarray
    theirs: np.ndarray
    samples: Samples
    delta: bool
    """Whether a visible lobe has roughness 0 (then compare with ``exclude_mirror=MIRROR_EXCLUSION``)."""

    def agreement(self) -> Agreement:
        """:func:`agreement` of this run, leaving out the mirror direction when :attr:`delta`."""
        return agreement(self.ours, self.theirs, self.samples, MIRROR_EXCLUSION if self.delta else 0.0)


_SMOOTH_LOBES = (("specular_roughness", None), ("coat_roughness", "coat"), ("coat_roughness", "coat_weight"))


def evaluate_ours(
    path: str | Path, samples: Samples, parameters: dict[str, torch.Tensor] | None = None
) -> tuple[np.ndarray, bool]:
    """Our compiled material's ``f cos_i`` at ``samples``, ``[N, 3]``, and whether a visible lobe is perfectly
    smooth (``parameters``: replacements, as in :meth:`CompiledMaterial.__call__`)."""
    material = compile_materialx(path)
    normal = torch.tensor([[0.0, 0.0, 1.0]]).expand(samples.wi.shape[0], 3)
    with torch.no_grad():
        inputs = material.shader_inputs(samples.uv, normal, samples.position, parameters=parameters)
        delta = any(
            roughness in inputs and bool(((inputs[roughness] <= 0.0) & (inputs[weight] > 0.0 if weight else True)).any())
            for roughness, weight in _SMOOTH_LOBES
            if weight is None or weight in inputs
        )
        layer = material(samples.uv, normal, samples.position, parameters=parameters)
        return layer.eval(samples.wi, samples.wo).numpy(), delta


def compare(path: str | Path, samples: Samples | None = None, parameters: dict[str, torch.Tensor] | None = None) -> OracleRun:
    """Run MaterialX's generated code and our compiled graph on ``samples`` (default :func:`sample_set`).

    Raises :class:`~neuralbake.errors.InputError` when our compiler refuses the document (that
    is the first thing tried) or the oracle cannot run it (image files, unknown vertex data).
    """
    samples = samples or sample_set()
    ours, delta = evaluate_ours(path, samples, parameters)
    theirs = run_oracle(oracle_source(path), samples.packed())
    return OracleRun(ours, theirs, samples, delta)
