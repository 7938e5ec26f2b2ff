"""What a call through ``logsoftmax.torch`` / ``logsoftmax.jax`` costs.

The adapters add no arithmetic: a call is the framework's dispatch, the
adapter's bridge (numpy views of torch's memory / XLA's FFI call frame),
the library's front door and the kernel. On small tensors everything but
the kernel is overhead, so the table puts each adapter call next to

- the framework's own op on the same tensor (the target: at most
  PyTorch's own op + 5 us);
- PyTorch: the front door alone, called as the adapter calls it for a
  contiguous tensor (``logsoftmax.log_softmax(x_np, 1)`` on a numpy view of
  the tensor's memory): ``adapter - front door`` is the adapter's own share; and ``torch.ops.logsoftmax.log_softmax`` through the
  dispatcher (the path ``torch.compile`` graphs take), to show why eager
  calls skip it;
- JAX: the host-callback bridge (``jax.pure_callback`` running the front
  door), the alternative to the XLA FFI handlers the adapter uses.

Rows are float32 ``(rows, n)`` problems with ``dim = 1``; one thread for
torch, numba and XLA's intra-op pool is not pinned (small problems run on
one thread anyway). Every entry is the median over interleaved rounds of
``calls`` back-to-back calls (the machine is shared: compare within a row).
"fwd+bwd" is ``y = f(x); y.backward(g)`` (torch) / a jitted
``value_and_grad`` (JAX).

    python benchmarks/bench_adapters.py           # full: prints, writes docs/torch.md, docs/jax.md
    python benchmarks/bench_adapters.py --quick   # fewer rounds and shapes, prints only
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

import logsoftmax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(8, 10), (64, 128), (256, 1000), (1024, 4096)]
QUICK_SHAPES = [(8, 10), (256, 1000)]


def interleaved(fns: dict, rounds: int, budget_s: float = 0.02) -> dict[str, float]:
    """Median seconds per call of each function over ``rounds`` interleaved
    rounds; a round runs each function back to back for ~``budget_s``."""
    calls = {}
    for name, fn in fns.items():  # warm-up (compilation), then size the rounds
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, min(2000, int(budget_s / max(time.perf_counter() - t0, 1e-7))))
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            k = calls[name]
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            times[name].append((time.perf_counter() - t0) / k)
    return {name: float(np.median(v)) for name, v in times.items()}


def us(t: float) -> str:
    return f"{t * 1e6:.1f}" if t < 1e-3 else f"{t * 1e6:.0f}"


# --------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------
def bench_torch(shapes, rounds: int) -> list[str]:
    import torch
    import torch.nn.functional as F

    import logsoftmax.torch as lt
    from logsoftmax.torch._ops import as_array

    rows = [
        "| shape | torch.log_softmax | lt.log_softmax | lt - torch | front door alone "
        "| adapter share | via dispatcher | fwd+bwd torch | fwd+bwd lt | lt - torch "
        "| fwd+bwd torch in a Python autograd.Function | lt - that "
        "| cross_entropy fwd+bwd torch | lt |",
        "|" + "---|" * 14,
    ]

    class TorchInPython(torch.autograd.Function):
        """PyTorch's own forward and backward kernels behind a Python
        ``autograd.Function``: what any op not written in C++ pays."""

        @staticmethod
        def forward(ctx, x, dim):
            y = torch.log_softmax(x, dim)
            ctx.save_for_backward(y)
            ctx.dim = dim
            return y

        @staticmethod
        def backward(ctx, gy):
            (y,) = ctx.saved_tensors
            return torch._log_softmax_backward_data(gy, y, ctx.dim, y.dtype), None

    for shape in shapes:
        x = torch.randn(shape)
        xg = x.clone().requires_grad_()
        g = torch.randn(shape)
        target = torch.randint(0, shape[1], (shape[0],))
        xn = as_array(x)

        def fwd_bwd(f):
            def run():
                f(xg, 1).backward(g)
                xg.grad = None

            return run

        def ce(f):
            def run():
                f(xg, target).backward()
                xg.grad = None

            return run

        t = interleaved(
            {
                "torch": lambda: torch.log_softmax(x, 1),
                "lt": lambda: lt.log_softmax(x, 1),
                "front": lambda: logsoftmax.log_softmax(xn, 1),
                "dispatcher": lambda: torch.ops.logsoftmax.log_softmax.default(x, 1),
                "torch fb": fwd_bwd(torch.log_softmax),
                "lt fb": fwd_bwd(lt.log_softmax),
                "python fb": fwd_bwd(TorchInPython.apply),
                "torch ce": ce(F.cross_entropy),
                "lt ce": ce(lt.cross_entropy),
            },
            rounds,
        )
        rows.append(
            f"| {shape[0]}x{shape[1]} | {us(t['torch'])} | {us(t['lt'])} | "
            f"{us(t['lt'] - t['torch'])} | {us(t['front'])} | {us(t['lt'] - t['front'])} | "
            f"{us(t['dispatcher'])} | {us(t['torch fb'])} | {us(t['lt fb'])} | "
            f"{us(t['lt fb'] - t['torch fb'])} | {us(t['python fb'])} | "
            f"{us(t['lt fb'] - t['python fb'])} | {us(t['torch ce'])} | {us(t['lt ce'])} |"
        )
        print(rows[-1], flush=True)
    return rows


# --------------------------------------------------------------------------
# JAX
# --------------------------------------------------------------------------
def _callback_log_softmax(x, axis=-1):
    """The bridge the adapter does not use: the front door in a host callback."""
    import jax

    axis = axis % x.ndim - x.ndim
    return jax.pure_callback(
        lambda a: logsoftmax.log_softmax(np.asarray(a), axis),
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        x,
        vmap_method="broadcast_all",
    )


def bench_jax(shapes, rounds: int) -> list[str]:
    import jax
    import jax.numpy as jnp

    import logsoftmax.jax as lj

    rows = [
        "| shape | jax.nn.log_softmax | lj.log_softmax (FFI) | lj - jax.nn "
        "| pure_callback bridge | fwd+bwd jax.nn | fwd+bwd lj |",
        "|" + "---|" * 7,
    ]
    for shape in shapes:
        x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), jnp.float32)
        loss = lambda f: jax.jit(jax.value_and_grad(lambda t: jnp.sum(f(t) ** 2)))  # noqa: E731
        fns = {
            "jax": jax.jit(jax.nn.log_softmax),
            "lj": jax.jit(lj.log_softmax),
            "callback": jax.jit(_callback_log_softmax),
            "jax fb": loss(jax.nn.log_softmax),
            "lj fb": loss(lj.log_softmax),
        }
        t = interleaved(
            {name: (lambda f=f: jax.block_until_ready(f(x))) for name, f in fns.items()},
            rounds,
        )
        rows.append(
            f"| {shape[0]}x{shape[1]} | {us(t['jax'])} | {us(t['lj'])} | "
            f"{us(t['lj'] - t['jax'])} | {us(t['callback'])} | {us(t['jax fb'])} | "
            f"{us(t['lj fb'])} |"
        )
        print(rows[-1], flush=True)
    return rows


# --------------------------------------------------------------------------
def write_section(path: Path, tag: str, lines: list[str]) -> None:
    """Replace the block between ``<!-- tag:begin -->`` and ``<!-- tag:end -->``."""
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    text = path.read_text()
    block = "\n".join([begin, *lines, end])
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
    print(f"wrote {path.relative_to(ROOT)}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds and shapes; no docs")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 15, quick 5)")
    p.add_argument("--only", choices=["torch", "jax"], help="one framework")
    args = p.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    shapes = QUICK_SHAPES if args.quick else SHAPES

    import numba

    numba.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass
    head = (
        f"{cpu_info()['model']}, 1 thread; float32, dim/axis 1; microseconds per call, "
        f"median of {rounds} interleaved rounds (shared machine: compare within a row)."
    )
    print(head)
    for name, bench in (("torch", bench_torch), ("jax", bench_jax)):
        if args.only not in (None, name):
            continue
        module = __import__(name)
        if name == "torch":
            module.set_num_threads(1)
        title = {"torch": "PyTorch", "jax": "JAX"}[name]
        print(f"\n{title} {module.__version__}")
        rows = bench(shapes, rounds)
        if not args.quick:
            cmd = f"`python benchmarks/bench_adapters.py` (`--only {name}`)"
            write_section(ROOT / "docs" / f"{name}.md", f"bench_adapters.py:{name}",
                          [f"{head} {title} {module.__version__}; {cmd}.", "", *rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
