"""logsoftmax as a drop-in for ``jax.nn.log_softmax`` in a jitted training step.

A JAX MLP (64 -> 128 -> relu -> 10) learns scikit-learn's digits twice, from
the same initial weights and the same batches: once with
``jax.nn.log_softmax`` in its cross-entropy and once with
``logsoftmax.jax.log_softmax`` (the library's kernels as an XLA FFI call
with a ``custom_vjp``). The step is ``jax.jit(jax.value_and_grad(loss))``
and SGD with momentum over the parameter pytree: plain JAX otherwise.

In float64 (``jax_enable_x64``) the two loss curves agree to ~1e-9 relative;
the script checks that, prints both test accuracies and plots both curves.

    python examples/jax_drop_in.py                   # 30 epochs, plot in docs/img/
    python examples/jax_drop_in.py --quick           # 8 epochs
    python examples/jax_drop_in.py --dtype float32

Exit status 1 if the curves disagree by more than ``--rtol`` or the test
accuracy misses 95%.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import logsoftmax.jax as lj

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drop_in  # noqa: E402
from train_digits import batches, load_data  # noqa: E402  (the same data and split)


def init(seed: int, dtype) -> list:
    """64 -> 128 -> 10 weights and biases, PyTorch's default initialisation
    (uniform in +-1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in ((64, 128), (128, 10)):
        bound = 1 / np.sqrt(fan_in)
        params.append(jnp.asarray(rng.uniform(-bound, bound, (fan_in, fan_out)), dtype))
        params.append(jnp.asarray(rng.uniform(-bound, bound, fan_out), dtype))
    return params


def logits(params, x):
    w1, b1, w2, b2 = params
    return jax.nn.relu(x @ w1 + b1) @ w2 + b2


def cross_entropy(log_softmax):
    """Mean negative log-likelihood of integer labels, over ``log_softmax``."""

    def loss(params, x, y):
        logp = log_softmax(logits(params, x), axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    return loss


def train(log_softmax, data, args, log) -> dict:
    """Train a fresh MLP; ``log_softmax`` is the only thing that differs."""
    dtype = jnp.dtype(args.dtype)
    x_tr, y_tr, x_te, y_te = data
    x_tr, x_te = jnp.asarray(x_tr, dtype), jnp.asarray(x_te, dtype)
    y_tr = jnp.asarray(y_tr)
    grad_step = jax.jit(jax.value_and_grad(cross_entropy(log_softmax)))
    lr, momentum = args.lr, args.momentum

    @jax.jit
    def sgd(params, velocity, grads):
        velocity = jax.tree.map(lambda v, g: momentum * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
        return params, velocity

    params = init(args.seed, dtype)
    velocity = jax.tree.map(jnp.zeros_like, params)
    rng = np.random.default_rng(args.seed + 1)
    hist = {"step": [], "epoch": [], "acc": []}
    for epoch in range(drop_in.epochs_of(args)):
        losses = []
        for idx in batches(len(x_tr), args.batch, rng):
            loss, grads = grad_step(params, x_tr[idx], y_tr[idx])
            params, velocity = sgd(params, velocity, grads)
            losses.append(float(loss))
        acc = float(jnp.mean(jnp.argmax(logits(params, x_te), 1) == y_te))
        hist["step"] += losses
        hist["epoch"].append(float(np.mean(losses)))
        hist["acc"].append(acc)
        log(epoch, hist)
    return hist


def main(argv: list[str] | None = None) -> int:
    args = drop_in.parser(__doc__, "jax_drop_in.png").parse_args(argv)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    data = load_data(args.seed, np.float64)
    epochs = drop_in.epochs_of(args)
    runs = {}
    for name, log_softmax in (("jax.nn.log_softmax", jax.nn.log_softmax),
                              ("lj.log_softmax", lj.log_softmax)):
        t0 = time.perf_counter()
        runs[name] = train(log_softmax, data, args, drop_in.epoch_logger(name, epochs))
        print(f"{name}: test accuracy {runs[name]['acc'][-1]:.2%} after {epochs} epochs "
              f"({len(runs[name]['step'])} steps, {time.perf_counter() - t0:.1f} s)")
    return drop_in.finish(args, runs, "jax.nn.log_softmax", "lj.log_softmax",
                          "digits MLP 64-128-10 in JAX")


if __name__ == "__main__":
    sys.exit(main())
