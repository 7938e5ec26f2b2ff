"""Input fills, as benchdnn's softmax driver makes them, plus a random one.

Forward (``fill_fwd``), per row along the axis of the logical (outer, axis,
inner) view: every element is the lowest finite value of the narrower of
sdt/ddt, except one contiguous run starting at a random position: 1-2
values of ``88*sign + 2``, then 2-5 of ``88*sign + 1``, then 5-8 of
``88*sign`` (runs shortened from the back to fit short rows). ``sign`` is -1
in every odd chunk of 64 outer indices (so those rows hold -86, -87, -88),
+1 elsewhere. Positive values overflow a naive ``exp``; negative ones test
that the max is subtracted with its sign. Each chunk seeds its own
``std::minstd_rand(first_outer_index + 1)`` and draws with libstdc++'s
``uniform_int_distribution`` algorithm, so the fill is identical to a
libstdc++ build of benchdnn and independent of the thread count.

Backward (``fill_bwd``), element ``i`` of the dense logical array gets
``gen = (11*i + 37 + 19*seed) % range``, ``range = 8`` if the data type is
f16 or ``seed`` is even, else 128; ``diff_dst = sign*gen`` and
``dst = sign*gen/range`` with ``sign = +1`` for even seeds. benchdnn uses
seed 1 for diff_dst and 0 for dst with LOGSOFTMAX (diff_dst <= 0, dst >= 0:
``dst`` is then *not* a valid log-probability) and the opposite for SOFTMAX.

``fill_random``: standard-normal logits (``numpy.random.default_rng(seed)``),
for realistic timing.

Every fill returns a dense float32 array of the logical shape; the caller
casts it to the data type (values are already representable) and copies it
into the problem's memory layout.
"""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np

__all__ = ["fill_fwd", "fill_bwd", "fill_random", "lowest", "row_view_sizes"]

_MINSTD_A = 48271
_MINSTD_M = 2147483647  # 2**31 - 1
_CHUNK = 64  # outer indices per chunk, fixed so any thread count fills alike


def lowest(dt_name: str) -> float:
    """The lowest finite value of a data type (f64 is capped at f32's: the
    fill is made in float32, as benchdnn's is)."""
    np_dt = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
             "f64": np.float32}[dt_name]
    return float(ml_dtypes.finfo(np_dt).min)


def row_view_sizes(shape, axis: int) -> tuple[int, int, int]:
    """``(outer, axis_size, inner)`` of a logical shape."""
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, int(shape[axis]), inner


@numba.njit(cache=True, inline="always")
def _next(state):
    return (state * _MINSTD_A) % _MINSTD_M


@numba.njit(cache=True)
def _uniform(state, a, b):
    """libstdc++ ``uniform_int_distribution<int>(a, b)`` over minstd_rand
    (the generator's range is not a full 32-bit word, so libstdc++ takes the
    classic two-division path). Returns ``(value, new_state)``."""
    urngrange = _MINSTD_M - 2  # max() - min() = (2**31 - 2) - 1
    uerange = b - a + 1
    scaling = urngrange // uerange
    past = uerange * scaling
    while True:
        state = _next(state)
        ret = state - 1
        if ret < past:
            break
    return ret // scaling + a, state


@numba.njit(parallel=True, cache=True)
def _fill_fwd_kernel(out, outer, axis_size, inner, background, sign_flip):
    n_chunks = (outer + _CHUNK - 1) // _CHUNK
    for chunk in numba.prange(n_chunks):
        idx_start = chunk * _CHUNK
        idx_end = min(idx_start + _CHUNK, outer)
        state = (idx_start + 1) % _MINSTD_M
        if state == 0:
            state = 1
        state = _next(state)  # msr.discard(1)
        sign = -1 if (chunk % 2 != 0 and sign_flip) else 1
        top0 = np.float32(88 * sign + 2)
        top1 = np.float32(88 * sign + 1)
        top2 = np.float32(88 * sign)
        n_top = np.empty(3, np.int64)
        for idx in range(idx_start, idx_end):
            for j in range(inner):
                n_top[0], state = _uniform(state, 1, 2)
                n_top[1], state = _uniform(state, 2, 5)
                n_top[2], state = _uniform(state, 5, 8)
                i = 2
                n_sum = n_top[0] + n_top[1] + n_top[2]
                while n_sum > axis_size:  # shorten the runs from the back
                    n_sum -= n_top[i]
                    n_top[i] -= min(n_top[i], n_sum + n_top[i] - axis_size)
                    n_sum += n_top[i]
                    i -= 1
                state = _next(_next(state))  # msr.discard(2)
                start, state = _uniform(state, 0, axis_size - n_sum)
                i = 0
                base = idx * axis_size * inner + j
                for k in range(axis_size):
                    v = background
                    if start <= k < start + n_sum:
                        v = top0 if i == 0 else (top1 if i == 1 else top2)
                        n_top[i] -= 1
                        if n_top[i] == 0:
                            i += 1
                    out[base + k * inner] = v


def fill_fwd(shape, axis: int, sdt: str, ddt: str) -> np.ndarray:
    """benchdnn's forward (src) fill; see the module docstring.

    Returns:
      float32 array of ``shape`` (dense, logical order).
    """
    out = np.empty(int(np.prod(shape, dtype=np.int64)), np.float32)
    if out.size:
        outer, n, inner = row_view_sizes(shape, axis)
        bg = max(lowest(sdt), lowest(ddt))
        _fill_fwd_kernel(out, outer, n, inner, np.float32(bg), True)
    return out.reshape(shape)


@numba.njit(parallel=True, cache=True)
def _fill_bwd_kernel(out, seed, rng, coeff):
    for i in numba.prange(out.size):
        gen = (11 * i + 37 + 19 * seed) % rng
        out[i] = np.float32(coeff) * np.float32(gen)


def _bwd_tensor(shape, dt: str, seed: int, is_diff_dst: bool) -> np.ndarray:
    """One backward tensor: ``sign*gen`` (diff_dst) or ``sign*gen/range`` (dst)."""
    rng = 8 if (seed % 2 == 0 or dt == "f16") else 128
    sign = 1.0 if seed % 2 == 0 else -1.0
    coeff = sign if is_diff_dst else sign / rng
    out = np.empty(int(np.prod(shape, dtype=np.int64)), np.float32)
    if out.size:
        _fill_bwd_kernel(out, seed, rng, coeff)
    return out.reshape(shape)


def fill_bwd(shape, alg: str, ddt: str) -> tuple[np.ndarray, np.ndarray]:
    """benchdnn's backward fill: ``(diff_dst, dst)`` as float32 arrays.

    For LOGSOFTMAX ``diff_dst = -((11*i + 56) % range)`` (range 128, or 8
    for f16) and ``dst = ((11*i + 37) % 8) / 8``; for SOFTMAX the signs and
    seeds swap. See the module docstring.

    Returns:
      Two float32 arrays of ``shape`` (dense, logical order).
    """
    neg_sign = alg == "SOFTMAX"
    diff_dst = _bwd_tensor(shape, ddt, int(not neg_sign), True)
    dst = _bwd_tensor(shape, ddt, int(neg_sign), False)
    return diff_dst, dst


def fill_random(shape, seed: int = 0) -> np.ndarray:
    """Standard-normal float32 logits of ``shape`` (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(int(np.prod(shape, dtype=np.int64)), np.float32).reshape(
        shape
    )
