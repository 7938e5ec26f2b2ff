"""API.md section 3: autocast (thread-local, nestable) and the per-policy
dtype rules, applied in one place by the dispatcher."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import logsoftmax as ls
from logsoftmax import amp
from logsoftmax.nn import functional as F

BF16, F16, F32, F64 = ls.bfloat16, ls.float16, ls.float32, ls.float64


def _t(shape, dtype, seed=0, requires_grad=True):
    data = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return ls.tensor(data, requires_grad=requires_grad)


TARGET = np.array([0, 3, 1])
FORCE_FP32 = {
    "softmax": lambda x: F.softmax(x, 1),
    "log_softmax": lambda x: F.log_softmax(x, 1),
    "nll_loss": lambda x: F.nll_loss(x, TARGET),
    "cross_entropy": lambda x: F.cross_entropy(x, TARGET),
    "sum": lambda x: x.sum(),
    "mean": lambda x: x.mean(axis=1),
}


def test_autocast_state_nests_and_restores():
    assert not amp.is_autocast_enabled() and amp.get_autocast_dtype() is None
    with amp.autocast(BF16) as outer:
        assert amp.get_autocast_dtype() == BF16 and outer.dtype == BF16
        with amp.autocast(F16):
            assert amp.get_autocast_dtype() == F16
            with amp.autocast(enabled=False):
                assert not amp.is_autocast_enabled()
            assert amp.get_autocast_dtype() == F16
        assert amp.get_autocast_dtype() == BF16
    assert amp.get_autocast_dtype() is None
    ac = amp.autocast()
    with ac:
        with ac:  # one instance re-entered
            assert amp.get_autocast_dtype() == BF16
        assert amp.get_autocast_dtype() == BF16
    assert not amp.is_autocast_enabled()


def test_autocast_is_thread_local_and_a_decorator():
    seen = {}
    with amp.autocast(BF16):
        th = threading.Thread(target=lambda: seen.update(d=amp.get_autocast_dtype()))
        th.start()
        th.join()
    assert seen["d"] is None

    @amp.autocast(F16)
    def f():
        return amp.get_autocast_dtype()

    assert f() == F16 and amp.get_autocast_dtype() is None


def test_autocast_rejects_bad_arguments():
    with pytest.raises(TypeError, match="dtype=.*bfloat16 or logsoftmax.float16"):
        amp.autocast(F32)
    with pytest.raises(TypeError, match="dtype"):
        amp.autocast("int8")
    with pytest.raises(TypeError, match="enabled"):
        amp.autocast(BF16, enabled="yes")


@pytest.mark.parametrize("amp_dtype", [BF16, F16])
@pytest.mark.parametrize("in_dtype", [BF16, F16, F32])
@pytest.mark.parametrize("op", sorted(FORCE_FP32))
def test_force_fp32_ops_return_float32(op, in_dtype, amp_dtype):
    x = _t((3, 5), in_dtype)
    with amp.autocast(amp_dtype):
        y = FORCE_FP32[op](x)
    assert y.dtype == F32
    # computed from the float32 cast of the input
    want = FORCE_FP32[op](ls.tensor(x.data.astype(F32)))
    np.testing.assert_array_equal(y.numpy(), want.numpy())
    y.backward(np.ones(y.shape, F32))
    assert x.grad.dtype == in_dtype  # gradients arrive in the leaf's own dtype


@pytest.mark.parametrize("op", sorted(FORCE_FP32))
def test_force_fp32_never_downcasts_float64(op):
    x = _t((3, 5), F64)
    with amp.autocast(BF16):
        y = FORCE_FP32[op](x)
    assert y.dtype == F64


@pytest.mark.parametrize("amp_dtype", [BF16, F16])
def test_promote_ops_cast_to_autocast_dtype(amp_dtype):
    x, w, b = _t((4, 3), F32), _t((5, 3), F32, 1), _t((5,), F32, 2)
    with amp.autocast(amp_dtype):
        y = F.linear(x, w, b)
        z = x @ w.T
    assert y.dtype == amp_dtype and z.dtype == amp_dtype
    xr, wr = (a.data.astype(amp_dtype).astype(F32) for a in (x, w))
    want = (xr @ wr.T).astype(amp_dtype)
    np.testing.assert_array_equal(z.numpy(), want)
    (y.sum() + z.sum()).backward()
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == F32
    # float64 operands are left alone, as in PyTorch
    with amp.autocast(amp_dtype):
        assert (_t((2, 3), F64) @ _t((3, 2), F64)).dtype == F64


@pytest.mark.parametrize("dtype", [BF16, F16, F32, F64])
def test_keep_input_ops_ignore_autocast(dtype):
    x, y = _t((2, 3), dtype), _t((2, 3), dtype, 1)
    with amp.autocast(BF16 if dtype != BF16 else F16):
        outs = [x + y, x - y, x * y, -x, F.relu(x), x.reshape(3, 2), x * 2.0]
    assert all(o.dtype == dtype for o in outs)


def test_outside_autocast_dtypes_are_kept():
    x = _t((3, 5), BF16)
    assert F.log_softmax(x, 1).dtype == BF16
    assert F.cross_entropy(x, TARGET).dtype == BF16
    assert (x @ _t((5, 2), BF16)).dtype == BF16
    assert (x + _t((3, 5), F16)).dtype == F32  # no common 16-bit type: float32


def test_mixed_precision_mlp_gradients_match_float32_closely():
    """An MLP under bf16 autocast: f32 loss, f32 leaf grads near the f32 run."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype(F32)
    t = rng.integers(0, 4, 16)
    shapes = [(12, 8), (12,), (4, 12)]
    params = [rng.standard_normal(s).astype(F32) * 0.3 for s in shapes]

    def run(amp_dtype):
        ps = [ls.tensor(p, requires_grad=True) for p in params]
        with amp.autocast(amp_dtype or BF16, enabled=amp_dtype is not None):
            hidden = F.relu(F.linear(x, ps[0], ps[1]))
            loss = F.cross_entropy(F.linear(hidden, ps[2]), t)
        loss.backward()
        return loss, ps

    l32, p32 = run(None)
    l16, p16 = run(BF16)
    assert l16.dtype == F32 and all(p.grad.dtype == F32 for p in p16)
    assert abs(l16.item() - l32.item()) < 0.02 * abs(l32.item())
    for a, b in zip(p16, p32):
        scale = np.abs(b.grad.numpy()).max()
        assert np.abs(a.grad.numpy() - b.grad.numpy()).max() < 0.05 * scale


def test_backward_runs_with_autocast_off():
    x = _t((3, 5), F32)
    with amp.autocast(BF16):
        y = F.linear(x, _t((4, 5), F32, 1))
        loss = F.cross_entropy(y, TARGET)
        loss.backward()  # inside autocast: grads still exact-dtype, no bf16 recast
    assert x.grad.dtype == F32


def test_casts_are_recorded_nodes():
    x = _t((2, 3), BF16)
    with amp.autocast(BF16):
        y = F.log_softmax(x, 1)
    cast = y.grad_fn.next_functions[0]
    assert cast.name() == "CastBackward" and cast.next_functions == (x,)
