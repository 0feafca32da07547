"""``python -m funcbwd``: the workbench from a terminal.

One module per subcommand family in this package, each with ``HELP`` (one line),
``configure(parser)`` and ``main(args) -> int``; this file only routes. Bad input prints one
readable line and exits 2 (``--debug`` shows the traceback).

Fast by construction: importing a command module imports no torch (they import the library
inside their functions), and the command line is parsed in two passes, first the global options
and the command's name, then only the chosen command is configured. So ``python -m funcbwd
--help`` never imports torch, and a command pays only for what it uses.

Global options: ``--plugin MODULE`` (repeatable) imports a module of the user's own formulas
before the command runs (:mod:`funcbwd.ops.plugins`; installed distributions can also declare
them in the ``funcbwd.formulas`` entry-point group, loaded when the registry is first used).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable, Sequence

from funcbwd.cli import (bench, coverage, deletable, doctor, findings, graph, matrix, ops,
                         profile, report, trace)
from funcbwd.errors import FuncbwdError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose ``epilog`` may be a callable, computed only when help is printed
    (epilogs that list the registry's ops need torch; parsing must not)."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()


#: subcommand -> its module (HELP, configure, main), in the order ``--help`` lists them
COMMANDS: dict[str, Any] = {
    "ops": ops,
    "matrix": matrix,
    "trace": trace,
    "graph": graph,
    "bench": bench,
    "coverage": coverage,
    "report": report,
    "findings": findings,
    "deletable": deletable,
    "profile": profile,
    "doctor": doctor,
}


def build_parser(commands: Iterable[str] | None = None) -> Parser:
    """The parser; only the subcommands named in ``commands`` (default: all) get their options
    (configuring one may import the library, hence torch)."""
    chosen = set(COMMANDS) if commands is None else set(commands)
    parser = Parser(
        prog="python -m funcbwd",
        description="How should in-place backward formulas be functionalized so vmap(vjp(f)) works?",
        epilog="`python -m funcbwd COMMAND --help` lists a command's options.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE (a module of your own register(OpSpec(...)) calls) "
                             "before the command; repeatable")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        configured = name in chosen
        p = sub.add_parser(name, help=command.HELP, description=command.HELP, add_help=configured,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if configured:
            command.configure(p)
            p.set_defaults(_run=command.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Pass 1: the global options and the command's name (no command configured).
    first, _ = build_parser(commands=()).parse_known_args(argv)
    try:
        if first.plugin:  # before the command is configured: its help lists the plugin's ops
            from funcbwd.ops import plugins

            plugins.load_modules(first.plugin)
        if not first.command:
            build_parser(commands=()).print_help()
            return 2
        # Pass 2: only the chosen command is configured.
        args = build_parser([first.command]).parse_args(argv)
        return int(args._run(args) or 0)
    except FuncbwdError as e:
        if first.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
