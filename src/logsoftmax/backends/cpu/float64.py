"""Fused log-softmax-family kernels (numba), over ``(outer1, outer2, n, inner)``.

Algorithm (every kernel, every layout -- the arithmetic is *defined* per row,
so results are bit-identical whatever the strides of input or output, in
place or not, the number of threads, or whether a long row is split across
threads):

* A row of ``n`` elements is cut into chunks of ``CHUNK = 4096`` elements
  (the last one shorter). For chunk ``c``: ``m_c = max`` (exact;
  ``llvm.maxnum``, vectorised) and ``s_c = sum(exp(x - m_c))``: the terms
  are added by a fixed pairwise tree (pairs ``i, i + h`` for
  ``h = P/2, P/4, ..., 1``; ``P`` the next power of two, missing partners
  count as 0, which adds exactly). The first level is fused into the exp
  loop; the rest runs on a scratch buffer in L1. A path through the tree
  has log2(4096) = 12 roundings, not 4096 as in a plain loop.
* Chunks merge in order, in float64:
  ``(m, s) <- (max(m, m_c), s * e^(m - M) + s_c * e^(m_c - M))``.
  This is the online softmax at chunk granularity: pass 1 reads each row
  once from memory (a chunk's second look, for the exponentials, hits L1).
* Pass 2 writes ``y = (x - m) - log(s)`` (log_softmax, in this order) or
  ``exp(x - m) * (1/s)`` (softmax), re-reading ``x`` from cache.
* Backward: ``S = sum(diff_dst)`` (softmax: ``sum(diff_dst * dst)``) by the
  same chunk/tree structure but in float64 (terms and products of float32
  are exact there), then one pass writing ``diff_dst - exp(dst) * S``
  (softmax: ``dst * (diff_dst - S)``).
* bf16/f16/f32 inputs compute in float32 (terms, trees, pass 2), float64
  inputs in float64 (``math.exp``); ``m``/``s`` merging and ``log`` are
  float64. Where a float32 input's result is stored as float32/float64, the
  log_softmax forward and backward pass 2 run in float64 (see
  :func:`_fwd_write`, :func:`_bwd_write`). Low-precision results are
  rounded once on store.
* float64 forward/logsumexp: the chunk sum is a sequential compensated
  (TwoSum) sum ``s + lo`` instead of the tree, merged as a double-double;
  ``log(s + lo)`` is a double-double (``math.log`` + one Newton step with a
  double-double ``exp``, :func:`._simd.log_dd`); log_softmax evaluates
  ``(x - m) - L`` and logsumexp ``m + L`` in double-double and rounds once
  (<= ~0.55 eps measured; PyTorch 1.27 at n = 7). float32 logsumexp sums
  float64 terms (:func:`._simd.exp64`) so its result is rounded once from a
  ~2**-31-accurate value. float32 log_softmax/softmax rows of
  ``n <= SHORT64`` (1024) sum float64 terms the same way (with float32
  terms they lost to PyTorch on some seeds at n = 3-250; longer rows keep
  the faster float32 terms, which already beat PyTorch several-fold).
* Loops are shaped for LLVM's vector step of 64 float32 (see :data:`_VB`):
  the tree's pair loop pads its partner half with -inf, max and
  out-of-place writes end with an overlapping block; this and view-only
  unit-stride row loops took n = 112 rows from 473 to 160 ns per row.

Accuracy (3-sigma logits, vs a float64 / long double oracle, in eps; PyTorch
2.13 in brackets; ``python tests/test_torch_parity.py``): float32 n=1000 fwd
0.50 (4.61), bwd 0.50 (43), logsumexp 0.37 (0.50); n=65536 fwd 0.54 (14),
bwd 0.50 (573), logsumexp 0.25 (0.34). float64 log_softmax 0.50-0.56
(1.27-6.2), logsumexp 0.25-0.49 (0.35-1.01) at n = 7..65536. Details in
docs/performance.md.

Special values fall out of the arithmetic: a NaN or ``+inf`` in a chunk
makes its sum NaN (``inf - inf``), a ``-inf`` element contributes 0; a chunk
of only ``-inf`` contributes ``s_c = 0`` (or NaN if it also holds a NaN:
``maxnum`` hides NaN, so such chunks are rescanned). An all-``-inf`` row
ends with ``m = -inf, s = 0`` and pass 2 gives ``-inf - -inf = NaN``.

Parallelism (``numba.prange``): over rows (``inner == 1``) or over
``(outer, inner tile)`` items; rows longer than two chunks with fewer rows
than ``2 * threads`` are split chunk-wise across threads (partials merged in
chunk order, so split and unsplit give the same bits). Every row and tile
kernel also exists as a serial ``*_serial`` copy (same source, same bits)
that the backend runs for small problems (see ``SERIAL_MAX`` in
``backends/cpu/__init__.py``).
"""

from __future__ import annotations

import math
import types as pytypes

import numpy as np
from numba import njit, prange, types
from numba.core.errors import TypingError
from numba.extending import overload

from ._simd import (
    acc_dd,
    add_dd,
    exp32,
    exp64,
    exp_c,
    load,
    log_dd,
    maxnum,
    neg_inf,
    scratch,
    store,
    two_sum,
    view,
)

__all__ = [
    "CHUNK",
    "fwd_rows",
    "fwd_rows_serial",
    "fwd_rows_split",
    "fwd_inner",
    "fwd_inner_serial",
    "lse_rows",
    "lse_rows_serial",
    "lse_rows_split",
    "lse_inner",
    "lse_inner_serial",
    "bwd_rows",
    "bwd_rows_serial",
    "bwd_rows_split",
    "bwd_inner",
    "bwd_inner_serial",
]

#: elements per chunk: a chunk of f32 (16 KiB) and its terms (16 KiB) fill
#: the 32 KiB L1; the API's accuracy rule allows pairwise blocks <= 4096
CHUNK = 4096
#: chunks per parallel task on the split path (amortises scratch allocation)
_GROUP = 8
#: LLVM vectorises the hot loops 64 float32 at a time (16 lanes x 4
#: interleaved) and leaves the remaining < 64 to a scalar loop: at n = 112
#: most of a row's exps ran scalar (473 ns/row vs 180 at n = 128, one
#: thread). So loops are shaped to multiples of _VB: max and out-of-place
#: writes finish with an overlapping last block of _VB (max and y = f(x) are
#: idempotent), the pair loop of the tree pads its partner half (below).
_VB = 64

_KW = dict(cache=True, error_model="numpy")
_PKW = dict(cache=True, error_model="numpy", parallel=True)


def _parallel_and_serial(fn):
    """Compile ``fn`` twice: the returned ``parallel=True`` kernel, and a serial
    copy published in this module as ``<name>_serial`` (``prange`` is then a
    plain ``range``). Both run the same per-row arithmetic, so they give the
    same bits; the serial one is for small problems, where waking numba's
    thread pool (which spin-waits against OpenBLAS's/torch's pools) cost
    0.5-20 ms for a 64x10 log_softmax under load. The copy gets its own
    ``__qualname__``: numba's on-disk cache is keyed by qualname and
    bytecode, not by the ``parallel`` flag, so the two would otherwise load
    each other's machine code."""
    name = fn.__name__ + "_serial"
    ser = pytypes.FunctionType(
        fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__
    )
    ser.__qualname__ = fn.__qualname__ + "_serial"
    ser.__doc__ = f"Serial variant of :func:`{fn.__name__}` (same bits)."
    fn.__globals__[name] = njit(**_KW)(ser)
    return njit(**_PKW)(fn)


def to_compute(buf, v):
    """float64 ``v`` converted to the compute type of ``buf``."""
    raise NotImplementedError  # pragma: no cover


@overload(to_compute)
def _to_compute_ol(buf, v):
    if buf.dtype == types.float64:
        return lambda buf, v: v
    if buf.dtype in (types.float32, types.uint16, types.int16):
        return lambda buf, v: np.float32(v)
    raise TypingError(f"to_compute: unsupported buffer dtype {buf.dtype}")


def is_f64(buf):
    """True (a compile-time constant) when ``buf`` computes in float64."""
    raise NotImplementedError  # pragma: no cover


@overload(is_f64)
def _is_f64_ol(buf):
    f64 = buf.dtype == types.float64
    return lambda buf: f64


def term(buf, x, m, t):
    """One exponential term ``e**(x - m)`` of a row sum of ``buf``, stored
    into ``t``: float64 input -> ``math.exp``; float32 compute with a float64
    ``t`` (logsumexp, and float32 forward rows of ``n <= SHORT64``) ->
    :func:`exp64` of the exact float64 difference, so the sum is ~2**-31
    accurate instead of 1 float32 ulp per term; else :func:`exp32`. ``x``
    may be float32 or (exactly) widened."""
    raise NotImplementedError  # pragma: no cover


@overload(term)
def _term_ol(buf, x, m, t):
    if buf.dtype == types.float64:
        return lambda buf, x, m, t: math.exp(x - m)
    if t.dtype == types.float64:
        return lambda buf, x, m, t: exp64(np.float64(x) - np.float64(m))
    return lambda buf, x, m, t: exp32(np.float32(x) - m)


# ---------------------------------------------------------------------------
# per-row building blocks
# ---------------------------------------------------------------------------
@njit(**_KW)
def _gather(buf, off, n, step, dst):
    """``dst[:n] = buf[off + k * step]``: stage a strided row (any sign, 0 =
    broadcast) contiguously, so the arithmetic runs on unit-stride code only."""
    for k in range(n):
        dst[k] = buf[off + k * step]
    return dst[:n]


@njit(**_KW)
def _scatter(src, buf, off, n, step):
    """``buf[off + k * step] = src[k]``: the inverse of :func:`_gather`."""
    for k in range(n):
        buf[off + k * step] = src[k]


@njit(**_KW)
def _has_nan_strided(buf, off, n, step):
    for k in range(n):
        v = load(buf, off + k * step)
        if v != v:
            return True
    return False


@njit(**_KW)
def _tree(t, n):
    """Pairwise sum of ``t[:n]`` in the fixed order of the module docstring
    (destroys ``t``). Partners are read through a view at ``h`` so every
    index counts from 0: numba's negative-index wraparound on ``t[i + h]``
    would otherwise block vectorisation."""
    if n == 1:
        return t[0]
    h = _top(n)
    hi = view(t, h, n - h)
    for i in range(n - h):
        t[i] += hi[i]
    h //= 2
    while h >= 1:
        hi = view(t, h, h)
        for i in range(h):
            t[i] += hi[i]
        h //= 2
    return t[0]


@njit(**_KW)
def _seg_max(seg):
    """``maxnum`` over ``seg``: multiples of :data:`_VB`, then the last
    ``_VB`` elements again (overlapping; max is idempotent)."""
    n = seg.shape[0]
    m = neg_inf(seg)
    nb = n - n % _VB
    for k in range(nb):
        m = maxnum(m, load(seg, k))
    if nb < n:
        st = max(0, n - _VB)
        tail = view(seg, st, n - st)
        for k in range(n - st):
            m = maxnum(m, load(tail, k))
    return m


@njit(**_KW)
def _has_nan(seg):
    for k in range(seg.shape[0]):
        v = load(seg, k)
        if v != v:
            return True
    return False


@njit(**_KW)
def _top(n):
    """The first tree level's pair distance: largest power of two below ``n``."""
    h = 1
    while h * 2 < n:
        h *= 2
    return h


@njit(**_KW)
def _chunk_stats(seg, t):
    """``(m_c, s_c, l_c)`` of one chunk: exact max and the sum of
    ``exp(x - m_c)`` as a float64 double-double ``s_c + l_c``; an all--inf
    chunk gives ``(-inf, 0, 0)`` or ``(-inf, nan, 0)``.

    float32 compute: the terms (:func:`term`: float32, or float64 when ``t``
    is float64) are added by the pairwise tree, ``l_c = 0``; the tree's first
    level is fused into the exp loop (``t[i] = e_i + e_{i+h}``), the same
    arithmetic as :func:`_tree` on the stored terms, one pass fewer over the
    scratch (measured: ~0.05 ns/element). float64: a sequential compensated
    sum (every addition's rounding error collected in ``l_c``): the sum is
    then exact to ~n * 2**-106, and a float64 result can be rounded once
    from a log of it (the tree's few-ulp error cost up to 0.5 eps at n = 7).
    """
    n = seg.shape[0]
    m = _seg_max(seg)
    if m == neg_inf(seg):
        return m, (np.nan if _has_nan(seg) else 0.0), 0.0
    if is_f64(seg):
        hi = 0.0
        lo = 0.0
        for k in range(n):
            hi, lo = acc_dd(hi, lo, term(seg, load(seg, k), m, t))
        s = hi + lo
        return m, s, lo - (s - hi)
    if n == 1:
        return m, np.float64(term(seg, load(seg, 0), m, t)), 0.0
    h = _top(n)
    hi = view(seg, h, n - h)
    if h >= _VB:
        # partners e_{i+h}, i < n - h, staged in t[h:2h] and padded with -inf
        # (term 0; e_i + 0 == e_i exactly, the same as a single): one loop of
        # h (a multiple of _VB) iterations, no scalar remainder
        pad = view(t, h, h)
        c = n - h
        for i in range(c):
            pad[i] = load(hi, i)
        for i in range(c, h):
            pad[i] = -np.inf
        for i in range(h):
            t[i] = term(seg, load(seg, i), m, t) + term(seg, pad[i], m, t)
        return m, np.float64(_tree(t, h)), 0.0
    for i in range(n - h):
        t[i] = term(seg, load(seg, i), m, t) + term(seg, load(hi, i), m, t)
    for i in range(n - h, h):
        t[i] = term(seg, load(seg, i), m, t)
    return m, np.float64(_tree(t, h)), 0.0


@njit
def _merge(m, s, lo, mc, sc, lc):
    """Online-softmax merge of chunk ``(mc, sc + lc)`` into ``(m, s + lo)``;
    sums are float64 double-doubles."""
    if mc > m:
        f = math.exp(np.float64(m) - np.float64(mc))
        h, l = add_dd(s * f, lo * f, sc, lc)
        return mc, h, l
    if mc == m:
        h, l = add_dd(s, lo, sc, lc)
        return m, h, l
    f = math.exp(np.float64(mc) - np.float64(m))
    h, l = add_dd(s, lo, sc * f, lc * f)
    return m, h, l


@njit(**_KW)
def _row_stats(seg, t):
    """``(m, s, lo)`` of a whole row: chunk stats merged in chunk order."""
    n = seg.shape[0]
    m, s, lo = _chunk_stats(view(seg, 0, min(n, CHUNK)), t)
    for c0 in range(CHUNK, n, CHUNK):
        mc, sc, lc = _chunk_stats(view(seg, c0, min(n - c0, CHUNK)), t)
        m, s, lo = _merge(m, s, lo, mc, sc, lc)
    return m, s, lo


@njit
def _row_log(buf, s, lo):
    """``log`` of a row sum: a double-double (:func:`log_dd`) for float64
    compute (the float64 result is rounded once from it), else ``log(s)``."""
    if is_f64(buf):
        return log_dd(s, lo)
    return math.log(s), 0.0


@njit
def _ls64(x, m, lh, ll):
    """float64 ``(x - m) - (lh + ll)`` evaluated in double-double and rounded
    once; special values (inf/NaN operands make the compensation NaN) take
    the plain ``(x - m) - lh``."""
    d, de = two_sum(x, -m)
    y1, ye = two_sum(d, -lh)
    y = y1 + ((ye + de) - ll)
    return y if y == y else y1


@njit
def _f64(buf, i):
    return np.float64(load(buf, i))


@njit(**_KW)
def _bwd_terms_sum(ds, ys, t, op):
    """One chunk's tree sum of diff_dst (op 0) or diff_dst * dst (op 1), in
    float64 (``t`` is float64): the terms (and products of two float32) are
    exact there, and a float32 tree left the float32 backward at 23 eps for
    n=1000 (PyTorch: 14; now ~1). The first tree level is fused into the
    load loop as in :func:`_chunk_stats`."""
    n = ds.shape[0]
    if n == 1:
        return _f64(ds, 0) if op == 0 else _f64(ds, 0) * _f64(ys, 0)
    h = _top(n)
    dh = view(ds, h, n - h)
    yh = view(ys, h, n - h)
    if op == 0:
        for i in range(n - h):
            t[i] = _f64(ds, i) + _f64(dh, i)
        for i in range(n - h, h):
            t[i] = _f64(ds, i)
    else:
        for i in range(n - h):
            t[i] = _f64(ds, i) * _f64(ys, i) + _f64(dh, i) * _f64(yh, i)
        for i in range(n - h, h):
            t[i] = _f64(ds, i) * _f64(ys, i)
    return _tree(t, h)


@njit(**_KW)
def _bwd_row_sum(ds, ys, t, op):
    n = ds.shape[0]
    s = 0.0
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        s += _bwd_terms_sum(view(ds, c0, c1 - c0), view(ys, c0, c1 - c0), t, op)
    return s


def wide_store(src, dst):
    """True when the input computes in float32 but the result is stored as
    float32/float64: the log_softmax backward then runs its pass 2 in float64
    so that the stored value is rounded once from a better-than-float32 one."""
    raise NotImplementedError  # pragma: no cover


@overload(wide_store)
def _wide_store_ol(src, dst):
    wide = src.dtype != types.float64 and dst.dtype in (types.float32, types.float64)
    return lambda src, dst: wide


@njit(**_KW)
def _fwd_write(xs, os, m, s, lo, op):
    """Pass 2 of the forward: log_softmax (op 0) or softmax (op 1).

    For a float32 input stored as float32/float64, log_softmax's
    ``(x - m) - log(s)`` is evaluated in float64 and rounded once (two
    float32 roundings left it at 1.49 eps for n=3 where PyTorch has 1.39).
    float64: ``(x - m) - log(s)`` in double-double from a double-double
    log, rounded once (:func:`_ls64`; plain float64 was 1.48 eps at n = 7
    vs PyTorch's 1.27). Runs as multiples of :data:`_VB` plus an overlapping
    last block (the values rewritten are the same).
    """
    lh, ll = _row_log(xs, s, lo)
    n = xs.shape[0]
    nb = n - n % _VB
    _fwd_span(xs, os, nb, m, s, lh, ll, op)
    if nb < n:
        st = max(0, n - _VB)
        _fwd_span(view(xs, st, n - st), view(os, st, n - st), n - st, m, s, lh, ll, op)


@njit(**_KW)
def _fwd_span(xs, os, n, m, s, lh, ll, op):
    """:func:`_fwd_write` on the first ``n`` elements; ``lh + ll = log(s)``."""
    if op == 0:
        if is_f64(xs):
            for k in range(n):
                store(os, k, _ls64(load(xs, k), m, lh, ll))
        elif wide_store(xs, os):
            m64 = np.float64(m)
            for k in range(n):
                store(os, k, (_f64(xs, k) - m64) - lh)
        else:
            ls = to_compute(xs, lh)
            for k in range(n):
                store(os, k, (load(xs, k) - m) - ls)
    else:
        inv = to_compute(xs, 1.0 / s)
        for k in range(n):
            store(os, k, exp_c(load(xs, k) - m) * inv)


@njit(**_KW)
def _fwd_write_ip(xs, m, s, lo, op):
    """:func:`_fwd_write` into ``xs`` itself (in place). A separate loop on one
    array: with two arguments that alias, LLVM's runtime overlap check sends
    the loop to its scalar version (in place ran at 2x the time)."""
    n = xs.shape[0]
    if op == 0:
        if is_f64(xs):
            lh, ll = _row_log(xs, s, lo)
            for k in range(n):
                store(xs, k, _ls64(load(xs, k), m, lh, ll))
        elif wide_store(xs, xs):
            ls64 = math.log(s)
            m64 = np.float64(m)
            for k in range(n):
                store(xs, k, (_f64(xs, k) - m64) - ls64)
        else:
            ls = to_compute(xs, math.log(s))
            for k in range(n):
                store(xs, k, (load(xs, k) - m) - ls)
    else:
        inv = to_compute(xs, 1.0 / s)
        for k in range(n):
            store(xs, k, exp_c(load(xs, k) - m) * inv)


@njit(**_KW)
def _bwd_write_ip(ds, ys, s, op, into_dst):
    """:func:`_bwd_write` in place: into ``ds`` (``into_dst`` False) or ``ys``."""
    n = ds.shape[0]
    sc = to_compute(ds, s)
    if not into_dst:
        if op == 0:
            if wide_store(ds, ds):
                for k in range(n):
                    store(ds, k, _f64(ds, k) - exp64(_f64(ys, k)) * s)
            else:
                for k in range(n):
                    store(ds, k, load(ds, k) - exp_c(load(ys, k)) * sc)
        else:
            for k in range(n):
                store(ds, k, load(ys, k) * (load(ds, k) - sc))
    else:
        if op == 0:
            if wide_store(ds, ys):
                for k in range(n):
                    store(ys, k, _f64(ds, k) - exp64(_f64(ys, k)) * s)
            else:
                for k in range(n):
                    store(ys, k, load(ds, k) - exp_c(load(ys, k)) * sc)
        else:
            for k in range(n):
                store(ys, k, load(ys, k) * (load(ds, k) - sc))


@njit(**_KW)
def _bwd_write(ds, ys, os, s, op):
    """Pass 2 of the backward. For a float32 input stored as float32/float64,
    log_softmax's ``dd - exp(y) * S`` runs in float64 (:func:`exp64`) and is
    rounded once: in float32 (1-ulp ``exp``, ``S`` rounded) it was 3.65 eps at
    n=250 vs PyTorch's 3.37; in float64 it is ~0.5 eps."""
    n = ds.shape[0]
    sc = to_compute(ds, s)
    if op == 0:
        if wide_store(ds, os):
            for k in range(n):
                store(os, k, _f64(ds, k) - exp64(_f64(ys, k)) * s)
        else:
            for k in range(n):
                store(os, k, load(ds, k) - exp_c(load(ys, k)) * sc)
    else:
        for k in range(n):
            store(os, k, load(ys, k) * (load(ds, k) - sc))


@njit(**_KW)
def _lse_value(buf, off, n, step, m, s, lo):
    """float64 logsumexp from row stats; ``+inf`` rows are ``+inf`` unless NaN.

    float64 input: ``m + log(s + lo)`` as a double-double rounded once
    (~correctly rounded; plain ``m + log(s)`` was 0.372 eps at n = 32000 vs
    PyTorch's 0.359). float32 compute: ``s`` is a float64 sum of float64
    terms (:func:`term`), so ``m + log(s)`` in float64 is ~2**-31 accurate
    and the float32 result is rounded once from it.
    """
    if m == np.inf:
        return np.nan if _has_nan_strided(buf, off, n, step) else np.inf
    if is_f64(buf) and m != -np.inf and s == s:
        lh, ll = log_dd(s, lo)
        r, e = two_sum(np.float64(m), lh)
        return r + (e + ll)
    return np.float64(m) + math.log(s)


# ---------------------------------------------------------------------------
# row kernels (inner == 1)
# ---------------------------------------------------------------------------
# Operands whose axis stride is not 1 are staged through a per-task row
# buffer (:func:`_gather` / :func:`_scatter`): every kernel then compiles one
# unit-stride specialisation of the helpers, which halves compile time and
# keeps the arithmetic identical for every layout.
@njit
def _row_off(g, r, n2):
    i1 = r // n2
    return g[0] + i1 * g[1] + (r - i1 * n2) * g[2]


@njit
def _stage(buf, g, n):
    """A row-sized staging buffer if geometry ``g`` is strided, else empty."""
    return np.empty(n if g[3] != 1 else 0, buf.dtype)


@njit
def _row(buf, g, off, n, stage):
    """Row at ``off``: a contiguous view, or gathered into ``stage``. Both
    branches return a :func:`view` (no reference-counted owner): returning
    ``stage[:n]`` from one branch made every row pay for reference-count
    calls on the result (~50 ns per row at n = 128, one thread)."""
    if g[3] == 1:
        return view(buf, off, n)
    _gather(buf, off, n, g[3], stage)
    return view(stage, 0, n)


@njit
def _dst(buf, g, off, n, stage):
    """Where to write a row: a contiguous view of ``buf``, or of ``stage``."""
    if g[3] == 1:
        return view(buf, off, n)
    return view(stage, 0, n)


@njit
def _flush(buf, g, off, n, stage):
    if g[3] != 1:
        _scatter(stage, buf, off, n, g[3])


@njit(inline="always")
def _task_rows(task, ntask, rows):
    return range(task * rows // ntask, (task + 1) * rows // ntask)


# Unit-stride rows (the common case) run a loop without the staging
# branches: with them in the loop body, n = 128 rows cost ~45 ns more each
# (one thread; measured 182 vs 126 ns per row).
@njit(**_KW)
def _fwd_rows_unit(xb, xg, ob, og, n2, n, op, ip, t, rr):
    for r in rr:
        xs = view(xb, _row_off(xg, r, n2), n)
        m, s, lo = _row_stats(xs, t)
        if ip:
            _fwd_write_ip(xs, m, s, lo, op)
        else:
            _fwd_write(xs, view(ob, _row_off(og, r, n2), n), m, s, lo, op)


@njit(**_KW)
def _lse_rows_unit(xb, xg, rb, rg, n2, n, t, rr):
    for r in rr:
        xs = view(xb, _row_off(xg, r, n2), n)
        m, s, lo = _row_stats(xs, t)
        rb[_row_off(rg, r, n2)] = _lse_value(xs, 0, n, 1, m, s, lo)


@njit(**_KW)
def _bwd_rows_unit(db, dg, yb, yg, ob, og, n2, n, op, ip, t, rr):
    for r in rr:
        ds = view(db, _row_off(dg, r, n2), n)
        ys = view(yb, _row_off(yg, r, n2), n)
        s = _bwd_row_sum(ds, ys, t, op)
        if ip == 1:
            _bwd_write_ip(ds, ys, s, op, False)
        elif ip == 2:
            _bwd_write_ip(ds, ys, s, op, True)
        else:
            _bwd_write(ds, ys, view(ob, _row_off(og, r, n2), n), s, op)


#: float32 rows up to this length sum float64 terms (:func:`term` with a
#: float64 scratch, as logsumexp does): with float32 terms (1-ulp ``exp32``)
#: log_softmax/softmax lost to PyTorch on some seeds at n = 3-250; longer
#: rows keep the float32 terms (float64 ones cost +47% at n = 32000, where
#: float32 already beats PyTorch several-fold). See docs/performance.md.
SHORT64 = 1024


def short64(buf, n):
    """True when a float32-input forward row of length ``n`` sums float64
    terms (``n <= SHORT64``); bf16/f16/float64 inputs: always False."""
    raise NotImplementedError  # pragma: no cover


@overload(short64)
def _short64_ol(buf, n):
    if buf.dtype == types.float32:
        return lambda buf, n: n <= SHORT64
    return lambda buf, n: False


@njit(**_KW)
def _fwd_rows_task(xb, xg, ob, og, n2, n, op, ip, t, rr):
    """One task of :func:`fwd_rows` with scratch ``t`` (its dtype selects the
    terms' type)."""
    if xg[3] == 1 and og[3] == 1:
        _fwd_rows_unit(xb, xg, ob, og, n2, n, op, ip, t, rr)
        return
    xst = _stage(xb, xg, n)
    ost = _stage(ob, og, n)
    for r in rr:
        xo = _row_off(xg, r, n2)
        oo = _row_off(og, r, n2)
        xs = _row(xb, xg, xo, n, xst)
        m, s, lo = _row_stats(xs, t)
        if ip:
            _fwd_write_ip(xs, m, s, lo, op)
            if xg[3] != 1:
                _scatter(xs, xb, xo, n, xg[3])
        else:
            _fwd_write(xs, _dst(ob, og, oo, n, ost), m, s, lo, op)
            _flush(ob, og, oo, n, ost)


@_parallel_and_serial
def fwd_rows(xb, xg, ob, og, n1, n2, n, op, ip):
    """Forward over rows, one row per iteration (see module docstring);
    ``ip``: ``ob`` is ``xb`` with the same geometry (in place)."""
    rows = n1 * n2
    ntask = min(rows, 256)
    for task in prange(ntask):
        rr = _task_rows(task, ntask, rows)
        if short64(xb, n):
            t64 = np.empty(2 * min(n, CHUNK), np.float64)  # float64 terms
            _fwd_rows_task(xb, xg, ob, og, n2, n, op, ip, t64, rr)
        else:
            t = scratch(xb, 2 * min(n, CHUNK))  # terms + padded partners
            _fwd_rows_task(xb, xg, ob, og, n2, n, op, ip, t, rr)


@_parallel_and_serial
def lse_rows(xb, xg, rb, rg, n1, n2, n):
    """logsumexp of every row into float64 ``rb`` (geometry ``rg``)."""
    rows = n1 * n2
    ntask = min(rows, 256)
    for task in prange(ntask):
        t = np.empty(2 * min(n, CHUNK), np.float64)  # float64 terms: see term()
        if xg[3] == 1:
            _lse_rows_unit(xb, xg, rb, rg, n2, n, t, _task_rows(task, ntask, rows))
            continue
        xst = _stage(xb, xg, n)
        for r in _task_rows(task, ntask, rows):
            xo = _row_off(xg, r, n2)
            xs = _row(xb, xg, xo, n, xst)
            m, s, lo = _row_stats(xs, t)
            rb[_row_off(rg, r, n2)] = _lse_value(xs, 0, n, 1, m, s, lo)


@_parallel_and_serial
def bwd_rows(db, dg, yb, yg, ob, og, n1, n2, n, op, ip):
    """Backward over rows: log_softmax (op 0) or softmax (op 1); ``ip``:
    0 = out of place, 1 = ``ob`` is ``db`` (in place), 2 = ``ob`` is ``yb``."""
    rows = n1 * n2
    ntask = min(rows, 256)
    for task in prange(ntask):
        t = np.empty(min(n, CHUNK), np.float64)
        if dg[3] == 1 and yg[3] == 1 and og[3] == 1:
            _bwd_rows_unit(db, dg, yb, yg, ob, og, n2, n, op, ip, t,
                           _task_rows(task, ntask, rows))
            continue
        dst_ = _stage(db, dg, n)
        yst = _stage(yb, yg, n)
        ost = _stage(ob, og, n)
        for r in _task_rows(task, ntask, rows):
            do = _row_off(dg, r, n2)
            yo = _row_off(yg, r, n2)
            oo = _row_off(og, r, n2)
            ds = _row(db, dg, do, n, dst_)
            ys = _row(yb, yg, yo, n, yst)
            s = _bwd_row_sum(ds, ys, t, op)
            if ip == 1:
                _bwd_write_ip(ds, ys, s, op, False)
                if dg[3] != 1:
                    _scatter(ds, db, do, n, dg[3])
            elif ip == 2:
                _bwd_write_ip(ds, ys, s, op, True)
                if yg[3] != 1:
                    _scatter(ys, yb, yo, n, yg[3])
            else:
                _bwd_write(ds, ys, _dst(ob, og, oo, n, ost), s, op)
                _flush(ob, og, oo, n, ost)


# ---------------------------------------------------------------------------
# split rows: few long rows, chunks spread over threads
# ---------------------------------------------------------------------------
@njit(**_PKW)
def _stats_split(xb, xg, n1, n2, n, tp):
    """Row stats ``(m, s, lo)`` with chunks spread over threads; the chunk
    scratch is ``np.empty_like(tp)`` (its dtype selects the terms' type)."""
    rows = n1 * n2
    nch = (n + CHUNK - 1) // CHUNK
    ntk = (nch + _GROUP - 1) // _GROUP
    pm = np.empty(rows * nch, np.float64)
    ps = np.empty(rows * nch, np.float64)
    pl = np.empty(rows * nch, np.float64)
    for it in prange(rows * ntk):
        r = it // ntk
        g0 = (it - r * ntk) * _GROUP
        t = np.empty_like(tp)
        xst = _stage(xb, xg, CHUNK)
        o = _row_off(xg, r, n2)
        for c in range(g0, min(nch, g0 + _GROUP)):
            c0 = c * CHUNK
            ln = min(n, c0 + CHUNK) - c0
            mc, sc, lc = _chunk_stats(_row(xb, xg, o + c0 * xg[3], ln, xst), t)
            pm[r * nch + c] = mc
            ps[r * nch + c] = sc
            pl[r * nch + c] = lc
    # merge in chunk order: the same sequence as _row_stats
    ms = np.empty(rows, np.float64)
    ss = np.empty(rows, np.float64)
    ls = np.empty(rows, np.float64)
    for r in range(rows):
        m = to_compute(xb, pm[r * nch])
        s = ps[r * nch]
        lo = pl[r * nch]
        for c in range(1, nch):
            i = r * nch + c
            m, s, lo = _merge(m, s, lo, to_compute(xb, pm[i]), ps[i], pl[i])
        ms[r] = m
        ss[r] = s
        ls[r] = lo
    return ms, ss, ls


@njit(**_PKW)
def fwd_rows_split(xb, xg, ob, og, n1, n2, n, op):
    """Forward for few long rows: chunks of every row spread over threads."""
    ms, ss, ls = _stats_split(xb, xg, n1, n2, n, scratch(xb, 2 * CHUNK))
    rows = n1 * n2
    nch = (n + CHUNK - 1) // CHUNK
    for it in prange(rows * nch):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        ln = min(n, c0 + CHUNK) - c0
        xst = _stage(xb, xg, ln)
        ost = _stage(ob, og, ln)
        xo = _row_off(xg, r, n2) + c0 * xg[3]
        oo = _row_off(og, r, n2) + c0 * og[3]
        xs = _row(xb, xg, xo, ln, xst)
        m = to_compute(xb, ms[r])
        _fwd_write(xs, _dst(ob, og, oo, ln, ost), m, ss[r], ls[r], op)
        _flush(ob, og, oo, ln, ost)


@njit(**_KW)
def lse_rows_split(xb, xg, rb, rg, n1, n2, n):
    """logsumexp for few long rows (chunks spread over threads)."""
    ms, ss, ls = _stats_split(xb, xg, n1, n2, n, np.empty(2 * CHUNK, np.float64))
    for r in range(n1 * n2):
        m = to_compute(xb, ms[r])
        rb[_row_off(rg, r, n2)] = _lse_value(
            xb, _row_off(xg, r, n2), n, xg[3], m, ss[r], ls[r]
        )


@njit(**_PKW)
def bwd_rows_split(db, dg, yb, yg, ob, og, n1, n2, n, op):
    """Backward for few long rows (chunks spread over threads)."""
    rows = n1 * n2
    nch = (n + CHUNK - 1) // CHUNK
    ps = np.empty(rows * nch, np.float64)
    for it in prange(rows * nch):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        ln = min(n, c0 + CHUNK) - c0
        t = np.empty(CHUNK, np.float64)
        dst_ = _stage(db, dg, ln)
        yst = _stage(yb, yg, ln)
        ds = _row(db, dg, _row_off(dg, r, n2) + c0 * dg[3], ln, dst_)
        ys = _row(yb, yg, _row_off(yg, r, n2) + c0 * yg[3], ln, yst)
        ps[it] = _bwd_terms_sum(ds, ys, t, op)
    ss = np.empty(rows, np.float64)
    for r in range(rows):
        s = 0.0  # the same left-to-right float64 sum as _bwd_row_sum
        for c in range(nch):
            s += ps[r * nch + c]
        ss[r] = s
    for it in prange(rows * nch):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        ln = min(n, c0 + CHUNK) - c0
        dst_ = _stage(db, dg, ln)
        yst = _stage(yb, yg, ln)
        ost = _stage(ob, og, ln)
        ds = _row(db, dg, _row_off(dg, r, n2) + c0 * dg[3], ln, dst_)
        ys = _row(yb, yg, _row_off(yg, r, n2) + c0 * yg[3], ln, yst)
        oo = _row_off(og, r, n2) + c0 * og[3]
        _bwd_write(ds, ys, _dst(ob, og, oo, ln, ost), ss[r], op)
        _flush(ob, og, oo, ln, ost)


# ---------------------------------------------------------------------------
# inner kernels (inner > 1): vectorise across a tile of J inner columns
# ---------------------------------------------------------------------------
# A tile is n rows of jn <= J inner elements. With unit inner stride the
# tile is read in place (row k at base + k * sn); otherwise it is gathered
# into a dense n x J stage first (and the output scattered from one).
@njit(**_KW)
def _tile_in(buf, g, base, n, jn, J, stage):
    """``(buffer, base, row stride)`` of a tile: in place, or staged."""
    if g[4] == 1:
        return buf, base, g[3]
    for k in range(n):
        for j in range(jn):
            stage[k * J + j] = buf[base + k * g[3] + j * g[4]]
    return stage, 0, J


@njit(**_KW)
def _tile_out(buf, g, base, J, stage):
    if g[4] == 1:
        return buf, base, g[3]
    return stage, 0, J


@njit(**_KW)
def _tile_flush(buf, g, base, n, jn, J, stage):
    if g[4] != 1:
        for k in range(n):
            for j in range(jn):
                buf[base + k * g[3] + j * g[4]] = stage[k * J + j]


@njit
def _tile_stage(buf, g, n, J):
    return np.empty(n * J if g[4] != 1 else 0, buf.dtype)


@njit(**_KW)
def _col_max(xr, mc, jn):
    for j in range(jn):
        mc[j] = maxnum(mc[j], load(xr, j))


@njit(**_KW)
def _col_exp(xr, mc, tr, jn):
    for j in range(jn):
        tr[j] = exp_c(load(xr, j) - mc[j])


@njit(**_KW)
def _col_copy(dr, yr, tr, jn, op):
    if op == 0:
        for j in range(jn):
            tr[j] = _f64(dr, j)
    else:
        for j in range(jn):
            tr[j] = _f64(dr, j) * _f64(yr, j)


@njit(**_KW)
def _col_add(ta, tb, jn):
    for j in range(jn):
        ta[j] += tb[j]


@njit(**_KW)
def _tree_cols(t, cl, J, jn):
    """:func:`_tree` on every column of ``t`` laid out ``[k * J + j]``: the
    same pairs in the same order, so each column's sum is bit-identical to
    the row kernels' sum of the same values."""
    if cl == 1:
        return
    h = _top(cl)
    for i in range(cl - h):
        ta = view(t, i * J, jn)
        tb = view(t, (i + h) * J, jn)
        for j in range(jn):
            ta[j] += tb[j]
    h //= 2
    while h >= 1:
        for i in range(h):
            ta = view(t, i * J, jn)
            tb = view(t, (i + h) * J, jn)
            for j in range(jn):
                ta[j] += tb[j]
        h //= 2


@njit(**_KW)
def _inner_stats(xb, base, sn, n, jn, J, t, mc, m, s, sl):
    """Per-column ``(m, s, sl)`` of a unit-inner-stride tile (``j < jn``): the
    arithmetic of :func:`_row_stats` on every column (``t``: at least
    ``max(2, min(n, CHUNK)) * J`` elements).

    Loops are written inline (no helper call per tile row): a call per row
    costs numba reference-count traffic on the sliced arrays, which at
    J = 16 made this kernel 4x slower than the row kernel.
    """
    for c0 in range(0, n, CHUNK):
        cl = min(n - c0, CHUNK)
        for j in range(jn):
            mc[j] = neg_inf(xb)
        for k in range(cl):
            p = base + (c0 + k) * sn
            xr = view(xb, p, jn)
            for j in range(jn):
                mc[j] = maxnum(mc[j], load(xr, j))
        if is_f64(xb):
            # the compensated sum of _chunk_stats, per column; t >= 2J here
            th = t[:jn]
            tl = t[J : J + jn]
            for j in range(jn):
                th[j] = 0.0
                tl[j] = 0.0
            for k in range(cl):
                xr = view(xb, base + (c0 + k) * sn, jn)
                for j in range(jn):
                    th[j], tl[j] = acc_dd(th[j], tl[j], term(xb, load(xr, j), mc[j], t))
            for j in range(jn):
                hs = th[j] + tl[j]
                tl[j] = tl[j] - (hs - th[j])
                th[j] = hs
        else:
            _inner_tree(xb, base, sn, c0, cl, jn, J, t, mc)
        for j in range(jn):
            lc = 0.0
            if mc[j] == neg_inf(xb):
                nan = _has_nan_strided(xb, base + c0 * sn + j, cl, sn)
                sc = np.nan if nan else 0.0
            else:
                sc = np.float64(t[j])
                if is_f64(xb):
                    lc = np.float64(t[J + j])
            if c0 == 0:
                m[j] = mc[j]
                s[j] = sc
                sl[j] = lc
            else:
                m[j], s[j], sl[j] = _merge(m[j], s[j], sl[j], mc[j], sc, lc)


@njit(**_KW)
def _inner_tree(xb, base, sn, c0, cl, jn, J, t, mc):
    """The tree sum of :func:`_chunk_stats` on every column of a chunk of a
    tile; column sums end in ``t[:jn]``."""
    # exp terms with the tree's first level fused in, as in _chunk_stats:
    # row k holds e_k + e_{k+h} (k < cl - h) or e_k; then the tree on h rows
    h = _top(cl) if cl > 1 else 1
    for k in range(cl):
        p = base + (c0 + k) * sn
        xr = view(xb, p, jn)
        tr = view(t, k * J, jn)
        if k + h < cl:
            p2 = p + h * sn
            xr2 = view(xb, p2, jn)
            for j in range(jn):
                e1 = term(xb, load(xr, j), mc[j], t)
                tr[j] = e1 + term(xb, load(xr2, j), mc[j], t)
        elif k < h or cl == 1:
            for j in range(jn):
                tr[j] = term(xb, load(xr, j), mc[j], t)
        else:
            break
    if cl > 1:
        _tree_cols(t, h, J, jn)


@njit
def _tiles(ni, J):
    return (ni + J - 1) // J


@njit(**_KW)
def _inner_fwd_row(xr, orow, m, f, lg, ll, jn, op):
    """Pass 2 of the forward on a tile row; float64 as in :func:`_fwd_write`."""
    if op == 0:
        if is_f64(xr):
            for j in range(jn):
                store(orow, j, _ls64(load(xr, j), m[j], lg[j], ll[j]))
        elif wide_store(xr, orow):
            for j in range(jn):
                store(orow, j, (_f64(xr, j) - np.float64(m[j])) - lg[j])
        else:
            for j in range(jn):
                store(orow, j, (load(xr, j) - m[j]) - f[j])
    else:
        for j in range(jn):
            store(orow, j, exp_c(load(xr, j) - m[j]) * f[j])


@njit(**_KW)
def _fwd_inner_tile(xb, xg, ob, og, n, op, J, xo, oo, jn, t):
    """One tile of :func:`fwd_inner` with scratch ``t`` (its dtype selects
    the terms' type, as in :func:`fwd_rows`)."""
    mc = scratch(xb, J)
    m = scratch(xb, J)
    s = np.empty(J, np.float64)
    sl = np.empty(J, np.float64)
    xst = _tile_stage(xb, xg, n, J)
    ost = _tile_stage(ob, og, n, J)
    xt, xbase, xsn = _tile_in(xb, xg, xo, n, jn, J, xst)
    ot, obase, osn = _tile_out(ob, og, oo, J, ost)
    _inner_stats(xt, xbase, xsn, n, jn, J, t, mc, m, s, sl)
    f = mc  # reuse: per-column log(s) or 1/s in the compute type
    lg = np.empty(J, np.float64)
    ll = np.empty(J, np.float64)
    for j in range(jn):
        lg[j], ll[j] = _row_log(xb, s[j], sl[j])
        f[j] = to_compute(xb, lg[j] if op == 0 else 1.0 / s[j])
    for k in range(n):
        px = xbase + k * xsn
        po = obase + k * osn
        _inner_fwd_row(view(xt, px, jn), view(ot, po, jn), m, f, lg, ll, jn, op)
    _tile_flush(ob, og, oo, n, jn, J, ost)


@_parallel_and_serial
def fwd_inner(xb, xg, ob, og, n1, n2, n, ni, op, J):
    """Forward, reduction over a strided axis, vectorised across inner."""
    ntile = _tiles(ni, J)
    for it in prange(n1 * n2 * ntile):
        o = it // ntile
        j0 = (it - o * ntile) * J
        jn = min(J, ni - j0)
        xo = _row_off(xg, o, n2) + j0 * xg[4]
        oo = _row_off(og, o, n2) + j0 * og[4]
        if short64(xb, n):
            t64 = np.empty(max(2, min(n, CHUNK)) * J, np.float64)  # see fwd_rows
            _fwd_inner_tile(xb, xg, ob, og, n, op, J, xo, oo, jn, t64)
        else:
            t = scratch(xb, max(2, min(n, CHUNK)) * J)
            _fwd_inner_tile(xb, xg, ob, og, n, op, J, xo, oo, jn, t)


@_parallel_and_serial
def lse_inner(xb, xg, rb, rg, n1, n2, n, ni, J):
    """logsumexp over a strided axis into float64 ``rb`` (geometry ``rg``)."""
    ntile = _tiles(ni, J)
    for it in prange(n1 * n2 * ntile):
        o = it // ntile
        j0 = (it - o * ntile) * J
        jn = min(J, ni - j0)
        xo = _row_off(xg, o, n2) + j0 * xg[4]
        ro = _row_off(rg, o, n2) + j0 * rg[4]
        t = np.empty(max(2, min(n, CHUNK)) * J, np.float64)  # see term()
        mc = scratch(xb, J)
        m = scratch(xb, J)
        s = np.empty(J, np.float64)
        sl = np.empty(J, np.float64)
        xst = _tile_stage(xb, xg, n, J)
        xt, xbase, xsn = _tile_in(xb, xg, xo, n, jn, J, xst)
        _inner_stats(xt, xbase, xsn, n, jn, J, t, mc, m, s, sl)
        for j in range(jn):
            rb[ro + j * rg[4]] = _lse_value(xt, xbase + j, n, xsn, m[j], s[j], sl[j])


@njit(**_KW)
def _inner_bwd_row(dr, yr, orow, sc, s, jn, op):
    """Pass 2 of the backward on a tile row (as :func:`_bwd_write`)."""
    if op == 0:
        if wide_store(dr, orow):
            for j in range(jn):
                store(orow, j, _f64(dr, j) - exp64(_f64(yr, j)) * s[j])
        else:
            for j in range(jn):
                store(orow, j, load(dr, j) - exp_c(load(yr, j)) * sc[j])
    else:
        for j in range(jn):
            store(orow, j, load(yr, j) * (load(dr, j) - sc[j]))


@_parallel_and_serial
def bwd_inner(db, dg, yb, yg, ob, og, n1, n2, n, ni, op, J):
    """Backward, reduction over a strided axis, vectorised across inner."""
    ntile = _tiles(ni, J)
    for it in prange(n1 * n2 * ntile):
        o = it // ntile
        j0 = (it - o * ntile) * J
        jn = min(J, ni - j0)
        do = _row_off(dg, o, n2) + j0 * dg[4]
        yo = _row_off(yg, o, n2) + j0 * yg[4]
        oo = _row_off(og, o, n2) + j0 * og[4]
        t = np.empty(min(n, CHUNK) * J, np.float64)
        dst_ = _tile_stage(db, dg, n, J)
        yst = _tile_stage(yb, yg, n, J)
        ost = _tile_stage(ob, og, n, J)
        dt, dbase, dsn = _tile_in(db, dg, do, n, jn, J, dst_)
        yt, ybase, ysn = _tile_in(yb, yg, yo, n, jn, J, yst)
        ot, obase, osn = _tile_out(ob, og, oo, J, ost)
        s = np.zeros(J, np.float64)
        for c0 in range(0, n, CHUNK):
            cl = min(n - c0, CHUNK)
            for k in range(cl):
                pd = dbase + (c0 + k) * dsn
                py = ybase + (c0 + k) * ysn
                tr = t[k * J : k * J + jn]
                _col_copy(view(dt, pd, jn), view(yt, py, jn), tr, jn, op)
            _tree_cols(t, cl, J, jn)
            for j in range(jn):
                s[j] += t[j]
        sc = scratch(db, J)
        for j in range(jn):
            sc[j] = to_compute(db, s[j])
        for k in range(n):
            pd = dbase + k * dsn
            py = ybase + k * ysn
            po = obase + k * osn
            _inner_bwd_row(
                view(dt, pd, jn), view(yt, py, jn), view(ot, po, jn), sc, s, jn, op
            )
        _tile_flush(ob, og, oo, n, jn, J, ost)
