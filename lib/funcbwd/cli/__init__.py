"""``python -m funcbwd``: the workbench from a terminal.

Each subcommand lives in the module that owns its concern and exposes ``configure(parser)`` and
``main(args) -> int``; this file only routes. Bad input prints one readable line and exits 2
(``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from funcbwd.errors import FuncbwdError

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "ops": ("funcbwd.cli.commands", "list the op catalog (name, legacy source, samples)"),
    "matrix": ("funcbwd.cli.commands", "run the op x scenario x strategy matrix"),
    "trace": ("funcbwd.observe.trace", "dispatch-key trace of one op x strategy x scenario"),
    "graph": ("funcbwd.observe.graphs", "FX graph of a formula and a diff between two forms"),
    "bench": ("funcbwd.measure.bench", "overhead and copies: batched backward timings as ratios"),
    "coverage": ("funcbwd.measure.coverage", "vmap(vjp) sweep over torch's OpInfo database"),
    "report": ("funcbwd.views.report", "one self-contained HTML report (no Jupyter, no network)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m funcbwd",
        description="How should in-place backward formulas be functionalized so vmap(vjp(f)) works?",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (modname, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name != modname:
                raise
            continue
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        getattr(module, f"configure_{name}", getattr(module, "configure", None))(p)
        p.set_defaults(_run=getattr(module, f"main_{name}", getattr(module, "main", None)))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except FuncbwdError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
