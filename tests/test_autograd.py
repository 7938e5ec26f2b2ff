"""API.md section 4 (and the schema half of section 3): LogSoftmaxBackward,
the op registry, Tensor semantics, the engine's rules, and error messages."""

from __future__ import annotations

import dataclasses
import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import logsoftmax as ls
from logsoftmax import autograd as ag
from logsoftmax.autograd import LogSoftmaxBackward
from logsoftmax.nn import functional as F
from logsoftmax.schema import AmpPolicy, OpSchema, register


def _x(shape=(4, 5), dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ===========================================================================
# schema and registry
# ===========================================================================
def test_schema_v1_is_the_documented_one():
    want = OpSchema(name="log_softmax", version=1, amp_policy=AmpPolicy.FORCE_FP32,
                    deterministic=True, input_arity=1, output_arity=1)
    assert LogSoftmaxBackward.schema_v1 == want
    assert ls.registry()["log_softmax"] == want
    assert ls.OpSchema is OpSchema and ls.AmpPolicy is AmpPolicy


def test_schema_is_frozen_and_validated():
    s = LogSoftmaxBackward.schema_v1
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.version = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="amp_policy"):
        OpSchema("x", 1, "promote")
    with pytest.raises(ValueError, match="input_arity"):
        OpSchema("x", 1, AmpPolicy.PROMOTE, True, -1, 1)


def test_registry_lists_every_op_with_the_documented_policies():
    reg = ls.registry()
    policies = {
        AmpPolicy.FORCE_FP32: ["softmax", "log_softmax", "nll_loss", "cross_entropy",
                               "sum", "mean"],
        AmpPolicy.PROMOTE: ["matmul", "linear"],
        AmpPolicy.KEEP_INPUT: ["add", "sub", "mul", "neg", "relu", "reshape"],
    }
    for policy, names in policies.items():
        for name in names:
            assert reg[name].amp_policy is policy, name
            assert reg[name].deterministic and reg[name].output_arity == 1
    assert reg["nll_loss"].input_arity == 2 and reg["linear"].input_arity == 3
    for name in ("log_softmax_backward", "softmax_backward", "nll_loss_backward",
                 "cross_entropy_backward"):
        assert name in reg  # the backward ops are ops too (double backward)
    with pytest.raises(TypeError):
        reg["new"] = reg["add"]  # read-only view


def test_register_refuses_a_conflicting_schema():
    with pytest.raises(ValueError, match="already registered"):
        register(OpSchema("log_softmax", 2, AmpPolicy.KEEP_INPUT))(type("X", (), {}))
    # an equal schema is a no-op (module reload)
    cls = register(LogSoftmaxBackward.schema_v1)(type("Y", (), {}))
    assert cls.schema_v1 is LogSoftmaxBackward.schema_v1


# ===========================================================================
# LogSoftmaxBackward
# ===========================================================================
@pytest.mark.parametrize("dtype", [ls.float32, ls.bfloat16, ls.float16, ls.float64])
@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_forward_saves_output_axis_and_wires_graph(dtype, axis):
    a = ls.tensor(_x((3, 4), dtype), requires_grad=True)
    y = LogSoftmaxBackward.forward(a, axis)
    node = y.grad_fn
    assert isinstance(node, LogSoftmaxBackward) and node.axis == axis % 2
    assert y.shape == a.shape and y.dtype == dtype
    assert node.saved_output is y.data
    np.testing.assert_array_equal(
        y.numpy(), ls.log_softmax(a.data, axis)
    )  # dispatched to the front door: bit-identical
    assert node.next_functions == (a,) and not y.is_leaf


def test_forward_validates_axis():
    a = ls.tensor(_x((3, 4)), requires_grad=True)
    with pytest.raises(IndexError, match="axis=2"):
        LogSoftmaxBackward.forward(a, 2)
    with pytest.raises(IndexError, match="axis=-3"):
        LogSoftmaxBackward.forward(a, -3)
    with pytest.raises(IndexError):
        LogSoftmaxBackward.forward(ls.tensor(np.float32(1.0)), 0)
    with pytest.raises(TypeError, match="integer"):
        LogSoftmaxBackward.forward(a, 1.0)
    assert LogSoftmaxBackward.forward(a, np.int64(-1)).grad_fn.axis == 1


def test_apply_is_the_fused_backward():
    a = ls.tensor(_x((3, 6)), requires_grad=True)
    y = F.log_softmax(a, axis=1)
    g = _x((3, 6), seed=1)
    want = ls.log_softmax_backward(g, y.data, 1)
    for grad_out in (g, ls.tensor(g)):
        out = y.grad_fn.apply(grad_out)
        assert isinstance(out, list) and len(out) == 1
        np.testing.assert_array_equal(out[0], want)
    y.sum().backward()  # apply() released nothing
    assert a.grad is not None


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_forward_and_apply_dispatch_to_the_selected_backend(backend):
    x = _x((5, 9))
    g = _x((5, 9), seed=2)
    with ls.use_backend(backend):
        y = F.log_softmax(ls.tensor(x, requires_grad=True), 1)
        (gx,) = y.grad_fn.apply(g)
        want_y = ls.log_softmax(x, 1)
        want_gx = ls.log_softmax_backward(g, want_y, 1)
    np.testing.assert_array_equal(y.numpy(), want_y)
    np.testing.assert_array_equal(gx, want_gx)


def test_node_holds_exactly_one_saved_array_and_never_the_input():
    x = ls.tensor(_x((64, 100)), requires_grad=True)
    h = x * 2.0  # a non-leaf input: nothing but the graph could keep it alive
    alive = weakref.ref(h.data)
    y = F.log_softmax(h, 1)
    node = y.grad_fn
    held = [v for v in vars(node).values() if isinstance(v, np.ndarray)]
    assert len(held) == 1 and held[0] is y.data and held[0].size == y.size
    assert node.saved_arrays() == [y.data]
    del h
    gc.collect()
    assert alive() is None  # the input array was freed while y is alive
    y.sum().backward()
    assert node.saved_output is None and node.saved_arrays() == []  # released


def test_cross_entropy_node_saves_only_log_softmax_output():
    x = ls.tensor(_x((8, 10)), requires_grad=True)
    loss = F.cross_entropy(x, np.arange(8))
    node = loss.grad_fn
    held = [v for v in vars(node).values() if isinstance(v, np.ndarray)]
    assert len(held) == 1 and held[0].shape == (8, 10)
    np.testing.assert_array_equal(held[0], ls.log_softmax(x.data, 1))


def test_cross_entropy_backward_is_softmax_minus_one_hot():
    x_np = _x((5, 7))
    t = np.array([0, 6, 3, 3, 1])
    x = ls.tensor(x_np, requires_grad=True)
    F.cross_entropy(x, t, reduction="sum").backward()
    p = ls.softmax(x_np, 1)
    p[np.arange(5), t] -= 1
    np.testing.assert_allclose(x.grad.numpy(), p, rtol=1e-6, atol=1e-7)


# ===========================================================================
# Tensor
# ===========================================================================
def test_tensor_attributes():
    data = _x((2, 3))
    t = ls.tensor(data, requires_grad=True)
    assert isinstance(t, ls.Tensor) and t.data is data
    assert np.asarray(t) is t.data and t.numpy() is t.data
    assert t.dtype == np.float32 and isinstance(t.dtype, np.dtype)
    assert t.shape == (2, 3) and t.requires_grad
    assert t.grad is None and t.grad_fn is None
    assert ls.tensor([1.0, 2.0]).dtype == np.float32  # Python floats: float32 (torch)
    assert ls.tensor(np.array([1.0])).dtype == np.float64  # numpy keeps its dtype
    assert ls.tensor([1, 2]).dtype.kind == "i"
    assert ls.tensor(data, dtype=ls.bfloat16).dtype == np.dtype(ls.bfloat16)
    assert "requires_grad=True" in repr(t)


def test_sum_mean_reshape_methods():
    data = _x((2, 3, 4), np.float64)
    t = ls.tensor(data)
    np.testing.assert_allclose(t.sum().numpy(), data.sum())
    np.testing.assert_allclose(t.sum(axis=1, keepdims=True).numpy(),
                               data.sum(1, keepdims=True))
    np.testing.assert_allclose(t.mean(axis=(0, 2)).numpy(), data.mean((0, 2)))
    assert t.reshape(6, -1).shape == (6, 4) and t.reshape((24,)).shape == (24,)
    with pytest.raises(ValueError, match="reshape"):
        t.reshape(5, 5)
    with pytest.raises(IndexError):
        t.sum(axis=3)


def test_leaf_rules():
    x = ls.tensor(_x((2, 2)), requires_grad=True)
    y = x * x
    assert x.is_leaf and not y.is_leaf and y.requires_grad
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match="floating"):
        ls.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating"):
        ls.tensor(np.array([True])).requires_grad_()
    c = ls.tensor(_x((2, 2)))
    assert not (c * c).requires_grad and (c * c).grad_fn is None
    y.sum().backward()
    with pytest.warns(UserWarning, match="non-leaf"):
        assert y.grad is None


def test_retain_grad():
    x = ls.tensor(_x((3,), np.float64), requires_grad=True)
    y = x * 3.0
    y.retain_grad()
    (y * y).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(y.grad.numpy(), 2 * y.data)
    np.testing.assert_allclose(x.grad.numpy(), 18 * x.data)


def test_no_grad_and_thread_locality():
    x = ls.tensor(_x((2,)), requires_grad=True)
    seen = {}

    def other():
        seen["other"] = (x * 2.0).requires_grad

    with ls.no_grad():
        assert (x * 2.0).grad_fn is None and not ag.is_grad_enabled()
        th = threading.Thread(target=other)
        th.start()
        th.join()
        with ag.enable_grad():
            assert (x * 2.0).requires_grad
    assert seen["other"] is True  # no_grad in this thread only
    assert (x * 2.0).requires_grad

    @ls.no_grad()
    def f():
        return x * 2.0

    assert f().grad_fn is None


def test_grad_accumulates_until_reset():
    x = ls.tensor(_x((3,), np.float64), requires_grad=True)
    for k in (1, 2, 3):
        (x * 2.0).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0 * k))
        assert isinstance(x.grad, ls.Tensor) and x.grad.dtype == x.dtype
    first = x.grad
    x.grad = None
    (x * 5.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 5.0))
    np.testing.assert_allclose(first.numpy(), np.full(3, 6.0))  # never mutated
    with pytest.raises(ValueError, match="shape"):
        x.grad = np.zeros(4)


def test_fan_out_and_shared_leaf():
    x = ls.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * x + x * 3.0 - x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.data + 2)


def test_grad_never_aliases_memory_someone_else_holds():
    """The engine adopts a freshly computed gradient as ``.grad`` without a
    copy, but copies a caller's array, a view, or an array a second leaf
    already took."""
    g_user = _x((2, 3), np.float64, seed=1)
    x = ls.tensor(_x((2, 3), np.float64), requires_grad=True)
    x.backward(g_user)  # the leaf is the root: .grad must not be g_user
    assert not np.shares_memory(x.grad.data, g_user)
    x.grad = None
    y = x.reshape(6)
    y.backward(ls.tensor(g_user.reshape(6)))  # a view of the caller's array
    assert not np.shares_memory(x.grad.data, g_user)
    a = ls.tensor(_x((3,), np.float64), requires_grad=True)
    b = ls.tensor(_x((3,), np.float64, seed=2), requires_grad=True)
    (a + b).backward(g_user[0])  # one gradient array for both leaves
    assert not np.shares_memory(a.grad.data, b.grad.data)
    assert not np.shares_memory(a.grad.data, g_user) and not np.shares_memory(
        b.grad.data, g_user
    )
    w = ls.tensor(_x((4, 3), np.float64), requires_grad=True)
    F.linear(ls.tensor(_x((5, 3), np.float64)), w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.ones((5, 4)).T @ _x((5, 3), np.float64))


def test_sgd_updates_in_place_like_pytorch():
    """v = m v + g (v = a copy of g first), p -= lr v; the momentum buffer is
    the optimizer's own (changing .grad afterwards does not touch it)."""
    p = ls.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    opt = ls.nn.SGD([p], lr=0.5, momentum=0.9, weight_decay=0.1)
    v, ref = np.zeros(3), p.data.copy()
    for k in range(3):
        (p * p).sum().backward()
        g = 2 * ref + 0.1 * ref
        v = g if k == 0 else 0.9 * v + g
        ref = ref - 0.5 * v
        opt.step()
        p.grad.data[...] = 1e9  # mutating the gradient must not reach the buffer
        opt.zero_grad()
        np.testing.assert_allclose(p.data, ref, rtol=1e-15)
    q = ls.tensor(np.ones(4, ls.bfloat16), requires_grad=True)
    opt = ls.nn.SGD([q], lr=0.25, momentum=0.5)
    (q * q).sum().backward()
    opt.step()
    assert q.dtype == ls.bfloat16
    np.testing.assert_array_equal(q.data.astype(np.float32), np.full(4, 0.5))


def test_second_backward_needs_retain_graph():
    x = ls.tensor(_x((2, 3)), requires_grad=True)
    loss = F.log_softmax(x, 1).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        loss.backward()
    x2 = ls.tensor(_x((2, 3), np.float64), requires_grad=True)
    loss2 = F.cross_entropy(x2, np.array([0, 2]))
    loss2.backward(retain_graph=True)
    loss2.backward()  # allowed once more: the graph was retained, and accumulates
    np.testing.assert_allclose(x2.grad.numpy(), 2 * _grad_of(x2.data), rtol=1e-12)
    # create_graph implies retain_graph
    x3 = ls.tensor(_x((2, 3)), requires_grad=True)
    l3 = (F.softmax(x3, 1) * F.softmax(x3, 1)).sum()
    l3.backward(create_graph=True)
    l3.backward()


def _grad_of(x_np):
    x = ls.tensor(x_np, requires_grad=True)
    F.cross_entropy(x, np.array([0, 2])).backward()
    return x.grad.numpy()


def test_backward_grad_argument():
    x = ls.tensor(_x((2, 3)), requires_grad=True)
    y = F.log_softmax(x, 1)
    with pytest.raises(RuntimeError, match=r"grad can be omitted.*\(2, 3\)"):
        y.backward()
    with pytest.raises(ValueError, match=r"grad has shape \(3,\)"):
        y.backward(np.ones(3, np.float32))
    g = _x((2, 3), seed=5)
    y.backward(g, retain_graph=True)
    a = x.grad.numpy().copy()
    x.grad = None
    y.backward(ls.tensor(g))
    np.testing.assert_array_equal(x.grad.numpy(), a)
    np.testing.assert_array_equal(a, ls.log_softmax_backward(g, y.data, 1))
    with pytest.raises(RuntimeError, match="does not require grad"):
        ls.tensor(_x((1,))).backward()


def test_deep_graph_has_no_recursion_limit():
    x = ls.tensor(np.ones(2), requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0 + 0.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(2))


@pytest.mark.filterwarnings("ignore:Using backward.. with create_graph")
def test_double_backward_with_tensor_backward_api():
    # API.md: backward(create_graph=True) then differentiate x.grad again.
    x = ls.tensor(np.array([[0.3, -1.2, 2.0]]), requires_grad=True)
    v = np.array([[1.0, 0.0, -1.0]])
    (F.log_softmax(x, 1) * v).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad
    x.grad = None
    (g * g).sum().backward()
    torch = pytest.importorskip("torch")
    xt = torch.tensor(x.data, requires_grad=True)
    (torch.log_softmax(xt, 1) * torch.tensor(v)).sum().backward(create_graph=True)
    gt = xt.grad
    xt.grad = None
    (gt * gt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


# ===========================================================================
# errors that name the argument
# ===========================================================================
def test_loss_target_errors():
    lp = ls.tensor(_x((4, 3)), requires_grad=True)
    with pytest.raises(TypeError, match="target has dtype float32.*integer"):
        F.nll_loss(lp, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"target has shape \(3,\), expected \(4,\)"):
        F.cross_entropy(lp, np.zeros(3, np.int64))
    with pytest.raises(IndexError, match="class index 3.*3 classes"):
        F.nll_loss(lp, np.array([0, 1, 2, 3]))
    with pytest.raises(IndexError, match="class index -1"):
        F.cross_entropy(lp, np.array([0, 1, 2, -1]))
    with pytest.raises(ValueError, match="reduction='avg'"):
        F.nll_loss(lp, np.zeros(4, np.int64), reduction="avg")
    with pytest.raises(ValueError, match=r"weight has shape \(4,\)"):
        F.cross_entropy(lp, np.zeros(4, np.int64), weight=np.ones(4))
    with pytest.raises(TypeError, match="ignore_index"):
        F.nll_loss(lp, np.zeros(4, np.int64), ignore_index=1.5)
    # ignored targets may be out of range; Tensor targets work
    F.nll_loss(lp, ls.tensor(np.array([0, -100, 2, -100])))


@pytest.mark.parametrize("fn", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize(
    "x_dt, w_dt",
    [
        (np.float32, np.float16),
        (np.float32, np.float64),
        (np.float64, np.float32),
        (ls.bfloat16, np.float32),
        (np.float32, np.int64),
    ],
)
def test_loss_weight_of_another_dtype_raises(fn, x_dt, w_dt):
    # PyTorch raises rather than cast the class weights silently (issue 13).
    x = ls.tensor(_x((4, 3), x_dt), requires_grad=True)
    w = np.array([1, 2, 3], w_dt)
    want = f"{fn}: weight has dtype {np.dtype(w_dt)}, expected {np.dtype(x_dt)}"
    with pytest.raises(TypeError, match=want):
        getattr(F, fn)(x, np.array([0, 1, 2, 1]), weight=w)
    with pytest.raises(TypeError, match="weight has dtype"):
        getattr(F, fn)(x, np.array([0, 1, 2, 1]), weight=ls.tensor(w))


@pytest.mark.parametrize("fn", ["nll_loss", "cross_entropy"])
def test_loss_weight_under_autocast_is_cast_like_the_input(fn):
    # PyTorch's autocast casts every float32/bf16/f16 argument of an fp32 op.
    x = _x((4, 3), ls.bfloat16)
    t = np.array([0, 1, 2, 1])
    w = np.array([0.5, 2.0, 3.0])
    want = getattr(F, fn)(x.astype(np.float32), t, weight=w.astype(np.float32))
    for w_dt in (np.float32, ls.bfloat16, np.float16):
        with ls.amp.autocast(ls.bfloat16):
            got = getattr(F, fn)(x, t, weight=w.astype(w_dt))
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with ls.amp.autocast(ls.bfloat16):  # float64 is never cast, so it mismatches
        with pytest.raises(TypeError, match="dtype float64, expected float32"):
            getattr(F, fn)(x, t, weight=w)


def test_ignore_index_and_weighted_mean_follow_pytorch():
    lp = np.log(np.array([[0.2, 0.8], [0.5, 0.5], [0.9, 0.1]]))
    t = np.array([1, -100, 0])
    w = np.array([2.0, 3.0])
    loss = F.nll_loss(lp, t, weight=w)
    want = -(3.0 * lp[0, 1] + 2.0 * lp[2, 0]) / (3.0 + 2.0)
    np.testing.assert_allclose(loss.item(), want, rtol=1e-12)
    none = F.nll_loss(lp, t, reduction="none")
    np.testing.assert_allclose(none.numpy(), [-lp[0, 1], 0.0, -lp[2, 0]])
    assert np.isnan(F.nll_loss(lp, np.full(3, -100)).item())  # 0/0 as in torch


def test_matmul_and_linear_shape_errors():
    a = ls.tensor(_x((2, 3)))
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\).*3 != .*4"):
        a @ _x((4, 5))
    with pytest.raises(ValueError, match="0-d"):
        a @ np.float32(2.0)
    with pytest.raises(ValueError, match="linear: x has shape"):
        F.linear(a, _x((5, 4)))
    with pytest.raises(ValueError, match=r"linear: bias has shape \(4,\)"):
        F.linear(a, _x((5, 3)), _x((4,)))
    with pytest.raises(ValueError, match="do not broadcast"):
        a + _x((3, 2))


def test_grad_function_does_not_touch_dot_grad():
    x = ls.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = (x * x).sum()
    (g,) = ag.grad(y, x)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    assert x.grad is None
    z = ls.tensor(np.array([1.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="not used"):
        ag.grad((x * x).sum(), [x, z])
