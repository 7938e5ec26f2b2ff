"""Autograd on dask data: a ``Tensor`` whose ``.data`` is a dask array goes
through log_softmax / nll_loss / cross_entropy and backward lazily (the node
saves the lazy forward output), and matches the same graph on numpy data."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_close_eps

da = pytest.importorskip("dask.array")
F = pytest.importorskip("logsoftmax.nn.functional")

import logsoftmax  # noqa: E402
from logsoftmax.autograd import LogSoftmaxBackward  # noqa: E402


def _numpy(a) -> np.ndarray:
    return np.asarray(a.compute() if isinstance(a, da.Array) else a)


@pytest.mark.parametrize("chunks", [(4, 30), (3, 7)], ids=["whole", "split"])
def test_log_softmax_nll_loss_backward(chunks, rng):
    x = (rng.standard_normal((8, 30)) * 3).astype(np.float32)
    target = rng.integers(0, 30, 8)
    results = {}
    for kind, data in (("numpy", x), ("dask", da.from_array(x, chunks=chunks))):
        t = logsoftmax.tensor(data, requires_grad=True)
        y = F.log_softmax(t, axis=1)
        assert isinstance(y.grad_fn, LogSoftmaxBackward)
        assert y.grad_fn.axis == 1
        if kind == "dask":
            assert isinstance(y.data, da.Array)
            saved = y.grad_fn.saved_output
            assert isinstance(getattr(saved, "data", saved), da.Array)  # lazy y
        loss = F.nll_loss(y, target)
        loss.backward()
        results[kind] = (_numpy(y.data), _numpy(loss.data), _numpy(t.grad.data))
    for got, want in zip(results["dask"], results["numpy"]):
        assert_close_eps(got, want, np.float32, 4.0)


@pytest.mark.parametrize("chunks", [(8, 30), (2, 11)], ids=["whole", "split"])
def test_cross_entropy_backward(chunks, rng):
    x = (rng.standard_normal((8, 30)) * 3).astype(np.float32)
    target = rng.integers(0, 30, 8)
    grads, losses = {}, {}
    for kind, data in (("numpy", x), ("dask", da.from_array(x, chunks=chunks))):
        t = logsoftmax.tensor(data, requires_grad=True)
        loss = F.cross_entropy(t, target)
        loss.backward()
        losses[kind], grads[kind] = _numpy(loss.data), _numpy(t.grad.data)
    assert_close_eps(losses["dask"], losses["numpy"], np.float32, 4.0)
    assert_close_eps(grads["dask"], grads["numpy"], np.float32, 8.0)


def test_node_apply_on_dask_gradient(rng):
    x = rng.standard_normal((4, 20)).astype(np.float32)
    y = LogSoftmaxBackward.forward(
        logsoftmax.tensor(da.from_array(x, chunks=(2, 5)), requires_grad=True), -1
    )
    g = rng.standard_normal((4, 20)).astype(np.float32)
    (gx,) = y.grad_fn.apply(da.from_array(g, chunks=(2, 5)))
    assert isinstance(gx, da.Array)
    ref = logsoftmax.log_softmax_backward(g, logsoftmax.log_softmax(x))
    assert_close_eps(gx.compute(), ref, np.float32, 8.0)


@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_sub_matches_numpy(axis, rng):
    from logsoftmax.backends.dask import scatter_sub

    a = rng.standard_normal((6, 9)).astype(np.float32)
    n_other = a.shape[1 - axis]
    target = rng.integers(0, a.shape[axis], n_other)
    values = rng.standard_normal(n_other).astype(np.float64)
    want = a.copy()
    idx = np.expand_dims(target, axis)
    np.put_along_axis(
        want, idx, np.take_along_axis(a, idx, axis) - np.expand_dims(values, axis)
        .astype(np.float32), axis
    )
    got = scatter_sub(da.from_array(a, chunks=(4, 4)), values, target, axis)
    assert isinstance(got, da.Array) and got.dtype == np.float32
    np.testing.assert_array_equal(got.compute(), want)
