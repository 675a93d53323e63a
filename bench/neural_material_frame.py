"""Frame time of a glTF scene shaded with its neural materials: the exported shader on slangpy's CUDA
device against the reference materials in PyTorch, at 1920 x 1080.

    python bench/neural_material_frame.py ASSET.gltf BUNDLE --out result.json [--width 1920 --height 1080]
    python bench/neural_material_frame.py SCENE.gltf PACK --out result.json

``BUNDLE`` is a ``neuralbake material bake ASSET.gltf`` folder; ``PACK`` a ``neuralbake material
pack SCENE.gltf`` folder (one bundle per lit material of the scene, one shader with a material-id
switch: every pixel is shaded by its own material). One frame is primary visibility
(the G-buffer, in PyTorch: Warp's BVH or the PyTorch rasteriser), then one sample per pixel for
each light: the sun and one light sample of the procedural sky (so 2 evaluations of the material
per covered pixel). Timed, each as the median of ``--repeats`` runs with the GPU idle before and
after:

- ``gbuffer``: visibility + G-buffer (PyTorch), the same for every material path;
- ``shader_tensor`` / ``shader_scalar``: the exported Slang module's ``nb_<m>_tensor_kernel`` /
  ``nb_<m>_kernel`` over the frame's points (uv, wi, wo in the vertex frame, and the mip level of
  each pixel's footprint), fp16 weights and latents, on slangpy's CUDA device. With a pack the
  scalar kernel takes every point with its material id (the ``switch``), and the tensor kernels,
  one per material, run one after another on that material's points (points sorted by material,
  as a deferred renderer would bin them): the time is the sum;
- ``torch_neural``: the same evaluation in PyTorch (``NeuralMaterial.decode`` at the footprint's
  level, fp32);
- ``torch_reference``: the reference glTF materials in PyTorch: their five textures sampled
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
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from neuralbake.bakes.neural_material.asset import GltfLayer, load_asset_bundle
from neuralbake.bakes.neural_material.model import lod_from_derivatives
from neuralbake.export.neural_material import export_material_pack_shader, export_neural_material_shader
from neuralbake.io.images import save_png
from neuralbake.material.frame import normalize
from neuralbake.render.camera import bounds_framing, look_at
from neuralbake.render.envmap import EnvironmentLight, default_environment
from neuralbake.render.gbuffer import evaluate_materials, render_gbuffer
from neuralbake.render.layer_shading import SUN, vertex_frame
from neuralbake.render.tonemap import tone_map
from timing import measure, synchronizer

BUDGET_MS = 16.0
BOUNDS = {"shader_scalar": 1e-3, "shader_tensor": 2e-2}
"""Largest error of each kernel, of max(|v|, 1), against PyTorch in its arithmetic: fp32 on
fp16-rounded weights and latents for the scalar kernel, fp16 products for the tensor kernel."""


def _pack_bundles(folder: Path) -> list[Path]:
    """The bundles of a ``material pack`` folder in material-id order, or ``[folder]`` for one bundle."""
    pack = folder / "pack.json"
    if not pack.is_file():
        return [folder]
    entries = json.loads(pack.read_text())["materials"]
    # bundles baked by the pack live in materials/<name>; folders given to the pack as baked stay where they were
    return [folder / "materials" / entry["name"] if (folder / "materials" / entry["name"]).is_dir() else Path(entry["bundle"]) for entry in entries]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("asset", type=Path)
    parser.add_argument("bundle", type=Path, help="a `material bake ASSET` folder or a `material pack SCENE` folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--slang-device", default="cuda", help="slangpy device type (cpu to try the script without a GPU, at a small size)")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = synchronizer(device)
    bundles = _pack_bundles(args.bundle)
    pack = len(bundles) > 1 or bundles[0] != args.bundle
    loaded = [load_asset_bundle(args.asset, bundle, device=device) for bundle in bundles]
    rs = loaded[0][0].render_scene
    target, distance = bounds_framing(rs.positions, 40.0)
    camera = look_at((target[0] + 0.6 * distance, target[1] + 0.25 * distance, target[2] + 0.75 * distance), target, fov_y_deg=40.0)
    width, height = args.width, args.height
    results: dict = {"asset": str(args.asset.name), "bundle": str(args.bundle), "materials": [m.name for m, _ in loaded], "width": width,
                     "height": height, "budget_ms": BUDGET_MS, "torch": torch.__version__,
                     "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "date": time.strftime("%Y-%m-%d")}

    results["gbuffer_ms"] = 1000.0 * measure(lambda: render_gbuffer(rs, camera, width, height), repeats=args.repeats, warmup=0, sync=sync).median
    g = render_gbuffer(rs, camera, width, height)
    # the pixels of each baked material, grouped by material (material id order)
    groups = [torch.nonzero(g.material_id == material.index).reshape(-1) for material, _ in loaded]
    sel = torch.cat(groups)
    ids = torch.cat([torch.full((len(rows),), k, dtype=torch.int32, device=device) for k, rows in enumerate(groups)])
    pixels = int(sel.numel())
    results["covered_pixels"], results["material_pixels"] = int(g.pixel.shape[0]), pixels
    results["pixels_per_material"] = [len(rows) for rows in groups]
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
        ids2 = torch.cat([ids, ids])
        mips = torch.zeros(pixels, dtype=torch.int32, device=device)
        for k, (_, neural) in enumerate(loaded):  # each material's level from its own latent size
            rows = ids == k
            level0 = neural.latents[0]
            lod = lod_from_derivatives(g.uv_dx[0][sel][rows], g.uv_dy[0][sel][rows], (int(level0.shape[1]), int(level0.shape[0])))
            mips[rows] = torch.round(lod.clamp(0, len(neural.latents) - 1)).to(torch.int32)
        mips2 = torch.cat([mips, mips])
        # the points of each material, for the per-material paths (sun and sky points of material k)
        parts = [torch.nonzero(ids2 == k).reshape(-1) for k in range(len(loaded))]

        def combine(values: torch.Tensor) -> torch.Tensor:
            sun_term, sky_term = values[:pixels], values[pixels:]
            lit = ((sun * frame.geometric).sum(-1) > 0).float()[:, None]
            above = ((sky_world * frame.geometric).sum(-1) > 0).float()[:, None]
            sky = torch.where(sky_pdf[:, None] > 0, sky_term * sky_radiance / sky_pdf.clamp(min=1e-12)[:, None], torch.zeros_like(sky_term))
            out = torch.zeros(g.pixel.shape[0], 3, device=device)
            out[sel] = sun_term * SUN[1] * lit + sky * above
            return out

        # PyTorch: the reference materials (textures + BRDF), and the neural materials
        def reference_frame() -> torch.Tensor:
            s = evaluate_materials(rs, g)
            layer = GltfLayer(s.base_color[sel], s.metallic[sel], s.roughness[sel], normalize(frame.local(s.normal[sel])))
            both = GltfLayer(torch.cat([layer.base_color] * 2), torch.cat([layer.metallic] * 2), torch.cat([layer.roughness] * 2), torch.cat([layer.shading_normal] * 2))
            return both.eval(wi, wo2)

        def per_material(materials) -> torch.Tensor:
            if len(materials) == 1:  # one material: no gather and scatter
                return materials[0].evaluate(materials[0].latent_filtered(uv2, mips2.float()), wi, wo2).float()
            out = torch.empty(2 * pixels, 3, device=device)
            for rows, neural in zip(parts, materials, strict=True):
                out[rows] = neural.evaluate(neural.latent_filtered(uv2[rows], mips2[rows].float()), wi[rows], wo2[rows]).float()
            return out

        neurals = [neural for _, neural in loaded]
        results["torch_reference_ms"] = 1000.0 * measure(reference_frame, repeats=args.repeats, warmup=0, sync=sync).median
        results["torch_neural_ms"] = 1000.0 * measure(lambda: per_material(neurals), repeats=args.repeats, warmup=0, sync=sync).median
        # what the kernels compute: the scalar kernel fp32 arithmetic on fp16-rounded weights and
        # latents, the tensor kernel fp16 products of them (fp32 sums)
        halves = [neural.to(torch.float16) for neural in neurals]
        expected = {"shader_scalar": per_material([half.to(torch.float32) for half in halves]), "shader_tensor": per_material(halves)}
        reference_values = reference_frame()

    # the exported shader on slangpy
    import slangpy

    sdevice = slangpy.create_device(type=getattr(slangpy.DeviceType, args.slang_device))
    results["slang_device"] = str(getattr(sdevice.info, "adapter_name", args.slang_device))
    results["slangpy"] = slangpy.__version__
    usage = slangpy.BufferUsage.shader_resource
    count = 2 * pixels
    points = torch.cat([uv2, wi, wo2], dim=1).float()
    with tempfile.TemporaryDirectory() as tmp:
        if pack:
            export_material_pack_shader(bundles, tmp, precision="fp16", latent_format="fp16", name="material")
        else:
            export_neural_material_shader(bundles[0], tmp, precision="fp16", latent_format="fp16", name="material")
        folder = Path(tmp)
        manifest = json.loads((folder / "material.json").read_text())
        module = sdevice.load_module_from_source("nb_frame", (folder / "material.slang").read_text())

        def raw(name: str):
            return sdevice.create_buffer(data=np.frombuffer((folder / name).read_bytes(), dtype=np.uint8).copy(), usage=usage)

        def point_buffers(rows: torch.Tensor) -> dict:
            n = int(rows.numel())
            return {
                "nb_material_points": sdevice.create_buffer(data=points[rows].cpu().numpy().reshape(-1), struct_size=4, usage=usage),
                "nb_material_mips": sdevice.create_buffer(data=mips2[rows].cpu().numpy().astype(np.uint32), struct_size=4, usage=usage),
                "nb_material_values": sdevice.create_buffer(data=np.zeros(n * 3, np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access),
                "nb_material_constants": {"nb_material_point_count": n},
            }

        weights, latents = raw("material.weights.fp16.bin"), raw("material.latents.fp16.bin")
        everything = torch.arange(count, device=device)
        # one dispatch list per kernel path: (entry, threads, bindings, the points it shades)
        scalar = {"nb_material_weights": weights, "nb_material_latents": latents, **point_buffers(everything)}
        if pack:
            scalar["nb_material_material_ids"] = sdevice.create_buffer(data=ids2.cpu().numpy().astype(np.uint32), struct_size=4, usage=usage)
        kernels = {"shader_scalar": [("nb_material_kernel", count, scalar, everything)]}
        tensor_entries = manifest["tensor_kernels"]
        if all(entry.get("entry") for entry in tensor_entries):
            kernels["shader_tensor"] = [
                (entry["entry"], -(-int(rows.numel()) // entry["points_per_group"]) * entry["threads_per_group"],
                 {"nb_material_weights": weights, "nb_material_latents": latents, **point_buffers(rows)}, rows)
                for entry, rows in zip(tensor_entries, parts, strict=True) if rows.numel()
            ]
        failures = []
        for name, dispatches in kernels.items():
            compiled = [(sdevice.create_compute_kernel(sdevice.link_program([module], [module.entry_point(entry)])), threads, binds, rows)
                        for entry, threads, binds, rows in dispatches]

            def dispatch(compiled=compiled) -> None:
                for kernel, threads, binds, _ in compiled:
                    kernel.dispatch(thread_count=[threads, 1, 1], vars=binds)

            dispatch()
            sdevice.wait_for_idle()
            got = torch.zeros(count, 3, device=device)
            for _, _, binds, rows in compiled:
                got[rows] = torch.from_numpy(binds["nb_material_values"].to_numpy().view(np.float32).reshape(-1, 3).copy()).to(device)
            want = expected[name].float()
            error = float(((got - want).abs() / want.abs().clamp(min=1.0)).max())
            results[f"{name}_error"] = error
            if not np.isfinite(error) or error > BOUNDS[name]:
                failures.append(f"{name}: {error:.3e} of max(|v|, 1) from its PyTorch model (bound {BOUNDS[name]:.0e})")
            results[f"{name}_ms"] = 1000.0 * measure(dispatch, repeats=args.repeats, warmup=0, sync=sdevice.wait_for_idle).median
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
