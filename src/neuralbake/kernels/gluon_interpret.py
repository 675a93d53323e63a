"""Gluon kernels on Triton's CPU interpreter: the part of Gluon this project's kernels use, run with numpy.

Triton's interpreter (``TRITON_INTERPRET=1``) runs ``@triton.jit`` kernels on the CPU, one program after another, each
``tl`` operation on numpy arrays. It does not run Gluon (Triton 3.6 to 3.9 raise on a Gluon kernel there), so the two
Gluon kernels (:mod:`~neuralbake.kernels.gluon_decode`, :mod:`~neuralbake.kernels.gluon_train`) could only be checked
for values on a GPU. No library fills that gap, so this module does, for the operations those kernels use. It runs a
Gluon kernel's own Python body on the interpreter with:

- the layouts dropped (``gl.arange(0, n, layout)`` is ``tl.arange(0, n)``, ``gl.convert_layout(x, layout)`` is ``x``):
  a layout says which thread holds which value, not what the value is;
- shared memory as a numpy array, with the views the kernels take of it (``index``, ``slice``, ``permute``, which alias
  the buffer as on the GPU) and ``store`` / ``load``; a new buffer holds NaN (or -1 for integers) until stored, so a
  product that reads what no store wrote poisons the result instead of reading zeros;
- ``warpgroup_mma`` and ``mma_v2`` as products in fp32 of the fp16 operands (exact products, fp32 sums, as the tensor
  cores give with an fp32 accumulator), added to the accumulator unless ``use_acc=False``; with an fp16 accumulator
  (the decode's hidden layers) the sum is rounded to fp16 once;
- fences and barriers as nothing: the programs run one at a time, one thread each.

So a CPU test runs the kernel's indexing, masks, tile loop, views, products and arithmetic against the PyTorch
reference. What it cannot see is what only the hardware does: layouts and the fragments they assign, a missing
barrier or fence (a race), and the order the tensor cores sum in (``bench/kernels_parity.py`` checks those on a GPU).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction, TensorHandle

try:
    from triton.experimental.gluon._runtime import GluonJITFunction
except ImportError:  # pragma: no cover - a Triton without Gluon: nothing to interpret
    GluonJITFunction = None

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

    @property
    def type(self) -> _Shared:
        return self

    def store(self, value: tl.tensor) -> None:
        data = value.handle.data
        if tuple(data.shape) != self.array.shape:
            raise ValueError(f"a store of shape {tuple(data.shape)} into shared memory of shape {self.array.shape}")
        self.array[...] = data.astype(self.array.dtype)

    def load(self, layout=None) -> tl.tensor:
        return _tensor(self.array.copy(), self.dtype)

    def index(self, i) -> _Shared:
        return _Shared(self.array[int(_value(i))], self.dtype)

    def slice(self, start, length, dim=0) -> _Shared:
        where = [slice(None)] * self.array.ndim
        start, length = int(_value(start)), int(_value(length))
        where[int(_value(dim))] = slice(start, start + length)
        return _Shared(self.array[tuple(where)], self.dtype)

    def permute(self, order) -> _Shared:
        return _Shared(self.array.transpose([int(_value(axis)) for axis in order]), self.dtype)


def _allocate_shared_memory(element_ty, shape, layout=None, value=None) -> _Shared:
    np_dtype = _numpy_dtype(element_ty)
    fill = np.nan if np.issubdtype(np_dtype, np.floating) else -1
    buffer = _Shared(np.full([int(_value(s)) for s in shape], fill, dtype=np_dtype), element_ty)
    if value is not None:
        buffer.store(value)
    return buffer


def _operand(x) -> np.ndarray:
    return (x.array if isinstance(x, _Shared) else x.handle.data).astype(np.float32)


def _product(a, b, acc: tl.tensor, use_acc=True) -> tl.tensor:
    """``a @ b + acc`` (``a @ b`` with ``use_acc=False``): fp32 products and sums, rounded to the accumulator's dtype."""
    out = np.matmul(_operand(a), _operand(b))
    if _value(use_acc):
        out = out + acc.handle.data.astype(np.float32)
    if out.shape != acc.handle.data.shape:
        raise ValueError(f"a product of shape {out.shape} into an accumulator of shape {acc.handle.data.shape}")
    return _tensor(out, acc.dtype)


def _warpgroup_mma(a, b, acc, *, use_acc=True, precision=None, max_num_imprecise_acc=None, is_async=False) -> tl.tensor:
    return _product(a, b, acc, use_acc)


def _mma_v2(a, b, acc, input_precision=None) -> tl.tensor:
    return _product(a, b, acc)


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
    convert_layout=lambda value, layout=None, assert_trivial=False: value,
    allocate_shared_memory=_allocate_shared_memory, barrier=_nothing, thread_barrier=_nothing,
    load=_boolean_mask(_late("load")), store=_boolean_mask(_late("store")),
    **{name: _late(name) for name in (
        "where", "maximum", "minimum", "expand_dims", "sum", "max", "cdiv", "program_id", "num_programs",
        "exp", "floor", "abs", "sqrt", "zeros_like", "static_range", "static_assert",
    )},
)  # fmt: skip
"""The ``gl`` a kernel sees on the interpreter."""

_NVIDIA = {"warpgroup_mma": _warpgroup_mma, "mma_v2": _mma_v2, "fence_async_shared": _nothing}
"""What the kernels import from Gluon's ``nvidia`` modules, by name in their module."""

_kernels: dict[int, InterpretedFunction] = {}


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


def _interpreted_module(namespace: dict) -> dict:
    """A copy of a kernel module's globals where ``gl``, Gluon's NVIDIA operations and every Gluon function (each
    rewritten to run on the interpreter, seeing this copy) are the interpreter's."""
    copy = dict(namespace)
    copy["gl"], copy["tl"] = _GL, tl
    for name, value in _NVIDIA.items():
        if name in copy:
            copy[name] = value
    if "_barrier" in copy:
        copy["_barrier"] = _nothing
    for name, value in namespace.items():
        if GluonJITFunction is not None and isinstance(value, GluonJITFunction):
            fn = value.fn
            copy[name] = _GluonInterpretedFunction(types.FunctionType(fn.__code__, copy, fn.__name__, fn.__defaults__, fn.__closure__))
    return copy


@contextlib.contextmanager
def _tensor_layouts() -> Iterator[None]:
    """Tensors answer ``x.type.layout`` (None) while a kernel runs, as Gluon's do."""
    had = "layout" in vars(tl.block_type)
    if not had:
        tl.block_type.layout = None
    try:
        yield
    finally:
        if not had:
            del tl.block_type.layout


class _Launcher:
    def __init__(self, kernel: InterpretedFunction) -> None:
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            with _tensor_layouts():
                return self.kernel[grid](*args, **kwargs)

        return launch


def interpreted(kernel) -> _Launcher:
    """``kernel`` (a ``@gluon.jit`` function) to launch on Triton's interpreter as on a GPU: ``interpreted(k)[grid](*args,
    **kwargs)``; ``num_warps`` and other launch options are ignored."""
    if GluonJITFunction is None or not isinstance(kernel, GluonJITFunction):
        raise TypeError(f"not a Gluon kernel: {kernel!r}")
    key = id(kernel.fn)
    if key not in _kernels:
        _kernels[key] = _interpreted_module(kernel.fn.__globals__)[kernel.fn.__name__]
    return _Launcher(_kernels[key])


__all__ = ["interpreted"]
