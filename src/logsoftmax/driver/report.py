"""Reporters: benchdnn-style lines, perf templates, summary, CSV/JSON, the
main job's table, the GB/s plot and the progress bar."""

from __future__ import annotations

import csv
import json
import math
import sys
from typing import Iterable

from .runner import Result

__all__ = [
    "status_line",
    "perf_line",
    "DEFAULT_PERF_TEMPLATE",
    "summary",
    "counts",
    "write_csv",
    "write_json",
    "table",
    "plot",
    "Progress",
]

#: the default ``--perf-template`` (benchdnn's is
#: ``perf,%engine%,%impl%,%name%,%prb%,%Gops%,%-time%,%-Gflops%,%0time%,%0Gflops%``)
DEFAULT_PERF_TEMPLATE = (
    "perf,%engine%,%impl%,%name%,%prb%,%-time%,%0time%,%GBps%,%copy%"
)


def status_line(r: Result) -> str:
    """``0:PASSED __REPRO: --softmax ... 256x1000`` (reason in parentheses)."""
    reason = f" ({r.reason})" if r.reason else ""
    return f"{r.index}:{r.state}{reason} __REPRO: {r.problem.repro()}"


def _fmt(v: float | None, spec: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def _fields(r: Result, engine: str) -> dict[str, str]:
    p = r.problem
    t = r.timing
    f = {
        "engine": engine,
        "impl": r.impl,
        "name": p.name or "",
        "prb": p.repro(),
        "dir": p.dir,
        "alg": p.alg,
        "sdt": p.sdt,
        "ddt": p.ddt,
        "axis": str(p.axis),
        "shape": "x".join(map(str, p.shape)),
        "state": r.state,
        "-time": _fmt(t.min_ms if t else None),
        "0time": _fmt(t.median_ms if t else None),
        "+time": _fmt(t.max_ms if t else None),
        "-GBps": _fmt(p.bytes_moved / (t.min_ms * 1e6) if t and t.samples else None),
        "GBps": _fmt(r.gbps()),
        "0GBps": _fmt(r.gbps()),
        "copy": _fmt(r.copy_pct(), ".1f"),
        "copy_time": _fmt(r.copy.median_ms if r.copy else None),
        "err": _fmt(r.err64, ".3g"),
    }
    for lib, pr in r.peers.items():
        f[f"{lib}_0time"] = _fmt(pr.timing.median_ms if pr.timing else None)
        f[f"{lib}_GBps"] = _fmt(r.gbps(pr.timing) if pr.timing else None)
        f[f"{lib}_copy"] = _fmt(r.copy_pct(pr.timing) if pr.timing else None, ".1f")
        f[f"{lib}_err"] = _fmt(pr.err64, ".3g")
    return f


def perf_line(r: Result, template: str | None, engine: str = "cpu") -> str:
    """Fill ``template``'s ``%field%`` tokens (see docs/driver.md); unknown
    fields stay as written so a typo is visible. ``None`` or ``"def"``
    (benchdnn's name) is the default template plus each peer's fields."""
    default = template in (None, "def")
    tpl = DEFAULT_PERF_TEMPLATE if default or not template else template
    if default:
        tpl += "".join(
            f",%{lib}_0time%,%{lib}_GBps%,%{lib}_copy%" for lib in r.peers
        )
    fields = _fields(r, engine)
    out = tpl
    for key, val in fields.items():
        out = out.replace(f"%{key}%", val)
    return out


def counts(results: Iterable[Result]) -> dict[str, int]:
    c = {"tests": 0, "passed": 0, "skipped": 0, "mistrusted": 0,
         "unimplemented": 0, "failed": 0}
    for r in results:
        c["tests"] += 1
        key = {"PASSED": "passed", "EXECUTED": "passed", "SKIPPED": "skipped",
               "MISTRUSTED": "mistrusted", "UNIMPLEMENTED": "unimplemented",
               "FAILED": "failed"}[r.state]
        c[key] += 1
    return c


def summary(results: Iterable[Result]) -> str:
    """``tests:N passed:N skipped:N mistrusted:N unimplemented:N failed:N``."""
    return " ".join(f"{k}:{v}" for k, v in counts(results).items())


def _record(r: Result) -> dict:
    p = r.problem
    d = {
        "index": r.index,
        "name": p.name,
        "repro": p.repro(),
        **p.to_dict(),
        "state": r.state,
        "reason": r.reason,
        "impl": r.impl,
        "nelems": p.nelems,
        "axis_size": p.axis_size,
        "bytes_moved": p.bytes_moved,
        "err_eps_f64": r.err64,
        "bound_eps_f64": r.bound64,
        "n_errors": r.check.n_errors if r.check else None,
        "max_rdiff": r.check.max_rdiff if r.check else None,
        "zeros": r.check.zeros if r.check else None,
        "time_min_ms": r.timing.min_ms if r.timing else None,
        "time_median_ms": r.timing.median_ms if r.timing else None,
        "samples": len(r.timing.samples) if r.timing else None,
        "gbps": r.gbps() if r.timing else None,
        "copy_median_ms": r.copy.median_ms if r.copy else None,
        "pct_of_copy": r.copy_pct() if r.timing else None,
        "wall_s": r.wall_s,
    }
    for lib, pr in r.peers.items():
        d[f"{lib}_time_median_ms"] = pr.timing.median_ms if pr.timing else None
        d[f"{lib}_gbps"] = r.gbps(pr.timing) if pr.timing else None
        d[f"{lib}_pct_of_copy"] = r.copy_pct(pr.timing) if pr.timing else None
        d[f"{lib}_err_eps_f64"] = pr.err64
        d[f"{lib}_reason"] = pr.reason
    return {
        k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()
    }


def write_json(path: str, results: list[Result], meta: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "results": [_record(r) for r in results],
                   "summary": counts(results)}, f, indent=1, default=str)


def write_csv(path: str, results: list[Result]) -> None:
    records = [_record(r) for r in results]
    keys: list[str] = []
    for rec in records:
        keys += [k for k in rec if k not in keys]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for rec in records:
            w.writerow({k: ("" if rec.get(k) is None else rec.get(k)) for k in keys})


def table(results: list[Result], libs: Iterable[str]) -> str:
    """The main job's table: per problem, time / GB/s / % of copy / max error
    (eps vs float64) for logsoftmax and each peer."""
    libs = list(libs)
    head = f"{'problem':<34} {'dir':<3} {'dt':<4}"
    sub = " {:>8} {:>6} {:>5} {:>7}"
    for name in ["logsoftmax"] + libs:
        head += f" | {name:^29}"
    lines = [head]
    unit = " | " + sub.format("ms", "GB/s", "%cpy", "err")[1:]
    units = " " * 43 + unit * (1 + len(libs))
    lines.append(units)
    lines.append("-" * len(units))
    for r in results:
        p = r.problem
        label = f"{p.name or ''} {'x'.join(map(str, p.shape))} ax{p.axis} {p.src_tag}"
        row = f"{label[:34]:<34} {'fwd' if p.is_fwd else 'bwd':<3} {p.out_dt:<4}"
        if r.state in ("SKIPPED", "UNIMPLEMENTED") or r.timing is None:
            row += f" | {r.state}: {r.reason}"
            lines.append(row)
            continue
        flag = "" if r.state in ("PASSED", "EXECUTED") else f"  <-- {r.state}"
        row += " | " + sub.format(
            _fmt(r.timing.median_ms, ".2f"), _fmt(r.gbps(), ".1f"),
            _fmt(r.copy_pct(), ".0f"), _fmt(r.err64, ".2g"))[1:]
        for lib in libs:
            pr = r.peers.get(lib)
            if pr is None or pr.timing is None:
                why = pr.reason if pr else "not run"
                row += f" | {why[:29]:<29}"
            else:
                row += " | " + sub.format(
                    _fmt(pr.timing.median_ms, ".2f"), _fmt(r.gbps(pr.timing), ".1f"),
                    _fmt(r.copy_pct(pr.timing), ".0f"), _fmt(pr.err64, ".2g"))[1:]
        lines.append(row + flag)
    return "\n".join(lines)


def plot(path: str, results: list[Result]) -> None:
    """GB/s against row length (axis size), one series per direction and
    output data type, log-scale x; needs matplotlib.

    Raises:
      ImportError: matplotlib is not installed (the ``bench`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, fwd in zip(axes, (True, False)):
        series: dict[str, list[tuple[int, float]]] = {}
        for r in results:
            if r.timing is None or r.problem.is_fwd != fwd:
                continue
            point = (r.problem.axis_size, r.gbps())
            series.setdefault(r.problem.out_dt, []).append(point)
        for dt, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=dt, alpha=0.7)
        ax.set_xscale("log")
        ax.set_xlabel("row length (axis size)")
        ax.set_title("forward" if fwd else "backward")
        ax.grid(True, alpha=0.3)
        if series:
            ax.legend(title="dt")
    axes[0].set_ylabel("GB/s (bytes moved / median time)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


class Progress:
    """A progress bar on stderr: tqdm, else rich, else a plain counter.
    ``write`` prints a line to stdout without tearing the bar."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.n, self.enabled = total, 0, enabled
        self._bar = None
        self._rich = None
        if not enabled:
            return
        try:
            from tqdm import tqdm

            self._bar = tqdm(total=total, file=sys.stderr, unit="prb", leave=False)
            self._tqdm = tqdm
        except ImportError:
            try:
                from rich.progress import Progress as RichProgress

                self._rich = RichProgress(transient=True)
                self._rich.start()
                self._task = self._rich.add_task("problems", total=total)
            except ImportError:
                pass

    def write(self, line: str) -> None:
        if self._bar is not None:
            self._tqdm.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def update(self, desc: str = "") -> None:
        self.n += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_description_str(desc[:40], refresh=False)
            self._bar.update(1)
        elif self._rich is not None:
            self._rich.update(self._task, advance=1, description=desc[:40])
        else:
            sys.stderr.write(f"\r[{self.n}/{self.total}] {desc[:60]:<60}")
            sys.stderr.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        elif self._rich is not None:
            self._rich.stop()
        else:
            sys.stderr.write("\n")
