"""The JAX adapter (API.md section 6): ``logsoftmax.jax``.

- The FFI bridge gives the front door's bits (same numpy array through
  ``logsoftmax.log_softmax``...) for every kernel form: rows, short rows,
  a non-last axis, length-1 axes, empty arrays, multi-axis logsumexp.
- Values and gradients (first and second order) against ``jax.nn`` and
  ``jax.scipy.special.logsumexp`` in float64; under ``jit`` and ``vmap``.
- float32, bfloat16, float16 within one rounding of a float64 oracle;
  errors at trace time; a training loop whose loss curve matches jax.nn's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import logsoftmax  # noqa: E402
import logsoftmax.jax as lj  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), BF16, np.dtype(np.float16), np.dtype(np.float64)]
DT_IDS = ["f32", "bf16", "f16", "f64"]
# The float16 handlers link the same kernels as bfloat16's for int16
# storage: ~50 s of compiling each on a cold cache (AMD EPYC Zen 3, where a
# cold `make test` took 18 minutes), so `make test-slow` runs those cases


def _dtypes(n=len(DTYPES), slow=("f16",)):
    """``DTYPES[:n]`` as parametrize cases, those named in ``slow`` run by
    `make test-slow` only."""
    return [pytest.param(d, id=i, marks=pytest.mark.slow if i in slow else ())
            for d, i in zip(DTYPES[:n], DT_IDS[:n])]


def x64():
    """float64 arrays for the duration of a ``with`` block."""
    enable = getattr(jax, "enable_x64", None)
    if enable is None:  # jax < 0.7
        from jax.experimental import enable_x64 as enable
    return enable(True)


def _rand(shape, dtype=np.float64, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


# --------------------------------------------------------------------------
# the FFI bridge gives the front door's bits
# --------------------------------------------------------------------------
CASES = [
    ((7,), 0),  # one short row
    ((5, 9), 1),  # short rows
    ((40, 16), 1),  # a batch of rows of 16 or more: a row per lane (backward: tiny or accurate)
    ((20, 32), 1),  # rows of two whole vectors (rows.short_form)
    ((5, 9), 0),  # a non-last axis: the column kernels
    ((300, 2100), 0),  # long columns: the backward's wide tiles, not the front door's width
    ((3, 4, 40), 1),  # outer and inner
    ((2, 5000), 1),  # long rows, two chunks
    ((1, 9), 0),  # a length-1 axis: every element is a row
    ((0, 5), 1),  # empty
    ((5, 0), 1),  # a zero-length axis
]


@pytest.mark.heavy
@pytest.mark.parametrize("dtype", _dtypes())
def test_ffi_bits_equal_front_door(dtype):
    with x64():
        for k, (shape, axis) in enumerate(CASES):
            xn = _rand(shape, dtype, seed=k)
            x = jnp.asarray(xn)
            for name in ("log_softmax", "softmax"):
                y = getattr(logsoftmax, name)(xn, axis)
                np.testing.assert_array_equal(_bits(getattr(lj, name)(x, axis)), _bits(y))
                dn = _rand(shape, dtype, seed=k + 50)
                fused = {"log_softmax": lj._log_softmax_backward,
                         "softmax": lj._softmax_backward}[name]
                got = fused(jnp.asarray(dn), jnp.asarray(y), axis - len(shape))
                want = getattr(logsoftmax, name + "_backward")(dn, y, axis)
                np.testing.assert_array_equal(_bits(got), _bits(want))
            for ax, keep in ((axis, False), (None, True), ((0, len(shape) - 1), False)):
                if ax == (0, 0):
                    continue
                got = lj.logsumexp(x, ax, keepdims=keep)
                want = logsoftmax.logsumexp(xn, ax, keepdims=keep)
                assert got.shape == np.shape(want) and got.dtype == dtype
                np.testing.assert_array_equal(_bits(got), _bits(want))


def test_bridge_compiles_no_literal_specializations():
    """The bridge's jitted dispatch passes the kernels typed constants, not
    bare ``0`` / ``1`` / ``True``: a literal argument makes numba compile a
    second specialization of the whole kernel (in a fresh clone the JAX
    tests compiled every row and column kernel twice). The dispatch
    functions are not cached, so calling them here types those calls anew."""
    from numba import types

    from logsoftmax.backends.cpu import columns as C
    from logsoftmax.backends.cpu import float64 as F64
    from logsoftmax.backends.cpu import rows as R
    from logsoftmax.jax import _ffi

    for shape, (outer, n, inner) in (((6, 9), (6, 9, 1)), ((6, 5000), (6, 5000, 1)), ((4, 6, 5), (4, 6, 5))):
        xb = _rand(shape, np.float32).reshape(-1)
        ob = np.empty_like(xb)
        _ffi._forward(xb, ob, outer, n, inner, 0, np.bool_(True))
        _ffi._backward(xb, xb, ob, outer, n, inner, 0, np.bool_(False))
        _ffi._logsumexp(xb, np.empty(outer * inner, np.float32), outer, n, inner, np.bool_(True))
        x64 = xb.astype(np.float64)
        _ffi._forward64(x64, np.empty_like(x64), outer, n, inner, 0, np.bool_(False))
        _ffi._logsumexp64(x64, np.empty(outer * inner), outer, n, inner, np.bool_(False))
    kernels = (R.forward_short, R.forward_range, R.backward_short, R.backward_range,
               R.logsumexp_range, R.row_stats, C.forward_tiles, C.backward_tiles,
               C.logsumexp_tiles, F64.fwd_rows_serial, F64.fwd_inner_serial,
               F64.lse_rows_serial, F64.lse_inner_serial)
    for k in kernels:
        for sig in k.signatures:
            assert not any(isinstance(t, types.Literal) for t in sig), (k.__name__, sig)


@pytest.mark.parametrize("dtype", _dtypes())
def test_handlers_link_every_kernel_they_call(monkeypatch, dtype):
    """A cached handler calls the kernels through symbols that
    ``_ffi.target`` links before it loads the handler (an unresolved one
    would crash the process): its list is exactly the symbols that the
    handler's code asks for when compiled (recorded in ``native.LINKED``
    while a fresh dispatcher types it)."""
    from numba import njit, types
    from numba.np.numpy_support import from_dtype

    from logsoftmax.backends.cpu import native
    from logsoftmax.backends.cpu.layout import storage_dtype
    from logsoftmax.jax import _ffi

    f64 = dtype == np.float64
    A = types.Array(from_dtype(storage_dtype(dtype)), 1, "C")
    i, b = types.int64, types.boolean
    helpers = {
        "fwd": (_ffi._forward64 if f64 else _ffi._forward, (A, A, i, i, i, i, b)),
        "bwd": (_ffi._backward64 if f64 else _ffi._backward, (A, A, A, i, i, i, i, b)),
        "lse": (_ffi._logsumexp64 if f64 else _ffi._logsumexp, (A, A, i, i, i, b)),
    }
    for kind, (helper, sig) in helpers.items():
        asked = set()
        monkeypatch.setattr(native, "LINKED", asked)
        njit(helper.py_func).compile(sig)
        listed = {native._symbol(getattr(m, k), t) for m, k, t in _ffi.links(kind, dtype)}
        assert asked == listed and len(listed) >= 2, (kind, asked ^ listed)


def test_logsumexp_non_adjacent_axes():
    xn = _rand((3, 4, 5, 6), np.float32)
    for axes in ((0, 2), (1, 3), (0, 1, 3)):
        got = lj.logsumexp(jnp.asarray(xn), axes, keepdims=True)
        want = logsoftmax.logsumexp(xn, axes, keepdims=True)
        np.testing.assert_array_equal(_bits(got), _bits(want))


# --------------------------------------------------------------------------
# values and gradients against jax.nn (float64)
# --------------------------------------------------------------------------
def _pairs():
    lse = jax.scipy.special.logsumexp
    return [
        ("log_softmax", lambda x: lj.log_softmax(x, 1), lambda x: jax.nn.log_softmax(x, 1)),
        ("softmax", lambda x: lj.softmax(x, 0), lambda x: jax.nn.softmax(x, 0)),
        ("logsumexp", lambda x: lj.logsumexp(x, 1), lambda x: lse(x, 1)),
    ]


def _loss(f):
    """A scalar with a non-trivial cotangent and second derivative."""
    return lambda x: jnp.sum(jnp.sin(f(x)) * jnp.cos(jnp.arange(f(x).size).reshape(f(x).shape)))


@pytest.mark.parametrize("name,ours,theirs", _pairs(), ids=[p[0] for p in _pairs()])
def test_values_and_first_and_second_order_grads(name, ours, theirs):
    with x64():
        x = jnp.asarray(_rand((4, 7)))
        np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-14, atol=1e-14)
        g1 = jax.grad(_loss(ours))(x)
        np.testing.assert_allclose(g1, jax.grad(_loss(theirs))(x), rtol=1e-13, atol=1e-14)
        # grad of grad (a Hessian-vector-like scalar), and under jit
        gg = lambda f: jax.grad(lambda t: jnp.sum(jnp.tanh(jax.grad(_loss(f))(t))))  # noqa: E731
        np.testing.assert_allclose(jax.jit(gg(ours))(x), gg(theirs)(x), rtol=1e-12, atol=1e-13)


def test_vmap_and_vmap_of_grad():
    with x64():
        xb = jnp.asarray(_rand((3, 4, 7)))
        for axis in (0, 1):
            got = jax.vmap(lambda t: lj.log_softmax(t, 0), in_axes=axis)(xb)
            want = jax.vmap(lambda t: jax.nn.log_softmax(t, 0), in_axes=axis)(xb)
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
        for ours, theirs in [(p[1], p[2]) for p in _pairs()[::2]]:
            got = jax.jit(jax.vmap(jax.grad(_loss(ours))))(xb)
            np.testing.assert_allclose(got, jax.vmap(jax.grad(_loss(theirs)))(xb),
                                       rtol=1e-13, atol=1e-14)
        # the backward with an unbatched output and batched cotangents
        y = lj.log_softmax(xb[0], 1)
        _, vjp = jax.vjp(lambda t: lj.log_softmax(t, 1), xb[0])
        got = jax.vmap(lambda c: vjp(c)[0])(xb)
        _, vjp_ref = jax.vjp(lambda t: jax.nn.log_softmax(t, 1), xb[0])
        np.testing.assert_allclose(got, jax.vmap(lambda c: vjp_ref(c)[0])(xb),
                                   rtol=1e-13, atol=1e-14)
        assert y.shape == (4, 7)


# --------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------
# bfloat16's handler is compiled by test_ffi_bits_equal_front_door, whose
# bits are the front door's (itself held to one rounding); compiled again
# here by the other pytest worker, it cost ~35 s of a cold run
@pytest.mark.parametrize("dtype", _dtypes(3, slow=("bf16", "f16")))
def test_low_precision_rounded_once(dtype):
    xn = _rand((16, 300), dtype)
    x = jnp.asarray(xn)
    x64_ = xn.astype(np.float64)
    m = x64_.max(1, keepdims=True)
    lse = m + np.log(np.exp(x64_ - m).sum(1, keepdims=True))
    eps = float(ml_dtypes.finfo(dtype).eps)
    for ours, ref in ((lj.log_softmax(x), x64_ - lse), (lj.softmax(x), np.exp(x64_ - lse)),
                      (lj.logsumexp(x, 1, keepdims=True), lse)):
        assert ours.dtype == dtype
        err = np.abs(np.asarray(ours).astype(np.float64) - ref) / (eps * np.maximum(1, np.abs(ref)))
        assert err.max() <= 1.0
    g = jax.grad(lambda t: jnp.sum(lj.log_softmax(t)[:, 0].astype(jnp.float32)))(x)
    assert g.dtype == dtype


def test_integer_input_promotes_to_float32():
    assert lj.softmax(jnp.arange(4)).dtype == jnp.float32
    assert lj.logsumexp(jnp.array([True, False])).dtype == jnp.float32


# --------------------------------------------------------------------------
# special values, 0-d, errors
# --------------------------------------------------------------------------
def test_special_values_match_jax():
    inf, nan = np.inf, np.nan
    x = jnp.array([[0.0, -inf, 1.0], [nan, 0.0, 1.0], [inf, 0.0, 1.0], [-inf, -inf, -inf]])
    # same NaN and inf positions, finite values within jax.nn's own rounding
    np.testing.assert_allclose(lj.log_softmax(x), jax.nn.log_softmax(x), rtol=1e-6)
    np.testing.assert_allclose(lj.softmax(x), jax.nn.softmax(x), rtol=1e-6)
    np.testing.assert_allclose(lj.logsumexp(x, 1), jax.scipy.special.logsumexp(x, 1),
                               rtol=1e-6)


def test_errors_at_trace_time():
    x = jnp.zeros((3, 4))
    with pytest.raises(IndexError, match="axis=2"):
        lj.log_softmax(x, 2)
    with pytest.raises(IndexError):
        jax.jit(lambda t: lj.softmax(t, -3))(x)
    with pytest.raises(IndexError):
        lj.log_softmax(jnp.float32(1.0))  # no axis in a 0-d array
    with pytest.raises(TypeError, match="axis"):
        lj.log_softmax(x, 1.0)
    with pytest.raises(TypeError, match="complex64"):
        lj.log_softmax(jnp.zeros(3, jnp.complex64))
    with pytest.raises(ValueError, match="repeats"):
        lj.logsumexp(x, (1, -1))
    assert float(lj.logsumexp(jnp.float32(2.0))) == 2.0


def test_import_is_lazy():
    import subprocess
    import sys

    code = ("import sys, logsoftmax.jax, numba.core.registry as r; "
            "print('torch' in sys.modules, bool(logsoftmax.jax._ffi._HANDLERS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]  # no torch, and no handler compiled on import


# --------------------------------------------------------------------------
# a training loop: the loss curve matches jax.nn's
# --------------------------------------------------------------------------
def _train(log_softmax, steps=20):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 12)))
    y = jnp.asarray((np.argmax(np.asarray(x)[:, :6], 1) + 1) % 6)
    params = [jnp.asarray(rng.standard_normal((12, 32)) * 0.3), jnp.zeros(32),
              jnp.asarray(rng.standard_normal((32, 6)) * 0.3), jnp.zeros(6)]

    def loss(p):
        h = jax.nn.relu(x @ p[0] + p[1])
        logp = log_softmax(h @ p[2] + p[3], axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1))

    step = jax.jit(jax.value_and_grad(loss))
    losses = []
    for _ in range(steps):
        value, grads = step(params)
        params = [p - 0.5 * g for p, g in zip(params, grads)]
        losses.append(float(value))
    return np.array(losses)


def test_training_loss_curve_matches_jax():
    with x64():
        ours, theirs = _train(lj.log_softmax), _train(jax.nn.log_softmax)
    assert ours[-1] < 0.6 * ours[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
