"""Graph-API overhead: ``CompiledPartition.execute`` vs the functional call.

The graph API executes by calling the functional front door on strided views
of the user's buffers, so its cost over the functional call is the per-call
Python work of ``execute`` (matching tensors to ports, checking dtypes,
shapes and strides; the views are built when a ``Tensor`` is created). On a
4096 x 32000 float32 problem that work is microseconds against a call that
moves

- forward (src -> dst): 2 x 4096 x 32000 x 4 B = 1.05 GB,
- backward (diff_dst, dst -> diff_src): 3 x 4096 x 32000 x 4 B = 1.57 GB,

so the target is a ratio within 5% of 1. Both sides run the same kernels on
the same buffers, interleaved (graph and functional alternate), one warm-up
call each excluded; the table reports medians (the driver's timing,
``logsoftmax.driver.perf.median_seconds``).

    python benchmarks/bench_graph.py                # 4096 x 32000, 7 repetitions
    python benchmarks/bench_graph.py --quick        # 512 x 4096, a smoke test
    python benchmarks/bench_graph.py --write /tmp/graph.md   (then paste into docs/performance.md)
"""

from __future__ import annotations

import argparse
import copy
import sys

import numpy as np

import logsoftmax
from logsoftmax import graph as g
from logsoftmax.driver.perf import median_seconds


def _graph(kind, shape):
    n_in = 2 if kind is g.OpKind.LogSoftmaxBackward else 1
    ins = [g.LogicalTensor(i, g.DataType.f32, shape) for i in range(n_in)]
    out = g.LogicalTensor(9, g.DataType.f32, shape)
    op = g.Op(0, kind, kind.value).add_inputs(ins).add_output(out)
    op.set_attr(g.OpAttr.axis, -1)
    gr = g.Graph(g.EngineKind.cpu)
    gr.add_op(op)
    gr.finalize()
    (p,) = gr.get_partitions()
    return p.compile(ins, [out], g.Engine(g.EngineKind.cpu)), ins, out


def _setup(kind, inplace, shape, rng):
    """(graph call, functional call, bytes moved) over one set of buffers."""
    eng = g.Engine(g.EngineKind.cpu)
    strm = g.Stream(eng)
    cp, ins, out = _graph(kind, shape)
    x = rng.standard_normal(shape, dtype=np.float32)
    if kind is g.OpKind.LogSoftmax:
        arrays = [x]
        fn = logsoftmax.log_softmax
    else:
        dy = rng.uniform(-1, 1, shape).astype(np.float32)
        arrays = [dy, logsoftmax.log_softmax(x)]
        fn = logsoftmax.log_softmax_backward
    res = arrays[0] if inplace else np.empty(shape, np.float32)
    tin = [g.Tensor(lt, eng, a) for lt, a in zip(ins, arrays)]
    tout = [g.Tensor(out, eng, res)]

    def graph_call():
        cp.execute(strm, tin, tout)
        strm.wait()

    def functional_call():
        fn(*arrays, -1, out=res)

    nbytes = (len(arrays) + 1) * x.nbytes
    return graph_call, functional_call, nbytes


def _block(f, n: int = 20):
    """``f`` called ``n`` times: short blocks, so that a preempted block on a
    busy machine only moves the tail of the distribution."""
    return lambda: [f() for _ in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="512 x 4096, 5 repetitions")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--write", metavar="PATH", help="also write the markdown there")
    args = ap.parse_args(argv)
    shape = (512, 4096) if args.quick else (4096, 32000)
    repeats = args.repeats or (5 if args.quick else 7)
    rng = np.random.default_rng(0)
    configs = [(k, ip) for k in (g.OpKind.LogSoftmax, g.OpKind.LogSoftmaxBackward)
               for ip in (False, True)]
    rows = []
    for kind, inplace in configs:
        graph_call, functional_call, nbytes = _setup(kind, inplace, shape, rng)
        t = median_seconds({"graph": graph_call, "functional": functional_call},
                           repeats)
        rows.append((kind.value, "yes" if inplace else "no", t["functional"],
                     t["graph"], nbytes))
        del graph_call, functional_call
    # The fixed per-call cost, measured where the kernel is negligible (8 x 16
    # backward), and the graph's own work alone: execute with the front-door
    # call replaced by a no-op (a copy of the compiled partition; the original
    # is untouched). 200 interleaved blocks of 20 calls each.
    tiny_g, tiny_f, _ = _setup(g.OpKind.LogSoftmaxBackward, False, (8, 16), rng)
    cp, ins, out = _graph(g.OpKind.LogSoftmaxBackward, (8, 16))
    eng = g.Engine(g.EngineKind.cpu)
    strm = g.Stream(eng)
    bare = copy.copy(cp)
    bare._fn = lambda *args, out=None: out
    tin = [g.Tensor(lt, eng) for lt in ins]
    tout = [g.Tensor(out, eng)]
    tiny = median_seconds(
        {"graph": _block(tiny_g), "functional": _block(tiny_f),
         "own": _block(lambda: bare.execute(strm, tin, tout))},
        200,
    )
    over_g, over_f, own = (tiny[k] / 20 for k in ("graph", "functional", "own"))
    import numba

    lines = [
        f"Graph execute vs functional call, {shape[0]} x {shape[1]} float32, axis -1, "
        f"median of {repeats} interleaved runs, {numba.get_num_threads()} thread(s).",
        "",
        "| op | in place | functional ms | graph ms | graph / functional "
        "| graph GB/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, ip, mf, mg, nbytes in rows:
        lines.append(
            f"| {name} | {ip} | {mf * 1e3:.1f} | {mg * 1e3:.1f} | {mg / mf:.3f} | "
            f"{nbytes / mg / 1e9:.2f} |"
        )
    lines += [
        "",
        "Fixed cost per call (8 x 16 backward, median of 200 blocks of 20 calls): "
        f"functional {over_f * 1e6:.1f} us, graph {over_g * 1e6:.1f} us; the graph "
        f"adds {(over_g - over_f) * 1e6:.1f} us per call; its own work (execute "
        f"with the front-door call replaced by a no-op) is {own * 1e6:.1f} us.",
    ]
    lines += ["", "Command: `python benchmarks/bench_graph.py"
              + (" --quick" if args.quick else "") + "`"]
    text = "\n".join(lines)
    print(text)
    if args.write:
        with open(args.write, "w") as f:
            f.write("## Graph API overhead\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
