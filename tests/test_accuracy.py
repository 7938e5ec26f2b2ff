"""The accuracy metric (API.md section 1): one rule, used by tests, driver and CLI."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from logsoftmax.accuracy import eps_errors, max_eps_error

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
nan, inf = np.nan, np.inf


def test_formula():
    ref = np.array([1.0, -3.0, 1e-3, -inf], np.float64)
    got = np.array([1.0 + 4 * EPS32, -3.0 - 6 * EPS32, 1e-3 + EPS32, -inf],
                   np.float32)
    err = eps_errors(got, ref, "f32")
    assert err.dtype == np.float64 and err.shape == (4,)
    # |d| / (eps * max(1, |ref|)): 4 / 1, 6 / 3, 1 / 1, and an exact -inf
    assert err == pytest.approx([4.0, 2.0, 1.0, 0.0], rel=1e-3)
    assert max_eps_error(got, ref, "f32") == pytest.approx(4.0, rel=1e-3)
    assert max_eps_error(got[1:], ref[1:], np.float32) == pytest.approx(2.0, rel=1e-3)
    assert max_eps_error(got[1:], ref[1:]) == pytest.approx(2.0, rel=1e-3)  # y's dtype
    assert max_eps_error(got[:0], ref[:0], "f32") == 0.0
    zero_d = eps_errors(np.float32(-np.inf), np.float64(-np.inf))  # 0-d
    assert zero_d.shape == () and zero_d == 0.0
    assert max_eps_error(np.float32(1 + EPS32), np.float64(1.0)) == 1.0


def test_unit_is_the_named_dtype():
    y = np.array([1.0 + 2**-7], ml_dtypes.bfloat16)
    assert max_eps_error(y, np.array([1.0]), "bf16") == 1.0  # one bf16 eps
    assert max_eps_error(y, np.array([1.0])) == 1.0
    assert max_eps_error(y, np.array([1.0]), "f32") == 2**-7 / EPS32


@pytest.mark.parametrize(
    "y, ref, expected",
    [
        (nan, nan, 0.0),  # same NaN
        (inf, inf, 0.0),  # same infinity
        (-inf, -inf, 0.0),
        (inf, -inf, inf),  # opposite infinity
        (nan, 1.0, inf),  # NaN against a number
        (1.0, nan, inf),
        (-inf, -3.0, inf),  # an infinity against a finite value
        (3.0, inf, inf),
        (nan, inf, inf),
    ],
)
def test_special_values(y, ref, expected):
    assert max_eps_error(np.float32([y]), np.float64([ref]), "f32") == expected


def test_overflow_to_the_rounded_infinity_is_exact():
    # -65600 rounds to -inf in float16; -65000 rounds to -65024, a finite miss
    assert max_eps_error(np.float16([-inf]), np.array([-65600.0]), "f16") == 0.0
    assert max_eps_error(np.float16([-inf]), np.array([-65000.0]), "f16") == inf
    # bf16 rounds once (dtypes.round_to): just above bf16's max rounds to it
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    y = np.array([inf], ml_dtypes.bfloat16)
    assert max_eps_error(y, np.array([big * (1 + 2**-10)]), "bf16") == inf


def test_long_double_oracle_is_not_rounded_to_float64():
    # a long double oracle a quarter ulp above 1 measures 0.25 float64 eps,
    # not the 0 a float64 round trip would give
    if np.finfo(np.longdouble).eps >= EPS64:
        pytest.skip("long double is float64 on this platform")
    ref = np.longdouble(1) + np.longdouble(EPS64) / 4
    assert max_eps_error(np.float64([1.0]), np.array([ref])) == 0.25


def test_shapes_must_agree():
    got = np.float32([[1.0, 1.0]])
    match = r"y has shape \(1, 2\), y_ref has shape \(2,\)"
    with pytest.raises(ValueError, match=match):
        eps_errors(got, np.array([1.0, 1.0]), "f32")
