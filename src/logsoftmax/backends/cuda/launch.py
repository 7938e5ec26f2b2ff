"""Launchers: strided geometry, the block-size table, and kernel launches.

This module imports torch and triton (through :mod:`.kernels`); the backend
imports it on first use.

Geometry. An operand is an :class:`Operand`: a torch tensor whose
``data_ptr()`` Triton receives, an element offset from that pointer to the
view's first element, and the view's shape and element strides (any sign,
zeros for broadcast views). For an op along ``axis``, the other dimensions
are sorted by the first operand's stride (largest first), size-1 dimensions
dropped and neighbours merged when every operand allows it, giving
``(b0, b1, r)`` batch dimensions plus the axis ``n``. ``r`` (the smallest
stride) is tiled by the kernels; dimensions beyond three are looped over
here, one launch per index (only unmergeable layouts of rank >= 5 need it).

Block sizes (see docs/cuda.md; measured on an H200 with benchmarks/cuda_tune.py):

====================  ==========  ===========================  =============
row length N          path        BLOCK_N                      BLOCK_R
====================  ==========  ===========================  =============
next_pow2(N) <= 32768  one pass    next_pow2(N)                 tile / BLOCK_N
(8192 for float64)
larger                 looped      8192 (2048 for float64)      tile / BLOCK_N
====================  ==========  ===========================  =============

``tile`` is 4096 elements when the axis is the contiguous dimension (several
short rows per program) and 16384 when the rows are the contiguous
dimension (``s_r == 1``: ``BLOCK_R`` neighbouring rows make each step along
the axis one contiguous segment). ``BLOCK_N`` and the path depend on ``N``
and the dtype only, never on strides, so a row's arithmetic (and its bits)
is the same whatever the layout of ``x`` or ``out``. ``num_warps`` grows
with the tile: 4 up to 2048 elements (4096 for 16-bit inputs), 8 up to
8192, else 16 (at most ``Limits.max_warps``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import torch
import triton
import triton.language as tl

from .. import Op
from . import kernels

__all__ = [
    "Operand",
    "Limits",
    "tile_limits",
    "current_limits",
    "RowPlan",
    "row_plan",
    "forward",
    "backward",
    "logsumexp",
]


class Operand(NamedTuple):
    """A strided view for the kernels.

    Attributes:
      tensor: torch tensor passed to Triton as the base pointer.
      offset: element offset from ``tensor.data_ptr()`` to element ``[0, ...]``.
      shape: the view's shape.
      strides: the view's strides in elements (may be negative or 0).
    """

    tensor: torch.Tensor
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor) -> "Operand":
        """The operand of a whole torch tensor."""
        return cls(t, 0, tuple(t.shape), tuple(t.stride()))


@dataclasses.dataclass(frozen=True)
class Limits:
    """The block-size table's knobs (elements, not bytes).

    Attributes:
      max_fused: longest ``next_pow2(N)`` done in one pass (float32/16, bf16).
      max_fused_f64: the same for float64 (twice the registers per element).
      loop_block: ``BLOCK_N`` of the looped path (float32/16, bf16).
      loop_block_f64: the same for float64.
      tile: elements per program when the axis is the contiguous dimension.
      tile_rows_contiguous: elements per program when ``s_r == 1``.
      max_warps: the most warps a program gets (the rule in ``_warps``
        gives 16 from 8192 elements of tile on). Measured on an H200
        (``benchmarks/cuda_tune.py``): on rows of 32000, 16 is the fastest
        or within 1% of it (float32 backward: 8 warps 0.99x); 8 took up to
        1.24x its time, 4 up to 1.96x.
    """

    # measured on an H200 (benchmarks/cuda_tune.py, 4096x32000 float32
    # forward): one pass up to 32768 took 0.38-0.40 ms a call against
    # 0.48-0.53 looped; looped block sizes did not separate from the noise
    # (docs/cuda.md), 8192 kept
    max_fused: int = 32768
    max_fused_f64: int = 8192
    loop_block: int = 8192
    loop_block_f64: int = 2048
    tile: int = 4096
    tile_rows_contiguous: int = 16384
    max_warps: int = 16

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, int) and v >= 1 and v & (v - 1) == 0):
                raise ValueError(
                    f"tile_limits: {f.name}={v!r}; expected a power of two >= 1"
                )


_LIMITS: contextvars.ContextVar[Limits] = contextvars.ContextVar(
    "logsoftmax_cuda_limits", default=Limits()
)


def current_limits() -> Limits:
    """The block-size knobs in force in this context."""
    return _LIMITS.get()


@contextlib.contextmanager
def tile_limits(**changes: int) -> Iterator[Limits]:
    """Override block-size knobs in this context (tests use tiny blocks to run
    the looped path on short rows in the interpreter)."""
    token = _LIMITS.set(dataclasses.replace(_LIMITS.get(), **changes))
    try:
        yield _LIMITS.get()
    finally:
        _LIMITS.reset(token)


class RowPlan(NamedTuple):
    """How one row is processed: ``looped`` or not, with ``block_n`` lanes."""

    looped: bool
    block_n: int


def row_plan(n: int, f64: bool, limits: Limits | None = None) -> RowPlan:
    """The row path for length ``n`` (a function of ``n`` and dtype only)."""
    lim = limits or current_limits()
    p2 = triton.next_power_of_2(max(n, 1))
    if p2 <= (lim.max_fused_f64 if f64 else lim.max_fused):
        return RowPlan(False, p2)
    return RowPlan(True, lim.loop_block_f64 if f64 else lim.loop_block)


# --------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------
class _Geometry(NamedTuple):
    n: int
    axis_strides: tuple[int, ...]  # per operand
    batch: list[tuple[int, tuple[int, ...]]]  # (size, strides per operand), outer first


def _geometry(ops: Sequence[Operand], axis: int | None) -> _Geometry:
    """Sort, drop and merge the non-axis dimensions of every operand alike.

    ``axis=None`` means there is no reduced axis (length 1, strides 0).
    """
    shape = ops[0].shape
    dims = [
        (shape[d], tuple(op.strides[d] for op in ops))
        for d in range(len(shape))
        if d != axis and shape[d] != 1
    ]
    # Outer first: the last batch dim has the smallest stride in the first
    # operand (x), so tiles walk neighbouring rows. Stable for equal strides.
    dims.sort(key=lambda d: -abs(d[1][0]))
    merged: list[tuple[int, tuple[int, ...]]] = []
    for size, strides in dims:
        if merged:
            osize, ostrides = merged[-1]
            if all(o == s * size for o, s in zip(ostrides, strides)):
                merged[-1] = (osize * size, strides)
                continue
        merged.append((size, strides))
    if axis is None:
        return _Geometry(1, (0,) * len(ops), merged)
    return _Geometry(shape[axis], tuple(op.strides[axis] for op in ops), merged)


def _acc(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _low(dtype: torch.dtype) -> bool:
    return dtype in (torch.bfloat16, torch.float16)


def _warps(tile: int, max_warps: int, low: bool) -> int:
    # 16-bit tiles of 4096 take 4 warps: 65536x1000 bf16 forward 0.80x the
    # time of 8 warps on an H200, backward 0.91-0.93x; float32 backward took
    # 2.0x with 4 (benchmarks/cuda_ab.py, docs/cuda.md)
    warps = 4 if tile <= (4096 if low else 2048) else 8 if tile <= 8192 else 16
    return min(warps, max_warps)


class _Launch(NamedTuple):
    """What a launch needs beyond the operands' tensors and offsets."""

    grid: tuple[int]
    extra: list  # batch dims beyond three: (size, strides per operand), looped here
    scalars: tuple[int, ...]  # B1, R, N, n_rt, then the strides
    meta: dict  # constexprs and compile options, as kernel[grid] takes them
    constexprs: tuple  # the constexprs in the kernel's order (direct launches)
    direct: dict  # compiled kernels' launchers by specialisation (_direct)


#: Launch plans by everything that determines them (kernel, constexprs,
#: operands' shapes and strides, axis, dtypes, block-size table). A small
#: call's time is the Python before its kernel: on an H200 the 1x8 call took
#: 76 us against torch's 7, of which Triton's own launch was 22 and this
#: module's Python before it 25 (benchmarks/cuda_front_door.py).
_PLANS: dict = {}
_PLANS_MAX = 512
#: more than one visible GPU: only then can a tensor's device differ from the
#: current one (``torch.cuda.current_device()`` is ~1 us of a small call).
#: Counted at the first launch on a GPU, not at import: the interpreter and
#: a process that forks before using CUDA never ask the driver.
_MULTI_GPU: bool | None = None


def _elsewhere(dev: int) -> bool:
    """Whether device ``dev`` is not the current one (Triton launches there)."""
    global _MULTI_GPU
    if _MULTI_GPU is None:
        _MULTI_GPU = torch.cuda.device_count() > 1
    return _MULTI_GPU and dev != torch.cuda.current_device()


def _run(kernel, ops: Sequence[Operand], axis, scalar_dtype, consts: dict) -> None:
    """Launch ``kernel`` over every row of ``ops`` (first operand drives tiles).

    ``consts`` holds the op's constexprs; the block sizes, ``WIDE``,
    ``OUT_LOW``/``BF16_BITS`` (of the last operand: the output) are added here.
    """
    lim = current_limits()
    key = (
        id(kernel),
        axis,
        scalar_dtype,
        ops[-1].tensor.dtype,
        lim,
        tuple(consts.items()),
        tuple((op.shape, op.strides) for op in ops),
    )
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(kernel, ops, axis, scalar_dtype, consts, lim)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    if plan.grid[0] == 0:
        return
    tensors = [op.tensor for op in ops]
    dev = -1 if kernels.INTERPRETED else tensors[0].get_device()
    if dev >= 0 and _elsewhere(dev):
        # Triton launches on the current device; torch's ops run on their
        # tensors' device, and so does this one
        with torch.cuda.device(dev):
            return _run(kernel, ops, axis, scalar_dtype, consts)
    if not plan.extra and dev >= 0:
        offs = [op.offset for op in ops]
        # What Triton specialises a compiled kernel on, beyond the plan's key:
        # the device, each pointer's 16-byte alignment, the offsets' values.
        spec = (dev, *(t.data_ptr() % 16 == 0 for t in tensors), *offs)
        launcher = plan.direct.get(spec)
        if launcher is None:
            launcher = plan.direct[spec] = _direct(kernel, plan, tensors, offs)
        if launcher:
            launcher(*tensors, *offs, *plan.scalars, *plan.constexprs)
        else:
            kernel[plan.grid](*tensors, *offs, *plan.scalars, **plan.meta)
        return
    # the interpreter runs the kernels in numpy, which warns on the IEEE
    # results the kernels rely on (-inf - -inf in padding lanes, log(0))
    quiet = np.errstate(all="ignore") if kernels.INTERPRETED else contextlib.nullcontext()
    with quiet:
        _launch_all(kernel, tensors, ops, plan)


def _direct(kernel, plan: _Launch, tensors, offs):
    """The compiled kernel's own launcher for this specialisation, or False.

    ``kernel[grid](...)`` binds and specialises every argument again on each
    call: 22 us of a 1x8 call on an H200, against torch's whole call of 7.
    The compiled kernel (``warmup`` compiles without launching) takes every
    parameter in order, constexprs included, through ``compiled[grid]``.
    False (launch through ``kernel[grid]``) where this Triton lacks that API.
    """
    try:
        compiled = kernel.warmup(*tensors, *offs, *plan.scalars, grid=plan.grid, **plan.meta)
        if hasattr(compiled, "result"):  # an asynchronous compile
            compiled = compiled.result()
        return compiled[(plan.grid[0], 1, 1)]  # its runner reads all three
    except (AttributeError, TypeError):
        return False


def _plan(kernel, ops: Sequence[Operand], axis, scalar_dtype, consts: dict, lim) -> _Launch:
    geo = _geometry(ops, axis)
    if geo.n == 0 or any(s == 0 for s in ops[0].shape):
        return _Launch((0,), [], (), {}, (), {})
    f64 = scalar_dtype == torch.float64
    plan = row_plan(geo.n, f64, lim)
    batch = list(geo.batch)
    while len(batch) < 3:
        batch.insert(0, (1, (0,) * len(ops)))
    extra, (b0, b1, r) = batch[:-3], batch[-3:]
    R = r[0]
    rows_contiguous = abs(r[1][0]) == 1 and abs(geo.axis_strides[0]) != 1
    tile = lim.tile_rows_contiguous if rows_contiguous else lim.tile
    block_r = min(triton.next_power_of_2(R), max(1, tile // plan.block_n))
    n_rt = triton.cdiv(R, block_r)
    grid = (n_rt * b1[0] * b0[0],)
    if grid[0] >= 2**31:
        raise ValueError(f"logsoftmax cuda backend: {grid[0]} programs exceed the grid")
    wide = any(abs(s) * max(geo.n - 1, 0) >= 2**31 for s in geo.axis_strides)
    out_dtype = ops[-1].tensor.dtype
    meta = dict(
        consts,
        ACC=_acc(scalar_dtype),
        BLOCK_R=block_r,
        BLOCK_N=plan.block_n,
        LOOPED=plan.looped,
        WIDE=wide,
        OUT_LOW=_low(out_dtype),
        BF16_BITS=kernels.INTERPRETED and out_dtype == torch.bfloat16,
        num_warps=_warps(block_r * plan.block_n, lim.max_warps, _low(scalar_dtype)),
        # Each product and sum rounds where the formula says, as in the
        # interpreter: with Triton's default mul+add -> fma contraction the
        # TwoProduct/TwoSum pairs of the backward's exact sum lost their
        # error terms (softmax_backward of an arbitrary dst: 35-70 eps on an
        # H200 against <= 16; tests/test_cuda.py, benchmarks/gpu_check.sh).
        enable_fp_fusion=False,
    )
    strides = []
    for i in range(len(ops)):
        strides += [b0[1][i], b1[1][i], r[1][i]]
        if kernel is not kernels.logsumexp_kernel or i == 0:
            strides.append(geo.axis_strides[i])
    constexprs = ()
    if not kernels.INTERPRETED:
        params = kernel.params
        n_rt_args = len(ops) * 2 + 4 + len(strides)
        assert all(p.is_constexpr for p in params[n_rt_args:]), kernel
        constexprs = tuple(meta[p.name] for p in params[n_rt_args:])
    return _Launch(grid, extra, (b1[0], R, geo.n, n_rt, *strides), meta, constexprs, {})


def _launch_all(kernel, tensors, ops: Sequence[Operand], plan: _Launch) -> None:
    """One launch per index of the batch dims beyond three (usually one)."""
    for idx in itertools.product(*(range(e[0]) for e in plan.extra)):
        offs = [
            op.offset + sum(j * e[1][i] for j, e in zip(idx, plan.extra))
            for i, op in enumerate(ops)
        ]
        kernel[plan.grid](*tensors, *offs, *plan.scalars, **plan.meta)


# --------------------------------------------------------------------------
# the ops
# --------------------------------------------------------------------------
def forward(op: Op, x: Operand, y: Operand, axis: int) -> None:
    """``y = log_softmax(x)`` (``Op.LOG_SOFTMAX``) or softmax, in y."""
    _run(kernels.forward_kernel, (x, y), axis, x.tensor.dtype, {"OP": int(op)})


def backward(op: Op, diff_dst: Operand, dst: Operand, out: Operand, axis: int) -> None:
    """``out = diff_src`` of log_softmax (``Op.LOG_SOFTMAX``) or softmax."""
    split = op == Op.SOFTMAX and diff_dst.tensor.dtype in (
        torch.float32,
        torch.float64,
    )
    _run(
        kernels.backward_kernel,
        (diff_dst, dst, out),
        axis,
        diff_dst.tensor.dtype,
        {"OP": int(op), "SPLIT": split},
    )


def logsumexp(x: Operand, out: Operand, axis: int) -> None:
    """``out`` (``x``'s shape with ``axis`` of length 1) ``= logsumexp(x, axis)``.

    ``out``'s stride along ``axis`` is ignored; a zero-length axis is the
    caller's (``-inf`` fill).
    """
    strides = tuple(0 if d == axis else s for d, s in enumerate(out.strides))
    o = out._replace(shape=x.shape, strides=strides)
    _run(kernels.logsumexp_kernel, (x, o), axis, x.tensor.dtype, {})
