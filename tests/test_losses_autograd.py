"""The loss family's autograd face: ``nn.functional.cross_entropy`` with
label smoothing and probability targets (values, gradients and Hessian-vector
products against PyTorch in float64) and ``nn.functional.linear_cross_entropy``
(gradients for input, weight and bias; first order only)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import logsoftmax
from logsoftmax.nn import functional as nf

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _case(rng, shape, probs):
    x = rng.standard_normal(shape)
    c = shape[1] if len(shape) > 1 else shape[0]
    if probs:
        y = rng.random(shape)
        return x, y / y.sum(axis=1 if len(shape) > 1 else 0, keepdims=True), c
    y = rng.integers(0, c, (shape[0],) + shape[2:] if len(shape) > 1 else ())
    if y.ndim:
        y.flat[0] = -100
    return x, np.asarray(y), c


@pytest.mark.parametrize("shape", [(7, 5), (5,), (3, 4, 2)], ids=str)
@pytest.mark.parametrize("probs", [False, True], ids=["indices", "probs"])
@pytest.mark.parametrize("eps", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_cross_entropy_grad_and_hvp_match_torch(shape, probs, eps, weighted, rng):
    x, y, c = _case(rng, shape, probs)
    w = rng.random(c) + 0.1 if weighted else None
    tw = None if w is None else torch.tensor(w)
    for red in ("mean", "sum", "none"):
        xt = logsoftmax.tensor(x, requires_grad=True)
        loss = nf.cross_entropy(xt, y, weight=w, reduction=red, label_smoothing=eps)
        g = rng.standard_normal(loss.shape) if loss.shape else None
        loss.backward(g)
        tx = torch.tensor(x, requires_grad=True)
        ref = F.cross_entropy(tx, torch.tensor(y), tw, reduction=red,
                              label_smoothing=eps)
        ref.backward(None if g is None else torch.tensor(g))
        np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-12,
                                   atol=1e-12)
    # Hessian-vector product through the fused backward (double backward)
    v = rng.standard_normal(shape)
    xt = logsoftmax.tensor(x, requires_grad=True)
    nf.cross_entropy(xt, y, weight=w, label_smoothing=eps).backward(create_graph=True)
    gx, xt.grad = xt.grad, None
    (gx * logsoftmax.tensor(v)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(F.cross_entropy(tx, torch.tensor(y), tw,
                                                label_smoothing=eps), tx,
                                create_graph=True)
    (th,) = torch.autograd.grad((tg * torch.tensor(v)).sum(), tx)
    np.testing.assert_allclose(xt.grad.numpy(), th.numpy(), rtol=1e-10, atol=1e-12)


def test_cross_entropy_label_smoothing_checked():
    with pytest.raises(ValueError, match="label_smoothing=-0.1"):
        nf.cross_entropy(np.zeros((2, 3)), np.array([0, 1]), label_smoothing=-0.1)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_linear_cross_entropy_autograd(reduction, rng):
    n, h, v = 20, 6, 31
    x, w, b = (rng.standard_normal(s) for s in ((n, h), (v, h), (v,)))
    t = rng.integers(0, v, n)
    t[0] = -100
    kw = dict(reduction=reduction, label_smoothing=0.1, z_loss=1e-2, softcap=3.0)
    xs = [logsoftmax.tensor(a, requires_grad=True) for a in (x, w, b)]
    loss = nf.linear_cross_entropy(xs[0], xs[1], t, linear_bias=xs[2], **kw)
    g = np.linspace(0.2, 1, n) if reduction == "none" else None
    loss.backward(g)
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    z = 3 * torch.tanh((ts[0] @ ts[1].T + ts[2]) / 3)
    tt = torch.tensor(t)
    valid = tt != -100
    lse = torch.logsumexp(z, 1)
    zz = torch.where(valid, 1e-2 * lse**2, 0.0)
    ref = F.cross_entropy(z, tt, reduction=reduction, label_smoothing=0.1) + {
        "none": zz, "sum": zz.sum(), "mean": zz.sum() / valid.sum()}[reduction]
    ref.backward(None if g is None else torch.tensor(g))
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-12)
    for a, r in zip(xs, ts):
        np.testing.assert_allclose(a.grad.numpy(), r.grad.numpy(), rtol=1e-10,
                                   atol=1e-12)


def test_linear_cross_entropy_no_double_backward(rng):
    xs = [logsoftmax.tensor(rng.standard_normal(s), requires_grad=True)
          for s in ((4, 3), (5, 3))]
    loss = nf.linear_cross_entropy(xs[0], xs[1], np.array([0, 1, 2, 3]))
    with pytest.raises(NotImplementedError, match="double backward"):
        loss.backward(create_graph=True)


def test_linear_cross_entropy_autograd_on_dask(rng):
    da = pytest.importorskip("dask.array")
    n, h, v = 21, 4, 9
    x, w = rng.standard_normal((n, h)), rng.standard_normal((v, h))
    t = rng.integers(0, v, n)
    xd = logsoftmax.tensor(da.from_array(x, chunks=(7, h)), requires_grad=True)
    wt = logsoftmax.tensor(w, requires_grad=True)
    loss = nf.linear_cross_entropy(xd, wt, da.from_array(t, chunks=7))
    loss.backward()
    xs = [logsoftmax.tensor(a, requires_grad=True) for a in (x, w)]
    ref = nf.linear_cross_entropy(xs[0], xs[1], t)
    ref.backward()
    np.testing.assert_allclose(np.asarray(loss.data.compute()), ref.numpy(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(wt.grad.data.compute()), xs[1].grad.numpy(),
                               rtol=1e-12, atol=1e-14)
