"""Command line: ``logsoftmax SUBCOMMAND ...`` (also ``python -m logsoftmax``).

Thin dispatch to one module per subcommand; each module exposes
``main(argv: list[str]) -> int`` (exit status) and is imported only when its
subcommand runs. Subcommands do no math of their own.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "bench": ("logsoftmax.cli.bench", "verify and benchmark problems (benchdnn-style driver)"),
    "graph": ("logsoftmax.cli.graph_run", "oneDNN JSON graph cases: `graph run CASE.json`"),
    "dask-run": ("logsoftmax.cli.dask_run", "log-softmax of a Zarr array with Dask"),
}


def _usage() -> str:
    lines = ["usage: logsoftmax COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "`logsoftmax COMMAND --help` describes each command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] not in SUBCOMMANDS:
        print(f"logsoftmax: unknown command {argv[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)
