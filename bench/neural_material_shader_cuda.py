"""The exported neural material shader on slangpy's CUDA device, for machines that hold only slangpy and numpy.

Two steps, because the lent GPU machine cannot take neuralbake's whole environment (the full
slangpy wheel alone exceeds what can be carried there):

    python bench/neural_material_shader_cuda.py prepare out/copper DIR   # here: export, points, PyTorch answers
    python bench/neural_material_shader_cuda.py run DIR result.json      # there: compile, dispatch, compare, time

``prepare`` exports the bundle's Slang module with fp32 and with fp16 weights (fp16 latents),
draws 65,536 (uv, wi, wo) (uv over [-1, 2] to exercise the repeat wrap) and stores the PyTorch
neural material's answers for them (for fp16, with the decoder weights rounded through fp16).
``run`` compiles each module for CUDA, compares on those points (fp32: max abs error < 1e-4 is
the acceptance bound) and times 4,194,304 points per dispatch (median of 10, device idle before
and after each).
"""

import json
import os
import statistics
import sys
import time

import numpy as np


def prepare(bundle: str, out: str) -> None:
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from neuralbake.bakes.neural_material import load_neural_material
    from neuralbake.export.neural_material import export_neural_material_shader

    folder = Path(out)
    for prec in ("fp32", "fp16"):
        export_neural_material_shader(bundle, folder / prec, precision=prec, latent_format="fp16", name="material")
    rng = np.random.default_rng(0)
    n = 1 << 16
    uv = rng.random((n, 2)).astype(np.float32) * 3 - 1

    def dirs() -> np.ndarray:
        v = rng.standard_normal((n, 3)).astype(np.float32)
        v[:, 2] = np.abs(v[:, 2]) + 0.05
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    points = np.concatenate([uv, dirs(), dirs()], 1).astype(np.float32)
    np.save(folder / "points.npy", points)
    material = load_neural_material(bundle)
    t = torch.from_numpy(points)
    with torch.no_grad():
        np.save(folder / "expected_fp32.npy", material.evaluate(material.latent_at(t[:, :2]), t[:, 2:5], t[:, 5:8]).numpy())
        for p in material.decoder.parameters():
            p.data = p.data.half().float()
        np.save(folder / "expected_fp16.npy", material.evaluate(material.latent_at(t[:, :2]), t[:, 2:5], t[:, 5:8]).numpy())


def run(here: str, result_path: str) -> None:
    import slangpy

    kind = os.environ.get("NB_SLANG_DEVICE", "cuda")  # "cpu" to try the script without a GPU
    device = slangpy.create_device(type=getattr(slangpy.DeviceType, kind))
    tiles = 64 if kind == "cuda" else 1
    print(device.info.adapter_name if hasattr(device.info, "adapter_name") else device.info)
    points = np.load(f"{here}/points.npy")
    results = {}
    for prec in ("fp32", "fp16"):
        folder = f"{here}/{prec}"
        m = "material"
        module = device.load_module_from_source(f"nb_cuda_{prec}", open(f"{folder}/{m}.slang").read())
        kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(f"nb_{m}_kernel")]))
        usage = slangpy.BufferUsage.shader_resource
        raw = lambda p: device.create_buffer(data=np.frombuffer(open(p, "rb").read(), dtype=np.uint8).copy(), usage=usage)
        weights = raw(f"{folder}/{m}.weights.{prec}.bin"); latents = raw(f"{folder}/{m}.latents.fp16.bin")
        for n, pts in (("check", points), ("timing", np.tile(points, (tiles, 1)))):
            count = len(pts)
            values = device.create_buffer(element_count=count * 3, struct_size=4, usage=slangpy.BufferUsage.unordered_access)
            binds = {f"nb_{m}_weights": weights, f"nb_{m}_latents": latents,
                     f"nb_{m}_points": device.create_buffer(data=pts.reshape(-1), struct_size=4, usage=usage),
                     f"nb_{m}_mips": device.create_buffer(data=np.zeros(count, np.uint32), struct_size=4, usage=usage),
                     f"nb_{m}_values": values, f"nb_{m}_constants": {f"nb_{m}_point_count": count}}
            kernel.dispatch(thread_count=[count, 1, 1], vars=binds); device.wait_for_idle()
            if n == "check":
                got = values.to_numpy().view(np.float32).reshape(count, 3)
                exp = np.load(f"{here}/expected_{prec}.npy")
                err = float(np.abs(got - exp).max()); rel = float((np.abs(got - exp) / np.maximum(np.abs(exp), 1.0)).max())
                results[prec] = {"max_abs_error": err, "max_error_relative_to_max_1": rel, "max_value": float(np.abs(exp).max())}
            else:
                times = []
                for _ in range(10):
                    device.wait_for_idle(); t = time.perf_counter()
                    kernel.dispatch(thread_count=[count, 1, 1], vars=binds); device.wait_for_idle()
                    times.append(time.perf_counter() - t)
                results[prec]["samples_per_second"] = count / statistics.median(times)
                results[prec]["points"] = count
        print(prec, results[prec], flush=True)
    json.dump(results, open(result_path, "w"), indent=2)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("prepare", "run"):
        sys.exit(__doc__)
    (prepare if sys.argv[1] == "prepare" else run)(sys.argv[2], sys.argv[3])
