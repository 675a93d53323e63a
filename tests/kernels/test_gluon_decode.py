"""The Gluon neural-material decode on the CPU: its values on Triton's interpreter, which decodes it takes, and that it
compiles for an H100.

Triton's interpreter does not run Gluon itself; ``tests/kernels/gluon_interpret.py`` runs the kernel's Python body
there, and these tests check its values against PyTorch and the Triton decode. What only the hardware does (layouts,
barriers, the tensor cores' sums) is checked on a GPU by ``tests/kernels/test_gpu_parity.py``.
These tests also compile it for sm_90 with the CUDA tools in Triton's wheel (no GPU needed): at every shape the
parity script runs, it must compile with no spilled registers, read each layer's weights from shared memory
inside its tile loop, and never stage them there again.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from neuralbake.bakes.neural_material.model import NeuralMaterial
from neuralbake.kernels import decoders, gluon_decode
from neuralbake.kernels.decoders import FusedNeuralMaterial
from neuralbake.nn.mlp import MLP, MLPConfig

SUPPORTED = {
    "device_capability": (9, 0),
    "hidden_activation": "relu",
    "leak": 0.01,
    "half_sums": True,
    "kp": 16,
    "hp": 64,
    "op": 4,
    "hidden": 2,
    "feature_columns": 8,
    "wide": False,
}


def test_the_gluon_decode_takes_fp16_relu_decoders_of_split_features_on_an_ampere_or_later_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    if not gluon_decode._AVAILABLE:
        pytest.skip("this Triton has no Gluon")
    assert gluon_decode.gluon_reason(**SUPPORTED) is None
    assert gluon_decode.gluon_reason(**(SUPPORTED | {"hidden_activation": "leaky_relu", "hp": 32, "kp": 32, "feature_columns": 16, "hidden": 3})) is None
    refused = [
        ("device_capability", None),  # no CUDA GPU
        ("device_capability", (7, 5)),  # before Ampere
        ("half_sums", False),
        ("hidden_activation", "tanh"),
        ("leak", 1.5),
        ("feature_columns", 16),  # one tile of the whole input width
        ("hp", 128),
        ("op", 16),
        ("hidden", 4),
        ("wide", True),
    ]
    for field, value in refused:
        assert gluon_decode.gluon_reason(**(SUPPORTED | {field: value})) is not None, field


def test_on_the_cpu_the_decode_is_the_triton_kernel_for_want_of_a_gpu() -> None:
    latents = [torch.randn(8, 8, 8).half(), torch.randn(4, 4, 8).half()]
    decoder = MLP(MLPConfig(inputs=14, hidden=64, layers=3, outputs=3, hidden_activation="relu", output_activation="none")).half()
    fused = FusedNeuralMaterial(NeuralMaterial(latents, decoder, ("wi", "wo")))
    assert fused.kernel == "triton"
    assert fused.gluon_reason is not None and ("capability" in fused.gluon_reason or "Gluon" in fused.gluon_reason), fused.gluon_reason


def test_launch_constants_swizzle_whole_bank_rows_and_pad_the_hidden_buffer_to_a_power_of_two() -> None:
    constants = gluon_decode.launch_constants(16, 64, 4, 3)
    assert constants["OPM"] == 8 and constants["HR"] == 4 * 64
    assert (constants["PW"], constants["MW"]) == (1, 8)  # 128-byte rows: 8 phases
    assert (constants["PX"], constants["MX"]) == (4, 2)  # 32-byte rows: 4 rows a phase
    assert (constants["PO"], constants["MO"]) == (8, 1)
    assert gluon_decode.launch_constants(32, 16, 8, 0)["HR"] == 16


def test_a_program_takes_up_to_16_tiles_but_leaves_at_least_8_programs_an_sm() -> None:
    assert gluon_decode.tiles_per_program(131072, 132) == gluon_decode.TILES_PER_PROGRAM == 16  # 2^24 samples on an H100
    assert gluon_decode.tiles_per_program(8192, 132) == 7  # 2^20: 1,171 programs, 8.9 an SM
    assert gluon_decode.tiles_per_program(512, 132) == 1  # 2^16: a tile each
    assert gluon_decode.tiles_per_program(0, 132) == 1


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    """``bench/kernels_sass.py --gluon --json``: the kernel compiled for sm_90 at the parity shapes, counted. In a
    process of its own: with ``TRITON_INTERPRET=1`` (set for these tests) Gluon cannot compile its helpers."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "kernels_sass.py"), "--gluon", "--json"], check=False, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tools_present() -> bool:
    """Whether Triton's wheel carries the CUDA tools bench/kernels_sass.py compiles and reads SASS with."""
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return False
    tools = Path(spec.origin).parent / "backends" / "nvidia" / "bin"
    return all((tools / name).is_file() for name in ("ptxas", "cuobjdump", "nvdisasm"))


@pytest.mark.skipif(not gluon_decode._AVAILABLE or not _tools_present(), reason="needs Triton with Gluon and its CUDA tools")
def test_the_gluon_decode_compiles_for_sm90_without_spills_and_keeps_its_weights_in_shared_memory(compiled: list[dict]) -> None:
    rows, warps = gluon_decode.TILE
    rows_per_thread = rows // (32 * warps)
    assert len(compiled) == 12  # six shapes, bilinear and trilinear
    for counts in compiled:
        shape, loop, before = counts["shape"], counts["loop"], counts["before"]
        feature_columns = shape[2] // 2
        assert counts["local"] == 0, shape  # no spills
        assert loop.get("HMMA", 0) > 0 and loop.get("LDSM", 0) > 0, shape  # products on weight fragments read from shared memory in the loop
        assert before.get("STS", 0) > 0, shape  # the weights are stored there before it
        # in the loop, stores only stage the two feature tiles (16 bytes a store), never the weights again
        assert loop.get("STS", 0) <= 2 * rows_per_thread * feature_columns // 8, (shape, loop.get("STS"))


def _material(
    channels: int, directions: tuple[str, ...], *, hidden: int = 32, layers: int = 2, activation: str = "leaky_relu",
    sizes: tuple[tuple[int, int], ...] = ((8, 8), (4, 4)), seed: int = 3,
) -> NeuralMaterial:  # fmt: skip
    """An fp16 neural material: latents of ``sizes`` (height, width) and a decoder of ``layers`` linear layers."""
    torch.manual_seed(seed)
    latents = [torch.randn(h, w, channels).half() for h, w in sizes]
    inputs = channels + 3 * len(directions)
    decoder = MLP(MLPConfig(inputs=inputs, hidden=hidden, layers=layers, outputs=3, hidden_activation=activation, output_activation="none")).half()
    return NeuralMaterial(latents, decoder, directions)


@pytest.mark.parametrize("filtered", [False, True])
def test_the_decode_launches_the_gluon_kernel_with_each_argument_in_its_place(monkeypatch: pytest.MonkeyPatch, filtered: bool) -> None:
    """The launch FusedNeuralMaterial makes where gluon_reason allows, bound by name to the kernel's parameters (its
    values run on a GPU only)."""
    calls = []
    monkeypatch.setattr(gluon_decode, "gluon_reason", lambda **_: None)
    monkeypatch.setattr(gluon_decode, "launch", lambda tiles, sms, args, constants: calls.append((tiles, sms, args, constants)))
    monkeypatch.setattr(decoders, "sm_count", lambda device: 132)
    material = _material(5, ("half", "wi"))  # 11 inputs: 5 latents and 6 direction features in two 8-column tiles
    fused = FusedNeuralMaterial(material)
    assert fused.kernel == "gluon" and fused.feature_columns == 8
    n = 300
    uv, wi, wo, lod = torch.rand(n, 2), torch.rand(n, 3), torch.rand(n, 3), torch.rand(n) * 3
    fused(uv, wi, wo, lod if filtered else None)
    ((tiles, sms, args, constants),) = calls
    assert tiles == -(-n // gluon_decode.TILE[0]) and sms == 132
    rows, warps = gluon_decode.TILE
    kernel = gluon_decode.neural_material_gluon_kernel
    bound = inspect.signature(kernel.fn).bind(*args, 1, BM=rows, W=warps, **constants).arguments
    assert bound["N"] == n and bound["TRILINEAR"] is filtered and bound["LEVELS"] == 2
    assert torch.equal(bound["uv_ptr"], uv) and torch.equal(bound["wi_ptr"], wi) and torch.equal(bound["wo_ptr"], wo)
    assert bound["lod_ptr"] is not None and (not filtered or torch.equal(bound["lod_ptr"], lod))
    assert bound["lat_ptr"] is fused.latents and bound["w_in"] is fused.w_in
    p = fused.packed
    assert bound["b_in"] is p.b_in and bound["w_hid"] is p.w_hid and bound["b_hid"] is p.b_hid and bound["w_out"] is p.w_out and bound["b_out"] is p.b_out
    assert (bound["C"], bound["FP"], bound["KP"], bound["HP"], bound["OP"], bound["HIDDEN"]) == (5, 8, 16, 32, 4, 1)
    assert (bound["DIR0"], bound["DIR1"], bound["DIR2"]) == (2, 0, -1) and bound["HACT"] == 2 and bound["LEAK"] == pytest.approx(0.01)
    # the input layer's rows as the kernel reads them: latents from row 0, directions from row FP (the split tiles)
    assert torch.equal(fused.w_in[:5], p.w_in[:5]) and torch.equal(fused.w_in[8:14], p.w_in[5:11])
    assert not fused.w_in[5:8].any() and not fused.w_in[14:].any()


def test_a_gluon_kernel_that_fails_here_leaves_the_triton_decode_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gluon_decode, "gluon_reason", lambda **_: None)

    def failing(*_):
        raise RuntimeError("PTX assembly failed\n(details)")

    monkeypatch.setattr(gluon_decode, "launch", failing)
    monkeypatch.setattr(decoders, "sm_count", lambda device: 132)
    material = _material(8, ("wi", "wo"))
    fused = FusedNeuralMaterial(material)
    uv, wi = torch.rand(40, 2), torch.nn.functional.normalize(torch.rand(40, 3), dim=1)
    with pytest.warns(RuntimeWarning, match=r"PTX assembly failed\); using the Triton decode"):
        out = fused(uv, wi, wi)
    assert fused.kernel == "triton" and "RuntimeError: PTX assembly failed" in fused.gluon_reason
    assert torch.allclose(out, material.decode(uv, wi, wi), atol=2e-2)  # the Triton decode's value (the interpreter)


# The kernel's values on Triton's CPU interpreter (tests/kernels/gluon_interpret.py runs its Python body there), at
# the shapes bench/kernels_sass.py compiles and tests/kernels/test_gpu_parity.py checks on a GPU: against PyTorch (fp16's 2e-2
# of the output's scale, as tests/kernels/test_fused.py states) and against the Triton decode (5e-3, as the GPU parity
# check: the hidden layers summed in fp16 by both, in another order).

INTERPRETED_SHAPES = [
    # (latent channels, directions, hidden width, hidden-to-hidden layers, activation)
    pytest.param(8, ("wi", "wo"), 64, 2, "relu", id="copper-tray"),
    pytest.param(8, ("half", "wo", "wi"), 64, 2, "relu", id="32-inputs-half-vector"),
    pytest.param(8, ("wi", "wo"), 32, 1, "leaky_relu", id="width-32-leaky"),
    pytest.param(4, ("half",), 16, 0, "relu", id="width-16-no-hidden"),
    pytest.param(16, ("wi", "wo", "half"), 64, 3, "leaky_relu", id="16-latents-3-hidden"),
    pytest.param(16, ("wi", "wo"), 64, 2, "relu", id="16-latents"),
]


@pytest.mark.parametrize("filtered", [False, True], ids=["bilinear", "trilinear"])
@pytest.mark.parametrize(("channels", "directions", "hidden", "layers", "activation"), INTERPRETED_SHAPES)
def test_the_gluon_decode_on_the_interpreter_matches_pytorch_and_the_triton_decode(
    monkeypatch: pytest.MonkeyPatch, filtered: bool, channels: int, directions: tuple[str, ...], hidden: int, layers: int, activation: str
) -> None:
    from neuralbake.kernels import interpreting

    if not gluon_decode._AVAILABLE:
        pytest.skip("this Triton has no Gluon")
    if not interpreting():
        pytest.skip("runs the kernel on Triton's CPU interpreter (TRITON_INTERPRET=1)")
    from tests.kernels.test_fused import _hemisphere

    material = _material(channels, directions, hidden=hidden, layers=layers + 1, activation=activation, sizes=((16, 8), (8, 4), (4, 2)), seed=7)
    n = 666  # 6 tiles: two programs of 3 (the bilinear decode loads each next tile's uv ahead), the last one partial
    g = torch.Generator().manual_seed(9)
    uv = torch.rand(n, 2, generator=g) * 4 - 2  # wraps, negative too
    wi, wo = _hemisphere(n, 9)  # half the samples above the surface, the others either
    lod = torch.rand(n, generator=g) * 3.4 - 0.2 if filtered else None  # past both ends of the chain too
    triton_decode = FusedNeuralMaterial(material)
    assert triton_decode.kernel == "triton"  # on the CPU: no GPU to ask for a capability
    from tests.kernels.gluon_interpret import interpreted

    monkeypatch.setattr(decoders, "nvidia_capability", lambda device: (9, 0))
    monkeypatch.setattr(gluon_decode, "SPREAD", 2)
    monkeypatch.setattr(gluon_decode, "neural_material_gluon_kernel", interpreted(gluon_decode.neural_material_gluon_kernel))
    decode = FusedNeuralMaterial(material)
    assert decode.kernel == "gluon", decode.gluon_reason
    assert gluon_decode.tiles_per_program(6, decode._sms) == 3
    with torch.no_grad():
        expected = material.decode(uv, wi, wo, lod).float()
        actual = decode(uv, wi, wo, lod)
        by_triton = triton_decode(uv, wi, wo, lod)
    assert decode.kernel == "gluon" and actual.shape == (n, 3)  # no failure fell back to the Triton decode
    below = (wi[:, 2] <= 0) | (wo[:, 2] <= 0)
    assert bool((actual[below] == 0).all()) and bool(below.any()) and not bool(below.all())
    scale = float(expected.abs().max())
    assert scale > 0
    assert float((actual - expected).abs().max()) <= 2e-2 * scale
    assert float((actual - by_triton).abs().max()) <= 5e-3 * scale
