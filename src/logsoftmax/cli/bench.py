"""``logsoftmax bench``: the main job, and a benchdnn-compatible driver.

Without problem descriptors it runs the main job: every configuration of
``data/perf_set.json`` (``--quick``: small copies of four), forward and
backward, in f32, bf16 and f16, each checked against a float64 reference
(max error in eps) and timed against a same-run memory copy, NumPy and
PyTorch; a table follows. With descriptors (benchdnn's softmax options,
dims, ``--batch=FILE``) or ``--problems FILE.json`` it is benchdnn's softmax
driver: one ``N:STATE __REPRO: ...`` line per problem and a summary.

Exit status: 0 if nothing failed, 1 if any problem FAILED, 2 on a usage
error. Every option is documented in ``docs/driver.md``.
"""

from __future__ import annotations

import os
import platform
import sys

USAGE = """\
usage: logsoftmax bench [--quick] [OPTIONS] [DESCRIPTOR... DIMS]...

Main job (no DIMS): perf-set problems x {fwd,bwd} x {f32,bf16,f16}, checked
against float64 and timed against a memory copy, NumPy and PyTorch.

benchdnn softmax descriptors (persist until --reset; comma lists multiply):
  --dir=FWD_D|FWD_I|BWD_D   --alg=SOFTMAX|LOGSOFTMAX   --axis=N
  --sdt=DT --ddt=DT --dt=DT (f32, bf16, f16, f64)       --mb=N
  --stag=TAG --dtag=TAG (abx, axb, any, acdb, acb...)  --inplace=true|false
  --attr-acc-mode=strict|relaxed   --match=REGEX   --reset   --batch=FILE
  DIMS: 256x1000 or mb64ic128ih28iw28
Run options (anywhere, last wins):
  --mode=C|P|CP|R   --fill=benchdnn|random   --backend=NAME   --engine=cpu|gpu
  --max-ms-per-prb=MS   --fix-times-per-prb=N   --perf-template=TEMPLATE
  --compare=torch,numpy   --csv=FILE   --json=FILE   --plot=FILE.png
  --problems=FILE.json [--offset=N] [--limit=N]   --seed=N   --no-progress
  --quick   --table[=true|false]   -vN
See docs/driver.md.
"""

__all__ = ["main", "USAGE"]


def _norm_argv(argv: list[str]) -> list[str]:
    """Accept ``--opt VALUE`` for the run options that take a file or list
    (``--csv out.csv``), turning them into benchdnn's ``--opt=VALUE``."""
    spaced = {"--csv", "--json", "--plot", "--problems", "--compare", "--backend",
              "--limit", "--offset", "--batch", "--mode", "--fill", "--match"}
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok in spaced and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append(f"{tok}={argv[i + 1]}")
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


def main(argv: list[str]) -> int:
    """Run the bench command; returns the exit status."""
    # numba's "omp" threading layer and torch both use libgomp, whose idle
    # threads spin by default. Interleaved with each other (and with other
    # processes on a 2-core machine) the spinning pools starve one another:
    # medians measured 4-12x slower, quantised to scheduler ticks. Sleeping
    # idle threads cost a few microseconds per parallel region instead. Read
    # when each OpenMP runtime starts, so it must be set before the first
    # parallel kernel; an explicit OMP_WAIT_POLICY is respected.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from ..backends import get_backend
    from ..driver import jobs, report
    from ..driver.parser import UsageError, parse_args
    from ..driver.runner import run_problem

    try:
        problems, opts, saw_problem = parse_args(_norm_argv(list(argv)))
    except UsageError as e:
        if str(e) == "help":
            print(USAGE)
            return 0
        print(f"logsoftmax bench: {e}", file=sys.stderr)
        return 2

    main_job = False
    try:
        if opts.problems_file:
            problems += jobs.load_problem_file(
                opts.problems_file, offset=opts.offset, limit=opts.limit,
                match=opts.match,
            )
        elif not saw_problem:
            main_job = True
            problems = jobs.main_job_problems(opts.quick)
            if opts.match is not None:
                problems = [p for p in problems if jobs.matches(p, opts.match)]
    except (OSError, ValueError) as e:
        print(f"logsoftmax bench: {e}", file=sys.stderr)
        return 2
    if main_job:
        if opts.fill is None:
            opts.fill = "random"  # realistic data; checked against float64
        if not opts.compare:
            opts.compare = ("numpy", "torch")
        if opts.table is None:
            opts.table = True
        if opts.max_ms_per_prb is None:
            opts.max_ms_per_prb = 100.0 if opts.quick else 250.0
        if opts.quick and not opts.fix_times_per_prb:
            opts.min_times_per_prb = 3
    if opts.max_ms_per_prb is None:
        opts.max_ms_per_prb = 1000.0
    if opts.engine == "gpu" and opts.backend is None:
        opts.backend = "cuda"
    if opts.backend is not None:
        try:
            get_backend(opts.backend)
        except ValueError as e:
            print(f"logsoftmax bench: --backend={opts.backend}: {e}", file=sys.stderr)
            return 2

    # benchdnn prints a perf line per problem; the main job prints its table
    # instead, and the CSV-like lines only when asked (--perf-template), or
    # as a file (--csv)
    perf_lines = opts.mode in ("P", "CP") and (
        not main_job or opts.perf_template is not None
    )
    progress = report.Progress(
        len(problems),
        enabled=opts.progress if opts.progress is not None
        else (len(problems) > 1 and sys.stderr.isatty()),
    )
    results = []
    try:
        for i, prb in enumerate(problems):
            progress.update(prb.repro()[10:])
            r = run_problem(prb, i, opts)
            results.append(r)
            if perf_lines and r.timing is not None:
                progress.write(report.perf_line(r, opts.perf_template, opts.engine))
            progress.write(report.status_line(r))
            if opts.verbose and r.err64 is not None:
                progress.write(
                    f"    err vs float64: {r.err64:.3g} eps  ({r.wall_s:.2f} s)"
                )
    except KeyboardInterrupt:
        progress.write("interrupted")
    finally:
        progress.close()

    if opts.table and results:
        print()
        print(report.table(results, opts.compare if opts.mode in ("P", "CP") else ()))
        print()
    print(report.summary(results))
    meta = {
        "argv": list(argv),
        "mode": opts.mode,
        "fill": opts.effective_fill,
        "backend": opts.backend or "default",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    try:
        if opts.csv:
            report.write_csv(opts.csv, results)
        if opts.json:
            report.write_json(opts.json, results, meta)
        if opts.plot:
            report.plot(opts.plot, results)
    except ImportError as e:
        print(f"logsoftmax bench: --plot needs matplotlib (the bench extra): {e}",
              file=sys.stderr)
        return 2
    except OSError as e:
        print(f"logsoftmax bench: could not write output: {e}", file=sys.stderr)
        return 2
    failed = any(r.state == "FAILED" for r in results)
    return 1 if failed else 0
