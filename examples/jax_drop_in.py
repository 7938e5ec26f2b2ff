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
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import logsoftmax.jax as lj

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drop_in  # noqa: E402


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

    state = {"params": init(args.seed, dtype)}
    state["velocity"] = jax.tree.map(jnp.zeros_like, state["params"])

    def step(idx) -> float:
        loss, grads = grad_step(state["params"], x_tr[idx], y_tr[idx])
        state["params"], state["velocity"] = sgd(state["params"], state["velocity"], grads)
        return float(loss)

    def test_accuracy() -> float:
        return float(jnp.mean(jnp.argmax(logits(state["params"], x_te), 1) == y_te))

    return drop_in.fit(args, len(x_tr), step, test_accuracy, log)


def main(argv: list[str] | None = None) -> int:
    args = drop_in.parser(__doc__, "jax_drop_in.png").parse_args(argv)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    variants = [("jax.nn.log_softmax", jax.nn.log_softmax),
                ("lj.log_softmax", lj.log_softmax)]
    return drop_in.compare(args, train, variants, "digits MLP 64-128-10 in JAX")


if __name__ == "__main__":
    sys.exit(main())
