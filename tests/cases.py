"""Named input cases for the conformance suite (OpInfo / numbagg style).

A :class:`Case` is a recipe: base values (float64, seeded), a base shape, a
view applied after casting to the dtype under test (transpose, steps,
negative strides, ``np.broadcast_to``...) and the axis to reduce along. The
same recipe builds ``x``, ``diff_dst`` and ``dst`` with one layout, so every
op sees every layout.

Tags select subsets: ``"0d"`` (no valid axis), ``"empty"`` (a zero in the
shape), ``"strided"`` (not C-contiguous), ``"broadcast"`` (read-only views
with zero strides), ``"special"`` (NaN/inf/huge rows), ``"exact"`` (results
that API.md requires to be exact), ``"slow"`` (long rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
import zlib

import ml_dtypes
import numpy as np

__all__ = [
    "Case",
    "CASES",
    "cases",
    "case_by_name",
    "special_rows",
    "special_columns",
    "line_out",
    "column_grad_inputs",
    "INT_DTYPES",
    "int_inputs",
]

View = Callable[[np.ndarray], np.ndarray]


def _seed(name: str, seed: int) -> int:
    # stable across processes (str hash() is salted per interpreter)
    return zlib.crc32(f"{name}#{seed}".encode())


def _identity(a: np.ndarray) -> np.ndarray:
    return a


def _normal(rng: np.random.Generator, shape, dtype: np.dtype) -> np.ndarray:
    # logits of a few units: every exp term matters, nothing underflows
    return rng.normal(0.0, 3.0, size=shape)


@dataclass(frozen=True)
class Case:
    """One input recipe.

    Attributes:
      name: pytest id.
      shape: base (contiguous) shape, before ``view``.
      axis: the axis of the *viewed* array to reduce along.
      view: maps a contiguous base array of ``dtype`` to the tested array.
      values: ``(rng, shape, dtype) -> float64 array`` of base values.
      tags: see the module docstring.
    """

    name: str
    shape: tuple[int, ...]
    axis: int
    view: View = _identity
    values: Callable[[np.random.Generator, tuple, np.dtype], np.ndarray] = _normal
    tags: frozenset[str] = field(default_factory=frozenset)

    def build(self, dtype, seed: int = 0, values=None) -> np.ndarray:
        """The case's array of ``dtype`` (values rounded once to ``dtype``)."""
        dtype = np.dtype(dtype)
        rng = np.random.default_rng(_seed(self.name, seed))
        base = self.values(rng, self.shape, dtype) if values is None else values
        base = np.asarray(base, np.float64)
        with np.errstate(over="ignore"):  # huge logits overflow to inf in f16
            return self.view(base.astype(dtype, order="C"))

    def layout_like(self, values: np.ndarray) -> np.ndarray:
        """``values`` (shaped like the viewed array) in this case's layout.

        Writeable views get the same strides as ``build``'s result; read-only
        (broadcast) views cannot hold arbitrary values, so those come back
        C-contiguous.
        """
        values = np.asarray(values)
        probe = self.view(np.zeros(self.shape, values.dtype))
        if not probe.flags.writeable or probe.shape != values.shape:
            return values.copy(order="C")
        probe[...] = values
        return probe

    def backward_inputs(self, dtype, seed: int = 1):
        """``(diff_dst, dst)`` in this case's layout.

        ``dst`` is the float64 log_softmax of ``build(dtype)``, rounded once
        to ``dtype`` (a proper forward output); ``diff_dst`` is N(0, 1).
        Broadcast cases get a broadcast ``diff_dst`` and a contiguous ``dst``.
        """
        dtype = np.dtype(dtype)
        x = self.build(dtype)
        xf = x.astype(np.float64)
        with np.errstate(all="ignore"):
            m = np.max(xf, axis=self.axis, keepdims=True, initial=-np.inf)
            y = (xf - m) - np.log(np.sum(np.exp(xf - m), axis=self.axis, keepdims=True))
        dst = self.layout_like(y.astype(dtype))
        rng = np.random.default_rng(_seed(self.name + "/diff_dst", seed))
        diff_dst = self.build(dtype, values=rng.normal(size=self.shape))
        return diff_dst, dst


def _tags(*names: str) -> frozenset[str]:
    return frozenset(names)


# --------------------------------------------------------------------------
# special-value rows (per API.md section 2), length 6
# --------------------------------------------------------------------------
def _big_neg(dtype: np.dtype) -> float:
    # ~ -1e7 where the dtype can hold it; float16 tops out at 65504
    return -1e7 if float(ml_dtypes.finfo(dtype).max) > 1e7 else -6e4


def special_rows(dtype) -> dict[str, list[float]]:
    """Named rows of special values, as float64 lists, for ``dtype``."""
    dtype = np.dtype(dtype)
    inf, nan = np.inf, np.nan
    b = _big_neg(dtype)
    return {
        "normal": [0.5, -1.25, 2.0, 0.0, 3.5, -2.0],
        "nan": [1.0, nan, 2.0, 3.0, -1.0, 0.0],
        "nan_last": [1.0, 2.0, 3.0, -1.0, 0.0, nan],
        "posinf": [1.0, 2.0, inf, 3.0, -1.0, 0.0],
        "posinf_neginf": [inf, -inf, 0.0, 1.0, 2.0, 3.0],
        "nan_neginf": [-inf, nan, -inf, -inf, -inf, -inf],
        "all_neginf": [-inf] * 6,
        "one_neginf": [1.0, -inf, 2.0, 3.0, -1.0, 0.0],
        "one_finite": [-inf, -inf, 2.5, -inf, -inf, -inf],
        # every other exp underflows, even in float64 / long double sums
        "dominant": [0.0, -1000.0, -2000.0, -1500.0, -3000.0, -1200.0],
        "dominant_last": [-1000.0, -2000.0, -1500.0, -3000.0, -1200.0, 7.0],
        "huge_pos": [1e4, 9999.0, 9998.0, 9997.0, 9990.0, 9000.0],
        "huge_neg": [b, b - 1, b - 2, b - 3, b + 1, b - 10],
        "huge_spread": [1e4, -1e4, 0.0, 5e3, -5e3, 1.0],
        "zeros": [0.0] * 6,
    }


def _special_block(rng, shape, dtype) -> np.ndarray:
    rows = list(special_rows(dtype).values())
    return np.array(rows, np.float64)


_N_SPECIAL = len(special_rows(np.float32))


def _special_long(rng, shape, dtype) -> np.ndarray:
    # long rows (not a multiple of any vector width) whose special element
    # sits at the head, the middle or the tail
    rows, n = shape
    a = rng.normal(0.0, 3.0, size=shape)
    a[0, -1] = np.nan
    a[1, n // 2] = np.inf
    a[2, 0] = -np.inf
    a[3, :] = -np.inf
    a[4, :] = -np.inf
    a[4, n - 1] = 1.0
    a[5, :] = -2000.0
    a[5, 3] = 0.0
    return a


def _huge_rows(rng, shape, dtype) -> np.ndarray:
    a = np.empty(shape)
    b = _big_neg(np.dtype(dtype))
    a[0] = 1e4 - np.arange(shape[1]) % 7
    a[1] = b - np.arange(shape[1]) % 5
    return a


# --------------------------------------------------------------------------
# the case list
# --------------------------------------------------------------------------
CASES: list[Case] = [
    # 0-d: no axis is valid (logsumexp(axis=None) and axis=() only)
    Case("scalar_0d", (), -1, tags=_tags("0d")),
    # length-1 rows: exact results
    Case("1d_n1", (1,), -1, tags=_tags("exact")),
    Case("2d_n1_rows", (5, 1), -1, tags=_tags("exact")),
    Case("2d_n1_axis0", (1, 6), 0, tags=_tags("exact")),
    Case("3d_n1_middle", (3, 1, 4), 1, tags=_tags("exact")),
    # small / medium / long rows, several axes
    Case("1d_n7", (7,), 0),
    Case("2d_n2", (4, 2), 1),
    Case("2d_n100", (8, 100), -1),
    Case("2d_n1000_axis0", (1000, 3), 0),
    Case("2d_n5000", (3, 5000), -1),  # > 4096: several accumulation blocks
    Case("2d_axis0", (100, 6), 0),
    Case("2d_axis_neg2", (33, 5), -2),
    Case("3d_axis1", (3, 50, 4), 1),
    Case("3d_axis_neg1", (3, 4, 50), -1),
    Case("3d_axis0", (17, 2, 3), 0),
    Case("4d_nchw_axis1", (2, 16, 3, 5), 1),
    Case(
        "4d_nhwc_as_nchw_axis1",
        (2, 3, 5, 16),
        1,
        view=lambda a: a.transpose(0, 3, 1, 2),
        tags=_tags("strided"),
    ),
    Case("4d_axis_neg1", (2, 3, 4, 33), -1),
    Case("5d_axis2", (2, 3, 4, 5, 6), 2),
    Case("5d_axis0", (3, 2, 2, 3, 2), 0),
    Case("5d_axis_neg1", (2, 2, 3, 2, 17), -1),
    # strided views
    Case("transposed_axis0", (30, 40), 0, view=lambda a: a.T, tags=_tags("strided")),
    Case("transposed_axis1", (30, 40), 1, view=lambda a: a.T, tags=_tags("strided")),
    Case(
        "sliced_steps", (20, 90), -1, view=lambda a: a[::2, ::3], tags=_tags("strided")
    ),
    Case(
        "sliced_steps_axis0",
        (90, 20),
        0,
        view=lambda a: a[::3, 1::2],
        tags=_tags("strided"),
    ),
    Case(
        "negative_strides",
        (10, 50),
        -1,
        view=lambda a: a[::-1, ::-2],
        tags=_tags("strided"),
    ),
    Case(
        "negative_strides_axis0",
        (50, 10),
        0,
        view=lambda a: a[::-1, ::-1],
        tags=_tags("strided"),
    ),
    Case(
        "3d_middle_sliced",
        (4, 30, 6),
        1,
        view=lambda a: a[:, ::2, 1:5],
        tags=_tags("strided"),
    ),
    Case(
        "5d_permuted_axis3",
        (2, 3, 4, 5, 6),
        3,
        view=lambda a: a.transpose(4, 2, 0, 3, 1)[:, ::-1],
        tags=_tags("strided"),
    ),
    Case(
        "broadcast_rows",
        (37,),
        -1,
        view=lambda a: np.broadcast_to(a, (4, 37)),
        tags=_tags("strided", "broadcast"),
    ),
    Case(
        "broadcast_along_axis",
        (5, 1),
        -1,
        view=lambda a: np.broadcast_to(a, (5, 9)),
        tags=_tags("strided", "broadcast"),
    ),
    Case(
        "broadcast_along_axis0",
        (1, 7),
        0,
        view=lambda a: np.broadcast_to(a, (12, 7)),
        tags=_tags("strided", "broadcast"),
    ),
    # zero-size: the zero in every position, reduced or not
    Case("empty_0", (0,), 0, tags=_tags("empty")),
    Case("empty_0x5_axis1", (0, 5), 1, tags=_tags("empty")),
    Case("empty_0x5_axis0", (0, 5), 0, tags=_tags("empty")),
    Case("empty_5x0_axis1", (5, 0), 1, tags=_tags("empty")),
    Case("empty_5x0_axis0", (5, 0), 0, tags=_tags("empty")),
    Case("empty_2x0x3_axis0", (2, 0, 3), 0, tags=_tags("empty")),
    Case("empty_2x0x3_axis1", (2, 0, 3), 1, tags=_tags("empty")),
    Case("empty_2x0x3_axis2", (2, 0, 3), 2, tags=_tags("empty")),
    # special-value rows (and the same rows as columns: the inner > 1 path)
    Case(
        "special_rows",
        (_N_SPECIAL, 6),
        -1,
        values=_special_block,
        tags=_tags("special"),
    ),
    Case(
        "special_cols",
        (_N_SPECIAL, 6),
        0,
        view=lambda a: a.T,
        values=_special_block,
        tags=_tags("special", "strided"),
    ),
    Case(
        "special_cols_contiguous",
        (6, _N_SPECIAL),
        0,
        values=lambda r, s, d: _special_block(r, s, d).T,
        tags=_tags("special"),
    ),
    Case("special_long", (6, 1003), -1, values=_special_long, tags=_tags("special")),
    Case(
        "special_long_axis0",
        (6, 1003),
        0,
        view=lambda a: a.T,
        values=_special_long,
        tags=_tags("special", "strided"),
    ),
    Case("huge_rows", (2, 40), -1, values=_huge_rows, tags=_tags("special")),
    # long rows: behind @pytest.mark.slow
    Case("long_32768", (4, 32768), -1, tags=_tags("slow")),
    Case("long_65536_axis0", (65536, 2), 0, tags=_tags("slow")),
    Case("long_1e6", (1, 1_000_000), -1, tags=_tags("slow")),
]

_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "case names must be unique"


def case_by_name(name: str) -> Case:
    return _BY_NAME[name]


def cases(*, include=(), exclude=("0d",)) -> list[Case]:
    """Cases having every tag in ``include`` and none in ``exclude``."""
    inc, exc = set(include), set(exclude)
    return [c for c in CASES if inc <= c.tags and not (exc & c.tags)]


# --------------------------------------------------------------------------
# integer and bool inputs (promoted to float32)
# --------------------------------------------------------------------------
INT_DTYPES = (
    np.dtype(np.bool_),
    np.dtype(np.int8),
    np.dtype(np.uint8),
    np.dtype(np.int16),
    np.dtype(np.int32),
    np.dtype(np.int64),
    np.dtype(np.uint64),
)


def int_inputs(dtype) -> np.ndarray:
    """A (3, 7) array of ``dtype`` with small and extreme values."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.array([[True, False, True, False, False, True, True]] * 3)
    info = np.iinfo(dtype)
    rows = [
        np.arange(7) - (3 if info.min < 0 else 0),
        [0, 1, 2, 3, 4, 5, 6],
        [info.max, info.min, 0, 1, info.max - 1, 2, 3],
    ]
    return np.array(rows, dtype=dtype)


def special_columns(x: np.ndarray) -> np.ndarray:
    """``x`` (3-D, the columns on axis 2, at least 6 of them) with special
    columns, in place: all -inf, all -inf but a NaN, -inf but one value, a
    NaN, an inf, a huge spread (columns 0-5 of the first or last plane).
    For the column kernels' tests (strips, few rows)."""
    x[0, :, 0] = -np.inf
    x[0, :, 1] = -np.inf
    x[0, -1, 1] = np.nan
    x[-1, :, 2] = -np.inf
    x[-1, 0, 2] = 5.0
    x[0, 0, 3] = np.nan
    x[-1, -1, 4] = np.inf
    x[0, 0, 5] = 3e38
    x[0, -1, 5] = -3e38
    return x


def line_out(shape, head: int, dtype=np.float32) -> np.ndarray:
    """An empty output whose first element lies ``head`` items past a 64-byte
    line (numpy's own arrays start 16 bytes past one)."""
    size = int(np.prod(shape))
    item = np.dtype(dtype).itemsize
    raw = np.empty(size + 128 // item, dtype)
    off = (-raw.ctypes.data % 64) // item + head
    return raw[off : off + size].reshape(shape)


def column_grad_inputs(seed: int, shape) -> tuple[np.ndarray, np.ndarray]:
    """``(x, diff_dst)``, float32, for a column kernel's backward on ``shape``
    (3-D, the columns on axis 2, at least 4 of them): ``diff_dst`` with a
    NaN, a column of inf and a huge value (columns 1-3)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    d = rng.standard_normal(shape).astype(np.float32)
    d[0, 0, 1] = np.nan
    d[1, :, 2] = np.inf
    d[2, -1, 3] = 3e38
    return x, d
