"""Importance sampling in an exported neural material shader: the sampling head and its proxy lobe.

A bundle baked with ``--sampling-steps`` carries a sampling head
(:mod:`neuralbake.bakes.neural_material.sampling`): a tiny MLP from a texel's latent to the
parameters of a proxy lobe (a GGX reflection lobe about a tilted normal, mixed with a cosine
lobe). The shader gets the same functions a path tracer needs, line for line what
``proxy_sample`` / ``proxy_pdf`` compute in PyTorch:

- ``nb_<m>_lobe(latent, out weight, out alpha, out normal)``: the head (its weights in the
  module's weight buffer, after the decoders) and its output transform;
- ``float3 nb_<m>_sample_lobe(weight, alpha, normal, wo, u, out pdf)`` and ``float
  nb_<m>_pdf_lobe(weight, alpha, normal, wi, wo)``: the mixture for a given lobe (callers that
  filter the latents themselves start here);
- ``float3 nb_<m>_sample(float2 uv, float3 wo, float2 u, uint mip, out float pdf)`` and ``float
  nb_<m>_pdf(float2 uv, float3 wi, float3 wo, uint mip)``: the latent fetched as ``nb_<m>_eval``
  fetches it, then the lobe; ``nb_<m>_sample_lod`` / ``nb_<m>_pdf_lod`` take a fractional level of
  detail instead (the trilinear fetch of ``nb_<m>_eval_lod``). ``u`` is two uniforms in [0, 1); ``u.x`` picks the lobe and is
  reused, rescaled. A sample with ``pdf == 0`` is invalid (weigh it 0); directions are in the
  vertex frame (normal +z), as ``nb_<m>_eval`` takes them.

A material without a head gets the same two functions with cosine sampling (the PyTorch material's
fallback), so a renderer can call them for every material of a pack (``nb_<module>_sample`` /
``nb_<module>_pdf`` switch on the material id). The GGX helpers (``nb_<module>_ggx_*``: the
distribution of visible normals, Heitz 2018, and its reflection density) and the orthonormal basis
(Duff et al. 2017) follow :mod:`neuralbake.material.microfacet` and
:mod:`neuralbake.material.frame`. Arithmetic is fp32; the PyTorch code rescales ``u.x`` in
float64, the shader in fp32 (a difference of about 1e-7 in the rescaled number).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from neuralbake.io.neural_material_bundle import MAX_TILT, MAX_W, MIN_ALPHA, ExportMaterial

__all__ = ["helper_code", "sampler_summary", "sampling_code", "sampling_switch_code"]

_PI = "3.14159265358979f"


def _literal(value: float) -> str:
    return f"{float(value)!r}f"


def helper_code(module: str) -> list[str]:
    """Orthonormal basis, cosine lobe and GGX (visible normals, reflection density): once per module."""
    p = f"nb_{module}"
    return [
        "",
        "// ---- importance sampling helpers (neuralbake.material.frame / microfacet) -----------------",
        "",
        "// Two unit tangents completing the unit normal n to a right-handed frame (Duff et al. 2017).",
        f"void {p}_basis(float3 n, out float3 t, out float3 b)",
        "{",
        "    float s = n.z >= 0.0f ? 1.0f : -1.0f;",
        "    float a = -1.0f / (s + n.z);",
        "    float c = n.x * n.y * a;",
        "    t = float3(1.0f + s * n.x * n.x * a, s * c, -s * n.x);",
        "    b = float3(c, s + n.y * n.y * a, -n.y);",
        "}",
        "",
        f"float3 {p}_to_frame(float3 v, float3 t, float3 b, float3 n)",
        "{",
        "    return float3(dot(v, t), dot(v, b), dot(v, n));",
        "}",
        "",
        f"float3 {p}_cosine_sample(float2 u)",
        "{",
        "    float r = sqrt(max(u.x, 0.0f));",
        f"    float phi = 2.0f * {_PI} * u.y;",
        "    return float3(r * cos(phi), r * sin(phi), sqrt(max(1.0f - u.x, 0.0f)));",
        "}",
        "",
        f"float {p}_cosine_pdf(float3 w)",
        "{",
        f"    return max(w.z, 0.0f) / {_PI};",
        "}",
        "",
        f"float {p}_ggx_d(float3 m, float alpha)",
        "{",
        "    if (m.z <= 0.0f)",
        "        return 0.0f;",
        "    float x = m.x / alpha;",
        "    float y = m.y / alpha;",
        "    float q = x * x + y * y + m.z * m.z;",
        f"    return 1.0f / ({_PI} * alpha * alpha * q * q);",
        "}",
        "",
        f"float {p}_ggx_g1(float3 v, float3 m, float alpha)",
        "{",
        "    if (dot(v, m) * v.z <= 0.0f)",
        "        return 0.0f;",
        "    float z2 = max(v.z * v.z, 1.17549435e-38f);",
        "    float tan2 = alpha * alpha * (v.x * v.x + v.y * v.y) / z2;",
        "    return 1.0f / (1.0f + 0.5f * (sqrt(1.0f + tan2) - 1.0f));",
        "}",
        "",
        "// Density of the GGX reflection sample below: G1(wo, h) D(h) / (4 wo.z); 0 unless both above the lobe's plane.",
        f"float {p}_ggx_pdf(float3 wi, float3 wo, float alpha)",
        "{",
        "    if (wi.z <= 0.0f || wo.z <= 0.0f)",
        "        return 0.0f;",
        f"    float3 h = {p}_halfway(wi, wo);",
        f"    return {p}_ggx_g1(wo, h, alpha) * {p}_ggx_d(h, alpha) / (4.0f * wo.z);",
        "}",
        "",
        "// wo mirrored about a GGX normal visible from wo (Heitz 2018); wo below the plane samples as if from the normal.",
        f"float3 {p}_ggx_sample(float3 wo, float2 u, float alpha)",
        "{",
        "    float3 v = wo.z > 0.0f ? wo : float3(0.0f, 0.0f, 1.0f);",
        "    float3 vh = normalize(float3(alpha * v.x, alpha * v.y, v.z));",
        "    float len2 = vh.x * vh.x + vh.y * vh.y;",
        "    float3 t1 = len2 > 0.0f ? float3(-vh.y, vh.x, 0.0f) * rsqrt(len2) : float3(1.0f, 0.0f, 0.0f);",
        "    float3 t2 = cross(vh, t1);",
        "    float r = sqrt(max(u.x, 0.0f));",
        f"    float phi = 2.0f * {_PI} * u.y;",
        "    float p1 = r * cos(phi);",
        "    float s = 0.5f * (1.0f + vh.z);",
        "    float p2 = (1.0f - s) * sqrt(max(1.0f - p1 * p1, 0.0f)) + s * r * sin(phi);",
        "    float p3 = sqrt(max(1.0f - p1 * p1 - p2 * p2, 0.0f));",
        "    float3 nh = p1 * t1 + p2 * t2 + p3 * vh;",
        "    float3 m = normalize(float3(alpha * nh.x, alpha * nh.y, max(nh.z, 0.0f)));",
        "    return 2.0f * dot(wo, m) * m - wo;",
        "}",
    ]


_FETCHES = (
    ("", "uint mip", "latent", "The lobe at uv, the latent fetched as nb_<m>_eval fetches it (bilinear in one mip level)."),
    ("_lod", "float lod", "latent_lod", "The same with the latent filtered trilinearly at a fractional level of detail (as nb_<m>_eval_lod)."),
)
"""The latent fetches sample/pdf come in: function suffix, level parameter, latent function, comment."""


def sampling_code(material: ExportMaterial, module: str) -> list[str]:
    """``nb_<m>_sample`` and ``nb_<m>_pdf`` (and, with a head, ``nb_<m>_lobe`` and the ``_lobe`` forms)."""
    m, p = material.name, f"nb_{module}"
    channels = material.fields["latent.channels"]
    zeros = f"{{ {', '.join(['0.0f'] * channels)} }}"
    if material.sampler_layers is None:
        lines = ["", f"// Material {m} has no sampling head: cosine sampling about the vertex normal, whatever the latent fetch."]
        for suffix, level, _, _ in _FETCHES:
            lines += [
                f"float3 nb_{m}_sample{suffix}(float2 uv, float3 wo, float2 u, {level}, out float pdf)",
                "{",
                f"    float3 wi = {p}_cosine_sample(u);",
                f"    pdf = wo.z > 0.0f ? {p}_cosine_pdf(wi) : 0.0f;",
                "    return wi;",
                "}",
                "",
                f"float nb_{m}_pdf{suffix}(float2 uv, float3 wi, float3 wo, {level})",
                "{",
                f"    return wo.z > 0.0f ? {p}_cosine_pdf(wi) : 0.0f;",
                "}",
                "",
            ]
        return lines
    lines = [
        "",
        f"// Material {m}'s proxy lobe from its latent: GGX weight (<= {MAX_W}), alpha (>= {MIN_ALPHA}) and the tilted lobe normal.",
        f"void nb_{m}_lobe(float latent[{channels}], out float weight, out float alpha, out float3 normal)",
        "{",
        "    float y[4] = { 0.0f, 0.0f, 0.0f, 0.0f };",
        f"    nb_{m}_sampler({p}_weights, latent, y);",
        f"    weight = {_literal(MAX_W)} / (1.0f + exp(-y[0]));",
        f"    alpha = {_literal(MIN_ALPHA)} + {_literal(1.0 - MIN_ALPHA)} / (1.0f + exp(-y[1]));",
        f"    normal = normalize(float3({_literal(MAX_TILT)} * tanh(y[2]), {_literal(MAX_TILT)} * tanh(y[3]), 1.0f));",
        "}",
        "",
        "// Density of the mixture: weight * GGX about normal + (1 - weight) * cosine; 0 unless wi and wo are above the vertex plane.",
        f"float nb_{m}_pdf_lobe(float weight, float alpha, float3 normal, float3 wi, float3 wo)",
        "{",
        "    if (wi.z <= 0.0f || wo.z <= 0.0f)",
        "        return 0.0f;",
        "    float3 t;",
        "    float3 b;",
        f"    {p}_basis(normal, t, b);",
        f"    float specular = {p}_ggx_pdf({p}_to_frame(wi, t, b, normal), {p}_to_frame(wo, t, b, normal), alpha);",
        f"    return weight * specular + (1.0f - weight) * {p}_cosine_pdf(wi);",
        "}",
        "",
        "// u.x < weight picks the GGX lobe, else the cosine lobe; u.x is rescaled and reused. pdf 0: an invalid sample.",
        f"float3 nb_{m}_sample_lobe(float weight, float alpha, float3 normal, float3 wo, float2 u, out float pdf)",
        "{",
        "    bool pick = u.x < weight;",
        "    float u0 = pick ? u.x / max(weight, 1e-12f) : (u.x - weight) / max(1.0f - weight, 1e-12f);",
        "    float2 uu = float2(clamp(u0, 0.0f, 1.0f - 1e-7f), u.y);",
        "    float3 wi;",
        "    bool valid = true;",
        "    if (pick)",
        "    {",
        "        float3 t;",
        "        float3 b;",
        f"        {p}_basis(normal, t, b);",
        f"        float3 wo_lobe = {p}_to_frame(wo, t, b, normal);",
        f"        float3 wi_lobe = {p}_ggx_sample(wo_lobe, uu, alpha);",
        f"        valid = {p}_ggx_pdf(wi_lobe, wo_lobe, alpha) > 0.0f;",
        "        wi = wi_lobe.x * t + wi_lobe.y * b + wi_lobe.z * normal;",
        "    }",
        "    else",
        f"        wi = {p}_cosine_sample(uu);",
        f"    pdf = valid ? nb_{m}_pdf_lobe(weight, alpha, normal, wi, wo) : 0.0f;",
        "    return wi;",
        "}",
        "",
    ]
    for suffix, level, fetch, comment in _FETCHES:
        lines += ["", f"// {comment}"]
        for signature, call in (
            (f"float3 nb_{m}_sample{suffix}(float2 uv, float3 wo, float2 u, {level}, out float pdf)", f"nb_{m}_sample_lobe(weight, alpha, normal, wo, u, pdf)"),
            (f"float nb_{m}_pdf{suffix}(float2 uv, float3 wi, float3 wo, {level})", f"nb_{m}_pdf_lobe(weight, alpha, normal, wi, wo)"),
        ):
            lines += [signature, "{", f"    float latent[{channels}] = {zeros};", f"    nb_{m}_{fetch}(uv, {level.split()[1]}, latent);"]
            lines += ["    float weight;", "    float alpha;", "    float3 normal;", f"    nb_{m}_lobe(latent, weight, alpha, normal);", f"    return {call};", "}", ""]
    return lines


def sampling_switch_code(module: str, materials: Sequence[ExportMaterial]) -> list[str]:
    """The pack's ``nb_<module>_sample`` / ``nb_<module>_pdf`` (and ``_lod``): a switch on the material id (unknown ids: pdf 0)."""
    lines = []
    for suffix, level, _, _ in _FETCHES:
        name = level.split()[1]
        lines += ["", f"float3 nb_{module}_sample{suffix}(uint material_id, float2 uv, float3 wo, float2 u, {level}, out float pdf)", "{"]
        lines += ["    switch (material_id)", "    {"]
        lines += [f"    case {index}: return nb_{material.name}_sample{suffix}(uv, wo, u, {name}, pdf);" for index, material in enumerate(materials)]
        lines += ["    default: pdf = 0.0f; return float3(0.0f, 0.0f, 1.0f);", "    }", "}"]
        lines += ["", f"float nb_{module}_pdf{suffix}(uint material_id, float2 uv, float3 wi, float3 wo, {level})", "{", "    switch (material_id)", "    {"]
        lines += [f"    case {index}: return nb_{material.name}_pdf{suffix}(uv, wi, wo, {name});" for index, material in enumerate(materials)]
        lines += ["    default: return 0.0f;", "    }", "}"]
    return lines


def sampler_summary(material: ExportMaterial, table: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The manifest's ``sampling`` entry of a material."""
    if table is None:
        return {"method": "cosine", "functions": [f"nb_{material.name}_{name}" for name in ("sample", "pdf", "sample_lod", "pdf_lod")]}
    return {
        "method": "sampling head: GGX lobe about a tilted normal + cosine lobe",
        "functions": [f"nb_{material.name}_{name}" for name in ("sample", "pdf", "sample_lod", "pdf_lod", "lobe", "sample_lobe", "pdf_lobe")],
        "head_layers": table,
        "max_weight": MAX_W,
        "min_alpha": MIN_ALPHA,
        "max_tilt": MAX_TILT,
    }
