"""Gluon kernels on Triton's CPU interpreter: the part of Gluon this project's kernels use, run with numpy.

Triton's interpreter (``TRITON_INTERPRET=1``) runs ``@triton.jit`` kernels on the CPU, one program after another, each
``tl`` operation on numpy arrays. It does not run Gluon (Triton 3.6 and 3.9 raise on a Gluon kernel there), so the two
Gluon kernels (:mod:`~neuralbake.kernels.gluon_decode`, :mod:`~neuralbake.kernels.gluon_train`) could only be checked
for values on a GPU. No library fills that gap, so this module does, for the operations those kernels use. It runs a
Gluon kernel's own Python body on the interpreter with:

- the layouts dropped (``gl.arange(0, n, layout)`` is ``tl.arange(0, n)``, ``gl.convert_layout(x, layout)`` is ``x``):
  a layout says which thread holds which value, not what the value is;
- shared memory as a numpy array, with the views the kernels take of it (``index``, ``slice``, ``permute``, which alias
  the buffer as on the GPU, bounds checked) and ``store`` / ``load`` (a store of another shape or dtype refused, as
  Gluon refuses it); a new buffer holds NaN (or -1 for integers) until stored, so a product that reads what no store
  wrote gives NaN rather than a plausible value;
- ``warpgroup_mma`` and ``mma_v2`` as products in fp32 of the fp16 operands (exact products, fp32 sums, as the tensor
  cores give with an fp32 accumulator), added to the accumulator unless ``use_acc=False``; with an fp16 accumulator
  (the decode's hidden layers) the sum is rounded to fp16 once, where the tensor cores round after every 16 of the
  depth; ``warpgroup_mma`` synchronous only (``is_async`` is refused);
- fences and barriers as nothing: the programs run one at a time, one thread each.

So a CPU test runs the kernel's indexing, masks, tile loop, views, products and arithmetic against the PyTorch
reference. What it cannot see is what only the hardware does: layouts and the fragments they assign, a missing
barrier or fence (a race), and the order the tensor cores sum in (``tests/kernels/test_gpu_parity.py`` checks those on a GPU).
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction, TensorHandle

try:
    from triton.experimental.gluon import language as _GLUON_LANGUAGE
    from triton.experimental.gluon._runtime import GluonJITFunction
except ImportError:  # pragma: no cover - a Triton without Gluon: nothing to interpret
    GluonJITFunction = _GLUON_LANGUAGE = None

_NUMPY = {tl.float16: np.float16, tl.float32: np.float32, tl.float64: np.float64, tl.int32: np.int32, tl.int64: np.int64, tl.int16: np.int16, tl.int8: np.int8}


def _numpy_dtype(dtype) -> type:
    if dtype not in _NUMPY:
        raise NotImplementedError(f"the Gluon interpreter has no {dtype} shared memory (only {', '.join(map(str, _NUMPY))})")
    return _NUMPY[dtype]


def _value(x):
    return x.value if isinstance(x, tl.constexpr) else x


def _tensor(data: np.ndarray, dtype) -> tl.tensor:
    """An interpreter tensor of ``data`` as Triton's ``dtype``."""
    data = np.ascontiguousarray(data, dtype=_numpy_dtype(dtype))
    return tl.tensor(TensorHandle(data, dtype), tl.block_type(dtype, list(data.shape)))


class _Layout:
    """Any Gluon layout: the interpreter's values have none."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    @staticmethod
    def get_default_for(*args, **kwargs) -> _Layout:
        return _Layout()


class _Shared:
    """A shared-memory buffer, or a view of one: a numpy array with Gluon's shared-memory descriptor methods."""

    def __init__(self, array: np.ndarray, dtype) -> None:
        self.array, self.dtype = array, dtype

    @property
    def shape(self) -> list[int]:
        return list(self.array.shape)

    def store(self, value: tl.tensor) -> None:
        """As Gluon's: the value's shape and dtype must be the buffer's."""
        data = value.handle.data
        if tuple(data.shape) != self.array.shape:
            raise ValueError(f"a store of shape {tuple(data.shape)} into shared memory of shape {self.array.shape}")
        if value.dtype != self.dtype:
            raise TypeError(f"a store of {value.dtype} into {self.dtype} shared memory")
        self.array[...] = data

    def load(self, layout=None) -> tl.tensor:
        return _tensor(self.array.copy(), self.dtype)

    def index(self, i) -> _Shared:
        i = int(_value(i))
        if not 0 <= i < self.array.shape[0]:
            raise IndexError(f"index {i} of shared memory of shape {self.array.shape}")
        return _Shared(self.array[i], self.dtype)

    def slice(self, start, length, dim=0) -> _Shared:
        start, length, dim = int(_value(start)), int(_value(length)), int(_value(dim))
        if start < 0 or length < 1 or start + length > self.array.shape[dim]:
            raise IndexError(f"slice [{start}, {start + length}) of dimension {dim} of shared memory of shape {self.array.shape}")
        where = [slice(None)] * self.array.ndim
        where[dim] = slice(start, start + length)
        return _Shared(self.array[tuple(where)], self.dtype)

    def permute(self, order) -> _Shared:
        return _Shared(self.array.transpose([int(_value(axis)) for axis in order]), self.dtype)


def _allocate_shared_memory(element_ty, shape, layout=None, value=None) -> _Shared:
    element_ty = _value(element_ty)
    np_dtype = _numpy_dtype(element_ty)
    fill = np.nan if np.issubdtype(np_dtype, np.floating) else -1
    buffer = _Shared(np.full([int(_value(s)) for s in shape], fill, dtype=np_dtype), element_ty)
    if value is not None:
        buffer.store(value)
    return buffer


def _operand(x) -> np.ndarray:
    return (x.array if isinstance(x, _Shared) else x.handle.data).astype(np.float32)


def _product(a, b, acc: tl.tensor, use_acc=True) -> tl.tensor:
    """``a @ b + acc`` (``a @ b`` with ``use_acc=False``): fp32 products and sums, rounded to the accumulator's dtype
    once (the tensor cores round an fp16 accumulator after every 16 of the depth: a simplification)."""
    out = np.matmul(_operand(a), _operand(b))
    if out.shape != acc.handle.data.shape:
        raise ValueError(f"a product of shape {out.shape} into an accumulator of shape {acc.handle.data.shape}")
    if _value(use_acc):
        out = out + acc.handle.data.astype(np.float32)
    return _tensor(out, acc.dtype)


def _warpgroup_mma(a, b, acc, *, use_acc=True, precision=None, max_num_imprecise_acc=None, is_async=False) -> tl.tensor:
    """Hopper's ``warpgroup_mma``, synchronous: ``a`` in shared memory or registers, ``b`` in shared memory."""
    if _value(is_async):
        raise NotImplementedError("the Gluon interpreter runs synchronous warpgroup_mma only (is_async=False)")
    if not isinstance(b, _Shared):
        raise TypeError("warpgroup_mma reads its right operand from shared memory")
    return _product(a, b, acc, use_acc)


def _mma_v2(a, b, acc, input_precision=None) -> tl.tensor:
    """Ampere's ``mma_v2``: both operands in registers."""
    if isinstance(a, _Shared) or isinstance(b, _Shared):
        raise TypeError("mma_v2 takes its operands in registers (load them from shared memory first)")
    return _product(a, b, acc)


def _zeros_like(input, shape=None, dtype=None, layout=None) -> tl.tensor:
    if shape is None and dtype is None:
        return tl.zeros_like(input)
    return tl.zeros(input.shape if shape is None else shape, input.dtype if dtype is None else dtype)


def _nothing(*args, **kwargs) -> None:
    return None


def _late(name: str) -> Callable:
    """``tl.<name>`` as it is when called (the interpreter replaces ``tl``'s builtins while a kernel runs)."""
    return lambda *args, **kwargs: getattr(tl, name)(*args, **kwargs)


def _boolean_mask(call: Callable) -> Callable:
    """``tl.load`` / ``tl.store`` taking a mask whose numpy values are not bool: Triton 3.9's interpreter gives
    ``block_of_int1 & scalar_int1`` (the bilinear decode's look-ahead mask) int32 values, which its load then refuses."""

    def masked(pointer, *args, mask=None, **kwargs):
        if isinstance(mask, tl.tensor) and mask.handle.data.dtype != np.bool_:
            mask = tl.tensor(TensorHandle(mask.handle.data.astype(np.bool_), mask.handle.dtype), mask.type)
        return call(pointer, *args, mask=mask, **kwargs)

    return masked


def _without_layout(name: str, positional: int) -> Callable:
    """``tl.<name>`` with a Gluon layout argument (after ``positional`` arguments, or ``layout=``) dropped."""

    def call(*args, layout=None, **kwargs):
        return getattr(tl, name)(*args[:positional], **kwargs)

    return call


_GL = types.SimpleNamespace(
    constexpr=tl.constexpr, float16=tl.float16, float32=tl.float32, int32=tl.int32, int64=tl.int64,
    BlockedLayout=_Layout, SliceLayout=_Layout, NVMMADistributedLayout=_Layout, DotOperandLayout=_Layout,
    NVMMASharedLayout=_Layout, SwizzledSharedLayout=_Layout,
    arange=_without_layout("arange", 2), zeros=_without_layout("zeros", 2), full=_without_layout("full", 3),
    convert_layout=lambda value, layout=None, assert_trivial=False: value, zeros_like=_zeros_like,
    allocate_shared_memory=_allocate_shared_memory, barrier=_nothing, thread_barrier=_nothing,
    load=_boolean_mask(_late("load")), store=_boolean_mask(_late("store")),
    **{name: _late(name) for name in (
        "where", "maximum", "minimum", "expand_dims", "sum", "max", "cdiv", "program_id", "num_programs",
        "exp", "floor", "abs", "sqrt", "static_range", "static_assert", "join", "permute", "reshape",
    )},
)  # fmt: skip
"""The ``gl`` a kernel sees on the interpreter."""

@functools.cache
def _hardware_operations() -> dict[int, Callable]:
    """Gluon's operations that only hardware runs, by identity, with what the interpreter runs instead (a kernel module
    may hold them under any name: ``_barrier`` is Gluon's barrier)."""
    found: dict[int, Callable] = {}
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia import ampere, hopper
    except ImportError:  # pragma: no cover - a Triton without Gluon
        return found
    for module, name, stand_in in (
        (hopper, "warpgroup_mma", _warpgroup_mma),
        (ampere, "mma_v2", _mma_v2),
        (hopper, "fence_async_shared", _nothing),
        (gl, "barrier", _nothing),
        (gl, "thread_barrier", _nothing),
    ):
        if hasattr(module, name):
            found[id(getattr(module, name))] = stand_in
    return found


class _GluonInterpretedFunction(InterpretedFunction):
    """Triton's interpreted function, knowing a Gluon function's constexpr parameters: the interpreter finds them by
    their annotation, ``"tl.constexpr"`` (strings under ``from __future__ import annotations``), not ``"gl.constexpr"``."""

    def rewrite(self):
        fn = super().rewrite()
        notes = getattr(fn, "__annotations__", {})
        for key, note in list(notes.items()):
            if note == "gl.constexpr":
                notes[key] = "tl.constexpr"
        return fn


def _interpreted(fn, namespace: dict) -> _GluonInterpretedFunction:
    """``fn`` (a Gluon function's Python function) to run on the interpreter, seeing ``namespace`` as its globals."""
    return _GluonInterpretedFunction(types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__))


def _interpreted_globals(namespace: dict, copies: dict[int, dict] | None = None) -> dict:
    """A copy of a kernel module's globals where ``gl``, Gluon's hardware operations and every Gluon function are the
    interpreter's. Each Gluon function is rewritten to run on the interpreter seeing such a copy of its own module's
    globals (``copies``: those made so far, by the module's globals' identity)."""
    copies = {} if copies is None else copies
    if id(namespace) in copies:
        return copies[id(namespace)]
    copy = copies[id(namespace)] = dict(namespace)
    copy["tl"] = tl
    hardware = _hardware_operations()
    for name, value in namespace.items():
        if value is _GLUON_LANGUAGE:  # Gluon's language, under whatever name the module imported it
            copy[name] = _GL
        elif id(value) in hardware:
            copy[name] = hardware[id(value)]
        elif GluonJITFunction is not None and isinstance(value, GluonJITFunction):
            copy[name] = _interpreted(value.fn, _interpreted_globals(value.fn.__globals__, copies))
    return copy


@contextlib.contextmanager
def _tensor_layouts() -> Iterator[None]:
    """Tensors answer ``x.type.layout`` (None) while a kernel runs, as Gluon's do (the decode's leaky ReLU reads it)."""
    had = "layout" in vars(tl.block_type)
    if not had:
        tl.block_type.layout = None
    try:
        yield
    finally:
        if not had:
            del tl.block_type.layout


class _Launcher:
    def __init__(self, kernel) -> None:
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            # the module's globals as they are now (a test's monkeypatch included), rewritten for this launch only
            copies: dict[int, dict] = {}
            kernel = _interpreted(self.kernel.fn, _interpreted_globals(self.kernel.fn.__globals__, copies))
            rewritten = [kernel.fn] + [value.fn for copy in copies.values() for value in copy.values() if isinstance(value, _GluonInterpretedFunction)]
            try:
                with _tensor_layouts():
                    return kernel[grid](*args, **kwargs)
            finally:
                for fn in rewritten:  # Triton caches every rewritten function: these are not launched again
                    InterpretedFunction.rewritten_fn.pop(fn, None)
                # (Triton's rewriter also registers each function by name in its JIT registry: the last launch's stays
                # there, one a name, as with the interpreter's own kernels)

        return launch


def interpreted(kernel) -> _Launcher:
    """``kernel`` (a ``@gluon.jit`` function) to launch on Triton's interpreter as on a GPU: ``interpreted(k)[grid](*args,
    **kwargs)``; ``num_warps`` and other launch options are ignored."""
    if GluonJITFunction is None or not isinstance(kernel, GluonJITFunction):
        raise TypeError(f"not a Gluon kernel: {kernel!r}")
    return _Launcher(kernel)


__all__ = ["interpreted"]
