"""Frame time of a glTF asset shaded with its neural material: the exported shader on slangpy's CUDA
device against the reference material in PyTorch, at 1920 x 1080.

    python bench/neural_material_frame.py ASSET.gltf BUNDLE --out result.json [--width 1920 --height 1080]

``BUNDLE`` is a ``neuralbake material bake ASSET.gltf`` folder. One frame is primary visibility
(the G-buffer, in PyTorch: Warp's BVH or the PyTorch rasteriser), then one sample per pixel for
each light: the sun and one light sample of the procedural sky (so 2 evaluations of the material
per covered pixel). Timed, each as the median of ``--repeats`` runs with the GPU idle before and
after:

- ``gbuffer``: visibility + G-buffer (PyTorch), the same for every material path;
- ``shader_tensor`` / ``shader_scalar``: the exported Slang module's ``nb_<m>_tensor_kernel`` /
  ``nb_<m>_kernel`` over the frame's points (uv, wi, wo in the vertex frame, and the mip level of
  each pixel's footprint), fp16 weights and latents, on slangpy's CUDA device;
- ``torch_neural``: the same evaluation in PyTorch (``NeuralMaterial.decode`` at the footprint's
  level, fp32);
- ``torch_reference``: the reference glTF material in PyTorch: its five textures sampled
  trilinearly per pixel (``evaluate_materials``) and the glTF BRDF with the normal map for both
  lights (the deferred renderer's material path).

The shader's values are checked against the PyTorch neural material on the same points in each
kernel's arithmetic (:data:`BOUNDS`); the script exits non-zero past them. Pictures of the frame from the
shader's values and from the reference are written beside ``--out`` (``frame_neural.png``,
``frame_reference.png``). A frame of 16 ms (60 Hz) is the seed's budget.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from neuralbake.bakes.neural_material.asset import SUN, GltfLayer, asset_framing, load_asset_bundle, vertex_frame
from neuralbake.bakes.neural_material.model import lod_from_derivatives
from neuralbake.export.neural_material import export_neural_material_shader
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize
from neuralbake.render.camera import look_at
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import evaluate_materials, render_gbuffer
from neuralbake.render.tonemap import tone_map

BUDGET_MS = 16.0
BOUNDS = {"shader_scalar": 1e-3, "shader_tensor": 2e-2}
"""Largest error of each kernel, of max(|v|, 1), against PyTorch in its arithmetic: fp32 on
fp16-rounded weights and latents for the scalar kernel, fp16 products for the tensor kernel."""


def _median_ms(work, sync, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        work()
        sync()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("asset", type=Path)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--slang-device", default="cuda", help="slangpy device type (cpu to try the script without a GPU, at a small size)")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    material, neural = load_asset_bundle(args.asset, args.bundle, device=device)
    rs = material.render_scene
    target, distance = asset_framing(rs, 40.0)
    camera = look_at((target[0] + 0.6 * distance, target[1] + 0.25 * distance, target[2] + 0.75 * distance), target, fov_y_deg=40.0)
    width, height = args.width, args.height
    results: dict = {"asset": str(args.asset.name), "bundle": str(args.bundle), "width": width, "height": height, "budget_ms": BUDGET_MS,
                     "torch": torch.__version__, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                     "date": time.strftime("%Y-%m-%d")}

    results["gbuffer_ms"] = _median_ms(lambda: render_gbuffer(rs, camera, width, height), sync, args.repeats)
    g = render_gbuffer(rs, camera, width, height)
    sel = torch.nonzero(g.material_id == material.index).reshape(-1)  # the pixels of the baked material
    pixels = int(sel.numel())
    results["covered_pixels"], results["material_pixels"] = int(g.pixel.shape[0]), pixels
    frame = vertex_frame(g).rows(sel)
    environment = EnvironmentLight.from_map(default_environment(128, 64, device=device))
    with torch.no_grad():
        wo = frame.local(g.view[sel])
        sun = normalize(torch.tensor(SUN[0], device=device).reshape(1, 3)).expand(pixels, 3)
        u = torch.rand(pixels, 2, generator=torch.Generator(device=device).manual_seed(0), device=device)
        sky_world, sky_pdf = environment.sample(u.to(environment.pmf.dtype))
        sky_world, sky_pdf = sky_world.float(), sky_pdf.float()
        sky_radiance = environment.eval(sky_world.to(environment.pmf.dtype)).float()
        wi = torch.cat([frame.local(sun), frame.local(sky_world)])
        wo2, uv2 = torch.cat([wo, wo]), torch.cat([g.uv[0][sel], g.uv[0][sel]])
        level0 = neural.latents[0]
        lod = lod_from_derivatives(g.uv_dx[0][sel], g.uv_dy[0][sel], (int(level0.shape[1]), int(level0.shape[0])))
        mips = torch.round(lod.clamp(0, len(neural.latents) - 1)).to(torch.int32)
        mips2 = torch.cat([mips, mips])

        def combine(values: torch.Tensor) -> torch.Tensor:
            sun_term, sky_term = values[:pixels], values[pixels:]
            lit = ((sun * frame.geometric).sum(-1) > 0).float()[:, None]
            above = ((sky_world * frame.geometric).sum(-1) > 0).float()[:, None]
            sky = torch.where(sky_pdf[:, None] > 0, sky_term * sky_radiance / sky_pdf.clamp(min=1e-12)[:, None], torch.zeros_like(sky_term))
            out = torch.zeros(g.pixel.shape[0], 3, device=device)
            out[sel] = sun_term * SUN[1] * lit + sky * above
            return out

        # PyTorch: the reference material (textures + BRDF), and the neural material
        def reference_frame() -> torch.Tensor:
            s = evaluate_materials(rs, g)
            layer = GltfLayer(s.base_color[sel], s.metallic[sel], s.roughness[sel], normalize(frame.local(s.normal[sel])))
            both = GltfLayer(torch.cat([layer.base_color] * 2), torch.cat([layer.metallic] * 2), torch.cat([layer.roughness] * 2), torch.cat([layer.shading_normal] * 2))
            return both.eval(wi, wo2)

        def neural_frame() -> torch.Tensor:
            return neural.evaluate(neural.latent_filtered(uv2, mips2.float()), wi, wo2)

        results["torch_reference_ms"] = _median_ms(reference_frame, sync, args.repeats)
        results["torch_neural_ms"] = _median_ms(neural_frame, sync, args.repeats)
        # what the kernels compute: the scalar kernel fp32 arithmetic on fp16-rounded weights and
        # latents, the tensor kernel fp16 products of them (fp32 sums)
        half = neural.to(torch.float16)
        rounded = half.to(torch.float32)
        expected = {"shader_scalar": rounded.evaluate(rounded.latent_filtered(uv2, mips2.float()), wi, wo2),
                    "shader_tensor": half.evaluate(half.latent_filtered(uv2, mips2.float()), wi, wo2)}
        reference_values = reference_frame()

    # the exported shader on slangpy
    import slangpy

    sdevice = slangpy.create_device(type=getattr(slangpy.DeviceType, args.slang_device))
    results["slang_device"] = str(getattr(sdevice.info, "adapter_name", args.slang_device))
    results["slangpy"] = slangpy.__version__
    usage = slangpy.BufferUsage.shader_resource
    count = 2 * pixels
    points = torch.cat([uv2, wi, wo2], dim=1).float().cpu().numpy().reshape(-1)
    with tempfile.TemporaryDirectory() as tmp:
        export_neural_material_shader(args.bundle, tmp, precision="fp16", latent_format="fp16", name="material")
        folder = Path(tmp)
        manifest = json.loads((folder / "material.json").read_text())
        module = sdevice.load_module_from_source("nb_frame", (folder / "material.slang").read_text())

        def raw(name: str):
            return sdevice.create_buffer(data=np.frombuffer((folder / name).read_bytes(), dtype=np.uint8).copy(), usage=usage)

        binds = {
            "nb_material_weights": raw("material.weights.fp16.bin"),
            "nb_material_latents": raw("material.latents.fp16.bin"),
            "nb_material_points": sdevice.create_buffer(data=points, struct_size=4, usage=usage),
            "nb_material_mips": sdevice.create_buffer(data=mips2.cpu().numpy().astype(np.uint32), struct_size=4, usage=usage),
            "nb_material_values": sdevice.create_buffer(data=np.zeros(count * 3, np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access),
            "nb_material_constants": {"nb_material_point_count": count},
        }
        tensor = manifest["tensor_kernels"][0]
        kernels = {"shader_scalar": ("nb_material_kernel", count)}
        if "entry" in tensor:
            kernels["shader_tensor"] = (tensor["entry"], -(-count // tensor["points_per_group"]) * tensor["threads_per_group"])
        failures = []
        for name, (entry, threads) in kernels.items():
            kernel = sdevice.create_compute_kernel(sdevice.link_program([module], [module.entry_point(entry)]))

            def dispatch(kernel=kernel, threads=threads) -> None:
                kernel.dispatch(thread_count=[threads, 1, 1], vars=binds)

            dispatch()
            sdevice.wait_for_idle()
            got = torch.from_numpy(binds["nb_material_values"].to_numpy().view(np.float32).reshape(count, 3).copy()).to(device)
            want = expected[name].float()
            error = float(((got - want).abs() / want.abs().clamp(min=1.0)).max())
            results[f"{name}_error"] = error
            if not np.isfinite(error) or error > BOUNDS[name]:
                failures.append(f"{name}: {error:.3e} of max(|v|, 1) from its PyTorch model (bound {BOUNDS[name]:.0e})")
            results[f"{name}_ms"] = _median_ms(dispatch, sdevice.wait_for_idle, args.repeats)
            if name == "shader_tensor" or "shader_tensor" not in kernels:
                shader_values = got
    for key in ("shader_tensor_ms", "shader_scalar_ms", "torch_neural_ms", "torch_reference_ms"):
        if key in results:
            results[key.replace("_ms", "_frame_ms")] = results[key] + results["gbuffer_ms"]
            results[key.replace("_ms", "_frame_of_budget")] = (results[key] + results["gbuffer_ms"]) / BUDGET_MS
    background = torch.full((3,), 0.18, device=device)
    for name, values in (("neural", shader_values), ("reference", reference_values)):
        save_png(args.out.parent / f"frame_{name}.png", tone_map(g.image(combine(values.float()), background)).float().cpu().numpy())
    results["failures"] = failures
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
