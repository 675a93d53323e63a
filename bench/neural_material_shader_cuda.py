"""The exported neural material shader on slangpy's CUDA device, for machines that hold only slangpy and numpy.

Two steps, because the lent GPU machine cannot take neuralbake's whole environment (the full
slangpy wheel alone exceeds what can be carried there):

    python bench/neural_material_shader_cuda.py prepare out/copper DIR   # here: export, points, PyTorch answers
    python bench/neural_material_shader_cuda.py run DIR result.json      # there: compile, dispatch, compare, time

``prepare`` exports the bundle's Slang module with fp32 and with fp16 weights (fp16 latents),
draws 65,536 (uv, wi, wo) (uv over [-1, 2] to exercise the repeat wrap) and stores the PyTorch
neural material's answers for them (for fp16, with the decoder weights rounded through fp16), and
the answers of the PyTorch model of the tensor kernel's fp16 arithmetic
(``bakes.neural_material.model.tensor_kernel_reference``). ``run`` compiles both kernels of each module for CUDA (the scalar
``nb_<m>_kernel``, one thread per sample, and ``nb_<m>_tensor_kernel``, warp tiles on the tensor
cores), compares them on those points and exits non-zero past the bounds (scalar: 1e-5 of
max(|value|, 1) against PyTorch on the same weights; tensor: 2e-3 of it against its fp16 model,
the check of the CUDA fragment layout; the tensor kernel against the fp32 material is recorded) and
times 4,194,304 and 16,777,216 points per dispatch (median of 10, device idle before and after
each). ``NB_SLANG_DEVICE=cpu`` runs the same script on slangpy's CPU device (small sizes).
"""

import json
import os
import sys

import numpy as np
from timing import measure  # bench/timing.py: carry it beside this script


def prepare(bundle: str, out: str) -> None:
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from neuralbake.bakes.neural_material import load_neural_material
    from neuralbake.bakes.neural_material.model import tensor_kernel_reference
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
        np.save(folder / "tensor_fp32.npy", tensor_kernel_reference(material, material.latent_at(t[:, :2]), t[:, 2:5], t[:, 5:8]).numpy())
        for p in material.decoder.parameters():
            p.data = p.data.half().float()
        np.save(folder / "expected_fp16.npy", material.evaluate(material.latent_at(t[:, :2]), t[:, 2:5], t[:, 5:8]).numpy())
        np.save(folder / "tensor_fp16.npy", tensor_kernel_reference(material, material.latent_at(t[:, :2]), t[:, 2:5], t[:, 5:8]).numpy())


def _errors(got: np.ndarray, expected: np.ndarray) -> dict:
    error = np.abs(got - expected)
    return {
        "max_abs_error": float(error.max()),
        "max_error_relative_to_max_1": float((error / np.maximum(np.abs(expected), 1.0)).max()),
        "mean_abs_error": float(error.mean()),
        "max_value": float(np.abs(expected).max()),
        "finite": bool(np.isfinite(got).all()),
    }


def _read(path: str, mode: str = "r"):
    with open(path, mode) as file:
        return file.read()


def run(here: str, result_path: str) -> None:
    import slangpy

    kind = os.environ.get("NB_SLANG_DEVICE", "cuda")  # "cpu" to try the script without a GPU
    device = slangpy.create_device(type=getattr(slangpy.DeviceType, kind))
    repeats = (64, 256) if kind == "cuda" else (1,)
    adapter = str(getattr(device.info, "adapter_name", kind))
    print(adapter)
    points = np.load(f"{here}/points.npy")
    results: dict = {"device": adapter, "slangpy": slangpy.__version__}
    usage = slangpy.BufferUsage.shader_resource
    m = "material"

    def raw(path: str):
        return device.create_buffer(data=np.frombuffer(_read(path, "rb"), dtype=np.uint8).copy(), usage=usage)

    def save() -> None:
        with open(result_path, "w") as file:
            json.dump(results, file, indent=2)

    failures: list[str] = []
    for prec in ("fp32", "fp16"):
        folder = f"{here}/{prec}"
        tensor = json.loads(_read(f"{folder}/{m}.json"))["tensor_kernels"][0]
        module = device.load_module_from_source(f"nb_cuda_{prec}", _read(f"{folder}/{m}.slang"))
        weights, latents = raw(f"{folder}/{m}.weights.{prec}.bin"), raw(f"{folder}/{m}.latents.fp16.bin")
        kernels = {
            "scalar": (f"nb_{m}_kernel", lambda n: n),
            "tensor": (tensor["entry"], lambda n, t=tensor: -(-n // t["points_per_group"]) * t["threads_per_group"]),
        }
        for variant, (entry, threads) in kernels.items():
            kernel = device.create_compute_kernel(device.link_program([module], [module.entry_point(entry)]))
            row = results.setdefault(f"{variant}_{prec}", {})
            for repeat in (0, *repeats):
                pts = points if repeat == 0 else np.tile(points, (repeat, 1))
                count = len(pts)
                values = device.create_buffer(data=np.full(count * 3, np.nan, np.float32), struct_size=4, usage=slangpy.BufferUsage.unordered_access)
                binds = {
                    f"nb_{m}_weights": weights,
                    f"nb_{m}_latents": latents,
                    f"nb_{m}_points": device.create_buffer(data=pts.reshape(-1), struct_size=4, usage=usage),
                    f"nb_{m}_mips": device.create_buffer(data=np.zeros(count, np.uint32), struct_size=4, usage=usage),
                    f"nb_{m}_values": values,
                    f"nb_{m}_constants": {f"nb_{m}_point_count": count},
                }

                def dispatch(kernel=kernel, threads=threads, count=count, binds=binds) -> None:
                    kernel.dispatch(thread_count=[threads(count), 1, 1], vars=binds)

                dispatch()
                device.wait_for_idle()
                if repeat == 0:
                    got = values.to_numpy().view(np.float32).reshape(count, 3)
                    row["against_pytorch"] = _errors(got, np.load(f"{here}/expected_{prec}.npy"))
                    if variant == "tensor":
                        row["against_fp16_model"] = _errors(got, np.load(f"{here}/tensor_{prec}.npy"))
                else:
                    row[f"samples_per_second_{count}"] = count / measure(dispatch, repeats=10, warmup=0, sync=device.wait_for_idle).median
            print(variant, prec, row, flush=True)
            save()
        for variant, bound, key in (("scalar", 1e-5, "against_pytorch"), ("tensor", 2e-3, "against_fp16_model")):
            error = results[f"{variant}_{prec}"][key]
            if not error["finite"] or error["max_error_relative_to_max_1"] > bound:
                failures.append(f"{variant} kernel, {prec} weights: {key} error {error['max_error_relative_to_max_1']:.2e} > {bound:.0e}")
        largest = f"samples_per_second_{len(points) * repeats[-1]}"
        ratio = results[f"tensor_{prec}"][largest] / results[f"scalar_{prec}"][largest]
        results[f"tensor_over_scalar_{prec}"] = ratio
        print(f"{prec} weights: tensor kernel {ratio:.1f}x the scalar kernel at {len(points) * repeats[-1]:,} points", flush=True)
        save()
    results["failures"] = failures
    save()
    print("\n".join(["FAIL " + failure for failure in failures]) or "parity within bounds", flush=True)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("prepare", "run"):
        sys.exit(__doc__)
    (prepare if sys.argv[1] == "prepare" else run)(sys.argv[2], sys.argv[3])
