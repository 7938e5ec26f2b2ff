"""``torch.ops.logsoftmax.*``: the library's kernels as PyTorch operators.

Five operators are registered with :mod:`torch.library` (API.md section 6)::

    log_softmax(Tensor x, int dim) -> Tensor
    log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor
    softmax(Tensor x, int dim) -> Tensor
    softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor
    logsumexp(Tensor x, int[] dim, bool keepdim) -> Tensor

Each has a real kernel (CPU and CUDA), a fake kernel (shapes, dtypes and
strides for ``torch.compile``/``torch.export``; it validates like the real
one, so a bad ``dim`` fails at trace time) and an autograd formula whose
backward calls the registered backward operator, so double backward works.

**Zero copy.** A real kernel hands the library's front door numpy *views*
of its inputs (``Tensor.numpy()`` shares memory at any strides; bfloat16 goes
through a ``uint16`` view reinterpreted as ``ml_dtypes.bfloat16``), so the
CPU kernels read torch's memory directly. The result has
``torch.empty_like``'s layout: for a contiguous input the front door
allocates it and the array is wrapped with ``torch.from_numpy``; otherwise
it is allocated in that layout and passed as ``out=`` (see ``_wrap``). CUDA
tensors go to the front door as they are and run on the CUDA backend.
Tensors on any other device raise ``NotImplementedError`` naming the device.

**The eager path.** Going through the dispatcher costs what the measurements
in ``benchmarks/bench_adapters.py`` show (~10 us for the Python autograd
kernel custom_op installs, ~25 us with a gradient to record: several times
``torch.log_softmax`` itself). So the :func:`log_softmax`-style entry points
below call the kernels directly, wrapped in a ``torch.autograd.Function``
built from the *same* autograd formulas, whenever nothing could observe the
difference: a plain ``torch.Tensor`` (no subclass such as ``FakeTensor`` or
``DTensor``), no ``torch.compile`` tracing, no ``TorchDispatchMode`` (fake
mode, ``make_fx``, ``FlopCounterMode``), no ``torch.func`` transform.
Otherwise they call the registered operator, which is what ``torch.compile``
captures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .. import _api, dtypes

__all__ = [
    "log_softmax",
    "log_softmax_backward",
    "softmax",
    "softmax_backward",
    "logsumexp",
    "as_array",
    "FLOAT_DTYPES",
]

#: torch dtypes the kernels compute in, and their numpy equivalents
FLOAT_DTYPES = {
    torch.float32: dtypes.float32,
    torch.bfloat16: dtypes.bfloat16,
    torch.float16: dtypes.float16,
    torch.float64: dtypes.float64,
}


# --------------------------------------------------------------------------
# checks (shared by the real and the fake kernels)
# --------------------------------------------------------------------------
def check_dim(fn: str, dim, ndim: int) -> int:
    """Canonical ``dim`` for a tensor of ``ndim`` dimensions. As in PyTorch, a
    0-d tensor counts as one element, so its ``dim`` may be 0 or -1."""
    n = ndim or 1
    if type(dim) is int and -n <= dim < n:  # the common case, in 0.1 us
        return dim + n if dim < 0 else dim
    return _api.canonical_axis(dim, n, fn, "dim")


def check_dims(fn: str, dims: Sequence[int], ndim: int) -> tuple[int, ...]:
    """Sorted canonical reduction dims; an empty list means every dim (as
    ``torch.logsumexp(x, [], keepdim=True)`` does). Repeats raise
    ``RuntimeError``, PyTorch's type."""
    if not dims:
        return tuple(range(ndim))
    axes = tuple(check_dim(fn, d, ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"{fn}: dim={list(dims)} repeats a dim; expected distinct dims")
    return tuple(sorted(axes))


def check_float(fn: str, arg: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{fn}: {arg} has dtype {t.dtype}, expected torch.float32, "
            "torch.bfloat16, torch.float16 or torch.float64"
        )


def check_pair(fn: str, grad_output: torch.Tensor, output: torch.Tensor) -> None:
    """A backward's two tensors: same shape (ValueError), dtype (TypeError)
    and device (RuntimeError, as PyTorch)."""
    check_float(fn, "grad_output", grad_output)
    if grad_output.shape != output.shape:
        raise ValueError(
            f"{fn}: grad_output has shape {tuple(grad_output.shape)} but output has "
            f"shape {tuple(output.shape)}; expected the same shape"
        )
    if grad_output.dtype != output.dtype:
        raise TypeError(
            f"{fn}: grad_output has dtype {grad_output.dtype} but output has dtype "
            f"{output.dtype}; expected the same dtype"
        )
    if grad_output.device != output.device:
        raise RuntimeError(
            f"{fn}: grad_output is on {grad_output.device} but output is on "
            f"{output.device}; expected the same device"
        )


# --------------------------------------------------------------------------
# tensors <-> the front door's arrays, without copies
# --------------------------------------------------------------------------
def as_array(t: torch.Tensor):
    """``t``'s memory as the array type of the backend that runs it.

    CPU: a numpy view (any strides; bfloat16 as ``ml_dtypes.bfloat16``).
    CUDA: the tensor itself (detached; the CUDA backend takes torch tensors).
    """
    if t.requires_grad:  # .numpy() and __cuda_array_interface__ refuse these
        t = t.detach()
    if t.is_cpu:  # (not t.device.type: building the device object costs 1 us)
        if t.dtype is torch.bfloat16:
            return t.view(torch.uint16).numpy().view(dtypes.bfloat16)
        return t.numpy()
    if t.is_cuda:
        return t
    raise NotImplementedError(
        f"logsoftmax.torch: tensors on device {str(t.device)!r} are not supported; "
        "expected a CPU tensor (CPU kernels) or a CUDA tensor (CUDA backend)"
    )


def _as_tensor(a) -> torch.Tensor:
    """A result of the front door as a tensor, sharing its memory."""
    if isinstance(a, np.ndarray):
        if a.dtype == dtypes.bfloat16:
            return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return a


#: CPU results of at least this many bytes live in numpy's memory (below)
LARGE_RESULT_BYTES = 1 << 22


def empty_like(t: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(t)``: its shape, dtype, device and strides.

    Large CPU results are allocated by numpy and wrapped with
    ``torch.from_numpy`` (zero-copy; the tensor keeps the array alive): numpy
    asks for transparent huge pages from 4 MiB up (see
    ``backends/cpu/alloc.py``), torch's allocator does not, and first-touch
    page faults on torch's fresh 16 MiB made a 1024x4096 float32
    ``log_softmax`` ~1.3 ms (15%) slower (``benchmarks/bench_adapters.py``;
    allocate-and-fill alone: 1.7 vs 1.0 ms). The layout is torch's own (read
    from a ``meta`` tensor), so the fake kernels' strides stay exact.
    """
    nbytes = t.numel() * t.element_size()
    if not t.is_cpu or nbytes < LARGE_RESULT_BYTES:
        return torch.empty_like(t)
    strides = torch.empty_like(t, device="meta").stride()
    storage = np.dtype(np.uint16) if t.dtype is torch.bfloat16 else FLOAT_DTYPES[t.dtype]
    flat = np.empty(t.numel(), storage)
    view = np.lib.stride_tricks.as_strided(
        flat, tuple(t.shape), tuple(s * flat.itemsize for s in strides)
    )
    out = torch.from_numpy(view)
    return out.view(torch.bfloat16) if t.dtype is torch.bfloat16 else out


def _flat0(t: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor as one element (PyTorch's rule for the softmax family)."""
    return t.reshape(1) if t.dim() == 0 else t


# --------------------------------------------------------------------------
# real kernels: validate, run the front door on views, wrap the result
# --------------------------------------------------------------------------
# Where the result comes from. For a contiguous input the front door
# allocates it (C order, as torch.empty_like gives) and the array is wrapped
# with torch.from_numpy: zero-copy, and cheaper than allocating a tensor and
# passing its view as ``out=`` (8x10 float32: 5.1 vs 7.1 us for the whole
# call, torch.empty_like and the second view being the difference; before
# the front door's fast path its ``out=`` checks made it 9 vs 24 us). Any
# other layout gets a result in torch.empty_like's layout through ``out=``
# (:func:`empty_like`), so the fake kernels' strides hold either way.
def _wrap(a, like: torch.Tensor) -> torch.Tensor:
    t = _as_tensor(a)
    return t.reshape(()) if like.dim() == 0 else t


#: dtypes whose CPU tensors map to numpy with ``Tensor.numpy()`` alone
_NUMPY_NATIVE = frozenset({torch.float32, torch.float64, torch.float16})


def _plain_cpu(t: torch.Tensor, dim) -> bool:
    """The common call: a contiguous CPU tensor of a numpy-native dtype with
    at least one dimension and an in-range int ``dim``. Such calls skip the
    general checks and wrappers (what's left is ``Tensor.numpy()``, the
    front door and ``torch.from_numpy``: 8x10 float32 forward kernel 7.6 -> 6.2 us,
    ``benchmarks/bench_adapters.py``)."""
    nd = t.dim()
    return (
        t.is_cpu
        and t.dtype in _NUMPY_NATIVE
        and type(dim) is int
        and -nd <= dim < nd
        and t.is_contiguous()
    )


def _forward_kernel(fn: str, compute, x: torch.Tensor, dim: int) -> torch.Tensor:
    if _plain_cpu(x, dim):
        return torch.from_numpy(compute((x.detach() if x.requires_grad else x).numpy(), dim))
    check_float(fn, "x", x)
    dim = check_dim(fn, dim, x.dim())
    if x.is_contiguous():
        return _wrap(compute(as_array(_flat0(x)), dim), x)
    y = empty_like(x)
    compute(as_array(x), dim, out=as_array(y))
    return y


def _backward_kernel(fn: str, compute, g: torch.Tensor, y: torch.Tensor, dim: int):
    if (
        _plain_cpu(g, dim)
        and y.is_cpu
        and y.dtype is g.dtype
        and y.shape == g.shape
        and y.is_contiguous()
    ):
        gn = (g.detach() if g.requires_grad else g).numpy()
        yn = (y.detach() if y.requires_grad else y).numpy()
        return torch.from_numpy(compute(gn, yn, dim))
    check_pair(fn, g, y)
    dim = check_dim(fn, dim, g.dim())
    if g.is_contiguous():
        return _wrap(compute(as_array(_flat0(g)), as_array(_flat0(y)), dim), g)
    dx = empty_like(g)
    compute(as_array(g), as_array(y), dim, out=as_array(dx))
    return dx


def _log_softmax_kernel(x: torch.Tensor, dim: int) -> torch.Tensor:
    return _forward_kernel("log_softmax", _api.log_softmax, x, dim)


def _softmax_kernel(x: torch.Tensor, dim: int) -> torch.Tensor:
    return _forward_kernel("softmax", _api.softmax, x, dim)


def _log_softmax_backward_kernel(g, y, dim: int) -> torch.Tensor:
    return _backward_kernel("log_softmax_backward", _api.log_softmax_backward, g, y, dim)


def _softmax_backward_kernel(g, y, dim: int) -> torch.Tensor:
    return _backward_kernel("softmax_backward", _api.softmax_backward, g, y, dim)


def _logsumexp_kernel(x: torch.Tensor, dim: Sequence[int], keepdim: bool):
    check_float("logsumexp", "x", x)
    axes = check_dims("logsumexp", dim, x.dim())
    if x.dim() == 0:
        return x.clone()  # the logsumexp of one element is that element
    return _as_tensor(_api.logsumexp(as_array(x), axes, keepdims=bool(keepdim)))


# --------------------------------------------------------------------------
# fake kernels: the same checks, metadata only
# --------------------------------------------------------------------------
def _forward_fake(fn: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    check_float(fn, "x", x)
    check_dim(fn, dim, x.dim())
    return torch.empty_like(x)


def _backward_fake(fn: str, g: torch.Tensor, y: torch.Tensor, dim: int):
    check_pair(fn, g, y)
    check_dim(fn, dim, g.dim())
    return torch.empty_like(g)


def _logsumexp_fake(x: torch.Tensor, dim: Sequence[int], keepdim: bool):
    check_float("logsumexp", "x", x)
    axes = check_dims("logsumexp", dim, x.dim())
    shape = [1 if d in axes else n for d, n in enumerate(x.shape)]
    if not keepdim:
        shape = [n for d, n in enumerate(x.shape) if d not in axes]
    return x.new_empty(shape)


# --------------------------------------------------------------------------
# the registered operators
# --------------------------------------------------------------------------
def _define(name: str, schema: str, kernel, fake):
    op = torch.library.custom_op(
        f"logsoftmax::{name}", kernel, mutates_args=(), schema=schema
    )
    op.register_fake(fake)
    return op


_log_softmax_op = _define(
    "log_softmax",
    "(Tensor x, int dim) -> Tensor",
    _log_softmax_kernel,
    lambda x, dim: _forward_fake("log_softmax", x, dim),
)
_softmax_op = _define(
    "softmax",
    "(Tensor x, int dim) -> Tensor",
    _softmax_kernel,
    lambda x, dim: _forward_fake("softmax", x, dim),
)
_log_softmax_backward_op = _define(
    "log_softmax_backward",
    "(Tensor grad_output, Tensor output, int dim) -> Tensor",
    _log_softmax_backward_kernel,
    lambda g, y, dim: _backward_fake("log_softmax_backward", g, y, dim),
)
_softmax_backward_op = _define(
    "softmax_backward",
    "(Tensor grad_output, Tensor output, int dim) -> Tensor",
    _softmax_backward_kernel,
    lambda g, y, dim: _backward_fake("softmax_backward", g, y, dim),
)
_logsumexp_op = _define(
    "logsumexp",
    "(Tensor x, int[] dim, bool keepdim) -> Tensor",
    _logsumexp_kernel,
    _logsumexp_fake,
)

# the dispatcher's entry points (OpOverloads: no CustomOpDef wrapper per call)
_OPS = torch.ops.logsoftmax


# --------------------------------------------------------------------------
# autograd formulas: one definition, used by the registered operators and
# by the eager path's autograd.Functions
# --------------------------------------------------------------------------
def _save_output(ctx, inputs, output) -> None:
    """Forward ops save their output (not their input) and the dim."""
    ctx.dim = inputs[1]
    ctx.save_for_backward(output)


def _save_pair(ctx, inputs, output) -> None:
    """Backward ops save ``grad_output`` and ``output`` and the dim."""
    ctx.dim = inputs[2]
    ctx.save_for_backward(inputs[0], inputs[1])


def _save_logsumexp(ctx, inputs, output) -> None:
    ctx.dim, ctx.keepdim = inputs[1], inputs[2]
    ctx.save_for_backward(inputs[0], output)


def _log_softmax_grad(ctx, grad):
    """d log_softmax: ``grad - exp(y) * sum(grad)``, the fused backward op."""
    (y,) = ctx.saved_tensors
    return log_softmax_backward(grad, y, ctx.dim), None


def _softmax_grad(ctx, grad):
    """d softmax: ``y * (grad - sum(grad * y))``, the fused backward op."""
    (y,) = ctx.saved_tensors
    return softmax_backward(grad, y, ctx.dim), None


def _log_softmax_backward_grad(ctx, v):
    """Second order of log_softmax. With ``gx = g - exp(y) * sum(g)``:
    ``d/dg = v - sum(v * exp(y))`` and ``d/dy = -v * exp(y) * sum(g)``
    (PyTorch's formulas for ``_log_softmax_backward_data``)."""
    g, y = ctx.saved_tensors
    dim = check_dim("log_softmax_backward", ctx.dim, g.dim())
    p = y.exp()
    dg = dy = None
    if ctx.needs_input_grad[0]:
        dg = v - (v * p).sum(dim, keepdim=True)
    if ctx.needs_input_grad[1]:
        dy = -v * p * g.sum(dim, keepdim=True)
    return dg, dy, None


def _softmax_backward_grad(ctx, v):
    """Second order of softmax. With ``gx = y * (g - sum(g * y))``:
    ``d/dg = y * (v - sum(v * y))``, itself the fused backward op, and
    ``d/dy = v * (g - sum(g * y)) - g * sum(v * y)``."""
    g, y = ctx.saved_tensors
    dim = check_dim("softmax_backward", ctx.dim, g.dim())
    dg = dy = None
    if ctx.needs_input_grad[0]:
        dg = softmax_backward(v, y, ctx.dim)
    if ctx.needs_input_grad[1]:
        dy = v * (g - (g * y).sum(dim, keepdim=True)) - g * (v * y).sum(dim, keepdim=True)
    return dg, dy, None


def _logsumexp_grad(ctx, grad):
    """d logsumexp: ``grad * exp(x - lse)``, broadcast over the reduced dims
    (PyTorch's ``logsumexp_backward``)."""
    x, lse = ctx.saved_tensors
    if not ctx.keepdim and x.dim() > 0:
        for d in check_dims("logsumexp", ctx.dim, x.dim()):
            grad, lse = grad.unsqueeze(d), lse.unsqueeze(d)
    return grad * (x - lse).exp(), None, None


for _op, _grad, _setup in (
    (_log_softmax_op, _log_softmax_grad, _save_output),
    (_softmax_op, _softmax_grad, _save_output),
    (_log_softmax_backward_op, _log_softmax_backward_grad, _save_pair),
    (_softmax_backward_op, _softmax_backward_grad, _save_pair),
    (_logsumexp_op, _logsumexp_grad, _save_logsumexp),
):
    _op.register_autograd(_grad, setup_context=_setup)


# --------------------------------------------------------------------------
# torch.func.vmap: one call on the whole batch (the batch becomes dim 0)
# --------------------------------------------------------------------------
def _batch_first(t: torch.Tensor, bdim, size: int) -> torch.Tensor:
    """``t`` with the vmap batch as dim 0 (broadcast when ``t`` is unbatched)."""
    return t.expand(size, *t.shape) if bdim is None else t.movedim(bdim, 0)


def _vmap_forward(fn: str, op):
    def rule(info, in_dims, x, dim):
        x = _batch_first(x, in_dims[0], info.batch_size)
        dim = check_dim(fn, dim, x.dim() - 1) + 1
        if x.dim() == 1:  # per-sample 0-d tensors: one element each
            return op(x.unsqueeze(1), 1).squeeze(1), 0
        return op(x, dim), 0

    return rule


def _vmap_backward(fn: str, op):
    def rule(info, in_dims, g, y, dim):
        g = _batch_first(g, in_dims[0], info.batch_size)
        y = _batch_first(y, in_dims[1], info.batch_size)
        dim = check_dim(fn, dim, g.dim() - 1) + 1
        if g.dim() == 1:
            return op(g.unsqueeze(1), y.unsqueeze(1), 1).squeeze(1), 0
        return op(g, y, dim), 0

    return rule


def _vmap_logsumexp(info, in_dims, x, dim, keepdim):
    x = _batch_first(x, in_dims[0], info.batch_size)
    axes = check_dims("logsumexp", dim, x.dim() - 1)
    if x.dim() == 1:  # per-sample 0-d: the logsumexp of one element is itself
        return x.clone(), 0
    return _OPS.logsumexp.default(x, [a + 1 for a in axes], keepdim), 0


_log_softmax_op.register_vmap(_vmap_forward("log_softmax", _OPS.log_softmax.default))
_softmax_op.register_vmap(_vmap_forward("softmax", _OPS.softmax.default))
_log_softmax_backward_op.register_vmap(
    _vmap_backward("log_softmax_backward", _OPS.log_softmax_backward.default)
)
_softmax_backward_op.register_vmap(
    _vmap_backward("softmax_backward", _OPS.softmax_backward.default)
)
_logsumexp_op.register_vmap(_vmap_logsumexp)


# --------------------------------------------------------------------------
# the eager path: kernels called directly, autograd through the same formulas
# --------------------------------------------------------------------------
def _function(name: str, kernel, setup, grad) -> type[torch.autograd.Function]:
    """An autograd.Function running ``kernel`` with the op's formulas."""

    def forward(ctx, *args):
        out = kernel(*args)
        setup(ctx, args, out)
        return out

    return type(
        name,
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(grad)},
    )


_len_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_transform = torch._C._functorch.peek_interpreter_stack
_is_compiling = torch.compiler.is_compiling


def _eager(t: torch.Tensor) -> bool:
    """Whether calling the kernel directly is indistinguishable from the
    dispatcher: see the module docstring. (Meta tensors take the dispatcher
    to the fake kernel; other devices to its NotImplementedError.)"""
    return (
        not _is_compiling()
        and type(t) is torch.Tensor
        and (t.is_cpu or t.is_cuda)
        and not _len_dispatch_modes()
        and _functorch_transform() is None
    )


def _entry(name: str, node: str, op, kernel, setup, grad):
    """The routed entry point ``name`` for one operator (module docstring);
    ``node`` names its autograd.Function (``grad_fn`` is ``<node>Backward``)."""
    apply = _function(node, kernel, setup, grad).apply

    if setup is _save_pair:  # two tensor inputs

        def call(g, y, dim):
            if not _eager(g):
                return op(g, y, dim)
            if torch.is_grad_enabled() and (g.requires_grad or y.requires_grad):
                return apply(g, y, dim)
            return kernel(g, y, dim)

    else:

        def call(x, *args):
            if not _eager(x):
                return op(x, *args)
            if torch.is_grad_enabled() and x.requires_grad:
                return apply(x, *args)
            return kernel(x, *args)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``torch.ops.logsoftmax.{name}``, eager calls run directly."
    return call


log_softmax = _entry(
    "log_softmax", "LogSoftmax", _OPS.log_softmax.default, _log_softmax_kernel,
    _save_output, _log_softmax_grad,
)
softmax = _entry(
    "softmax", "Softmax", _OPS.softmax.default, _softmax_kernel, _save_output,
    _softmax_grad,
)
log_softmax_backward = _entry(
    "log_softmax_backward", "LogSoftmaxBackwardOp", _OPS.log_softmax_backward.default,
    _log_softmax_backward_kernel, _save_pair, _log_softmax_backward_grad,
)
softmax_backward = _entry(
    "softmax_backward", "SoftmaxBackwardOp", _OPS.softmax_backward.default,
    _softmax_backward_kernel, _save_pair, _softmax_backward_grad,
)
logsumexp = _entry(
    "logsumexp", "LogSumExp", _OPS.logsumexp.default, _logsumexp_kernel,
    _save_logsumexp, _logsumexp_grad,
)
