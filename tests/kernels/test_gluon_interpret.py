"""tests/kernels/gluon_interpret.py: Gluon's shared memory, views and products on Triton's CPU interpreter, checked
on small kernels against numpy (the Gluon kernels' own values are checked in test_gluon_train.py and
test_gluon_decode.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from neuralbake.kernels import interpreting
from neuralbake.kernels.gluon_decode import _activate, _directions

pytest.importorskip("triton.experimental.gluon")
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from tests.kernels.gluon_interpret import interpreted

pytestmark = pytest.mark.skipif(not interpreting(), reason="runs on Triton's CPU interpreter (TRITON_INTERPRET=1)")


@gluon.jit
def _products_kernel(a_ptr, b_ptr, c_ptr, out_ptr, M: gl.constexpr, K: gl.constexpr, N: gl.constexpr):
    """out[0] = a @ b^T + c (``b`` stored [N, K], read through a permuted view), out[1] = a @ b^T (``use_acc=False``),
    out[2] = the first half of ``a``'s columns stored into the second half of a buffer's columns and read back whole
    (the first half never stored)."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [1, 0])
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    r = gl.arange(0, M, gl.SliceLayout(1, L))
    k = gl.arange(0, K, gl.SliceLayout(0, L))
    n = gl.arange(0, N, gl.SliceLayout(1, L))
    a_s = gl.allocate_shared_memory(gl.float16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.float16),
                                    gl.load(a_ptr + gl.expand_dims(r * K, 1) + gl.expand_dims(k, 0)))  # fmt: skip
    both = gl.allocate_shared_memory(gl.float16, [2, N, K], gl.NVMMASharedLayout.get_default_for([N, K], gl.float16))
    both.index(1).store(gl.load(b_ptr + gl.expand_dims(n * K, 1) + gl.expand_dims(k, 0)))
    fence_async_shared()
    ar = gl.arange(0, M, gl.SliceLayout(1, ACC))
    ac = gl.arange(0, N, gl.SliceLayout(0, ACC))
    where = gl.expand_dims(ar * N, 1) + gl.expand_dims(ac, 0)
    c = gl.load(c_ptr + where)
    gl.store(out_ptr + where, warpgroup_mma(a_s, both.index(1).permute((1, 0)), c))
    gl.store(out_ptr + M * N + where, warpgroup_mma(a_s, both.index(1).permute((1, 0)), c, use_acc=False))
    half = gl.allocate_shared_memory(gl.float16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.float16))
    half.slice(K // 2, K // 2, dim=1).store(a_s.slice(0, K // 2, dim=1).load(L))
    gl.store(out_ptr + 2 * M * N + gl.expand_dims(r * K, 1) + gl.expand_dims(k, 0), half.load(L).to(gl.float32))


@gluon.jit
def _wrong_store_kernel(a_ptr, M: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [1, 0])
    r = gl.arange(0, M, gl.SliceLayout(0, L))
    buffer = gl.allocate_shared_memory(gl.float16, [M], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    buffer.store(gl.load(a_ptr + r))  # fp32 into fp16: Gluon refuses it


@gluon.jit
def _joined_kernel(a_ptr, wi_ptr, wo_ptr, out_ptr, M: gl.constexpr, F: gl.constexpr, LEAK: gl.constexpr):
    """out = leaky_relu([a | wi, wo, half vector]): two column blocks joined into one tile. The second block comes from
    gluon_decode's ``_directions`` and the activation from its ``_activate``: Gluon functions of another module, which
    call that module's own names (``_direction_tile``) and read the tile's layout."""
    L: gl.constexpr = gl.BlockedLayout([1, F], [32, 1], [4, 1], [1, 0])
    r = gl.arange(0, M, gl.SliceLayout(1, L))
    f = gl.arange(0, F, gl.SliceLayout(0, L))
    directions = _directions(wi_ptr, wo_ptr, r, r < M, f, M, F, L, 0, 1, 2).to(gl.float16)
    joined = gl.reshape(gl.permute(gl.join(gl.load(a_ptr + gl.expand_dims(r * F, 1) + gl.expand_dims(f, 0)), directions), (0, 2, 1)), [M, 2 * F])
    J: gl.constexpr = gl.BlockedLayout([1, 2 * F], [32, 1], [4, 1], [1, 0])
    r2 = gl.arange(0, M, gl.SliceLayout(1, J))
    f2 = gl.arange(0, 2 * F, gl.SliceLayout(0, J))
    gl.store(out_ptr + gl.expand_dims(r2 * 2 * F, 1) + gl.expand_dims(f2, 0), _activate(joined, 2, LEAK))


def test_joined_tiles_and_another_modules_gluon_functions_on_the_interpreter() -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.randn(32, 16, generator=g).half()
    wi = torch.nn.functional.normalize(torch.randn(32, 3, generator=g), dim=1)
    wo = torch.nn.functional.normalize(torch.randn(32, 3, generator=g), dim=1)
    out = torch.zeros(32, 32).half()
    interpreted(_joined_kernel)[(1,)](a, wi, wo, out, M=32, F=16, LEAK=0.25)
    half = torch.nn.functional.normalize(wi + wo, dim=1)
    expected = torch.cat([a, wi.half(), wo.half(), half.half(), torch.zeros(32, 7).half()], dim=1)
    assert torch.allclose(out.float(), torch.where(expected > 0, expected, expected * 0.25).float(), atol=1e-3)


@gluon.jit
def _twice(x):
    return x * 2.0


@gluon.jit
def _thrice(x):
    return x * 3.0


_SCALED = _twice


@gluon.jit
def _refusals_kernel(a_ptr, out_ptr, CASE: gl.constexpr):
    """Case 0: ``_SCALED`` (a module global) of a; 1: an index past a buffer's end; 2: an asynchronous warpgroup MMA;
    3: a right operand in registers; 4: ``zeros_like`` in fp32 of an fp16 tile."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))
    c = gl.arange(0, 16, gl.SliceLayout(0, L))
    where = gl.expand_dims(r * 16, 1) + gl.expand_dims(c, 0)
    a = gl.load(a_ptr + where)
    a_s = gl.allocate_shared_memory(gl.float16, [2, 16, 16], gl.NVMMASharedLayout.get_default_for([16, 16], gl.float16))
    a_s.index(0).store(a)
    acc = gl.zeros([16, 16], gl.float32, L)
    if CASE == 0:
        gl.store(out_ptr + where, _SCALED(a.to(gl.float32)))
    elif CASE == 1:
        a_s.index(2).store(a)
    elif CASE == 2:
        warpgroup_mma(a_s.index(0), a_s.index(0), acc, is_async=True)
    elif CASE == 3:
        warpgroup_mma(a_s.index(0), a, acc)
    else:
        gl.store(out_ptr + where, gl.zeros_like(a, dtype=gl.float32) + 5.0)


def test_the_interpreter_reads_module_globals_at_each_launch_and_refuses_what_gluon_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(3)).half()
    out = torch.zeros(16, 16)
    interpreted(_refusals_kernel)[(1,)](a, out, CASE=0)
    assert torch.equal(out, a.float() * 2)
    monkeypatch.setattr(sys.modules[__name__], "_SCALED", _thrice)  # a later launch sees the module as it is then
    interpreted(_refusals_kernel)[(1,)](a, out, CASE=0)
    assert torch.equal(out, a.float() * 3)
    for case, message in ((1, "index 2 of shared memory"), (2, "synchronous warpgroup_mma only"), (3, "right operand from shared memory")):
        with pytest.raises(Exception, match=message):
            interpreted(_refusals_kernel)[(1,)](a, out, CASE=case)
    interpreted(_refusals_kernel)[(1,)](a, out, CASE=4)
    assert torch.equal(out, torch.full((16, 16), 5.0))


def test_products_views_and_unwritten_shared_memory_on_the_interpreter() -> None:
    m, k, n = 64, 16, 32
    g = torch.Generator().manual_seed(1)
    a = torch.randn(m, k, generator=g).half()
    b = torch.randn(n, k, generator=g).half()
    c = torch.randn(m, n, generator=g)
    out = torch.zeros(2 * m * n + m * k)
    interpreted(_products_kernel)[(1,)](a, b, c, out, M=m, K=k, N=n, num_warps=4)
    exact = a.double() @ b.double().T
    assert torch.allclose(out[: m * n].reshape(m, n).double(), exact + c.double(), atol=1e-5)
    assert torch.allclose(out[m * n : 2 * m * n].reshape(m, n).double(), exact, atol=1e-5)
    read = out[2 * m * n :].reshape(m, k)
    assert torch.equal(read[:, k // 2 :], a[:, : k // 2].float())  # the slice aliases the buffer
    assert bool(read[:, : k // 2].isnan().all())  # never stored: NaN, not zeros


def test_a_store_of_another_dtype_is_refused_as_gluon_refuses_it() -> None:
    with pytest.raises(Exception, match="float32 into fp16|fp32 into fp16"):
        interpreted(_wrong_store_kernel)[(1,)](torch.zeros(32), M=32)


def test_only_gluon_kernels_are_interpreted() -> None:
    with pytest.raises(TypeError, match="not a Gluon kernel"):
        interpreted(np.add)


def test_each_mutation_of_bench_gluon_mutations_still_finds_its_text_in_the_kernels() -> None:
    """bench/gluon_mutations.py (do the interpreter tests fail on a broken kernel?) edits the kernels' text: each edit
    must still match exactly one place, or the script stops; this keeps it runnable as the kernels change."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("gluon_mutations", root / "bench" / "gluon_mutations.py")
    mutations = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutations)
    assert sum(must for *_, must in mutations.MUTATIONS) >= 10
    for kind, what, text, replacement, _ in mutations.MUTATIONS:
        source = (root / (mutations.TRAIN if kind == "train" else mutations.DECODE)).read_text()
        assert source.count(text) == 1 and text != replacement, what
