"""``python -m funcbwd_lab``: the workbench from a terminal.

One module per subcommand family in this package, each with ``HELP`` (one line),
``configure(parser)`` and ``main(args) -> int``; this file only routes. Every command has
``--width N`` (text output fits N columns; default the terminal's width when stdout is one, else
100) and ``--quiet`` (no progress on stderr), from :mod:`funcbwd_lab.command`. Bad input exits 2 with an error that names the
command (``python -m funcbwd_lab matrix: error: ...``): a bad option shows that command's usage, a bad
name (op, strategy, ...) suggests the closest valid ones and lists them by group (``--debug``
shows the traceback). Text output fits ``--width``; JSON and CSV are left exactly as they are.

Fast by construction: importing a command module imports no torch (they import the library
inside their functions), and the command line is parsed in two passes, first the global options
and the command's name, then only the chosen command is configured. So ``python -m funcbwd_lab
--help`` never imports torch, and a command pays only for what it uses.

Global options: ``--plugin MODULE`` (repeatable) imports a module of the user's own formulas
before the command runs (:mod:`funcbwd_lab.ops.plugins`; installed distributions can also declare
them in the ``funcbwd.formulas`` entry-point group, loaded when the registry is first used).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Iterable, NoReturn, Sequence

from funcbwd_lab.cli import ops, report
from funcbwd_lab.studies.bench import cli as bench
from funcbwd_lab.studies.coverage import cli as coverage
from funcbwd_lab.studies.deletable import cli as deletable
from funcbwd.doctor import cli as doctor
from funcbwd_lab.studies.findings import cli as findings
from funcbwd_lab.studies.graphs import cli as graph
from funcbwd_lab.studies.matrix import cli as matrix
from funcbwd_lab.studies.bench import profile_cli as profile
from funcbwd_lab.studies.trace import cli as trace
from funcbwd_lab.studies.review import cli as rfc
from funcbwd.errors import FuncbwdError, suggest
from funcbwd_lab.tables import WIDTH, fit, terminal_width


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose ``epilog`` may be a callable, computed only when help is printed
    (epilogs that list the registry's ops need torch; parsing must not), and fitted to the
    terminal's width (100 columns when stdout is not a terminal)."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        if self.epilog:
            self.epilog = fit(self.epilog, terminal_width())
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        """Usage, then ``PROG: error: MESSAGE`` fitted to 100 columns; an invalid choice (a
        misspelt command) also gets the closest valid ones."""
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            close = suggest(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
            if close:
                message = message.replace(m.group(0), f"invalid choice: '{m.group(1)}'; did you "
                                          f"mean {' or '.join(close)}? (choose from {m.group(2)})")
        self.print_usage(sys.stderr)
        self.exit(2, fit(f"{self.prog}: error: {message}", WIDTH) + "\n")


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
    "rfc": rfc,
    "profile": profile,
    "doctor": doctor,
}


def build_parser(commands: Iterable[str] | None = None) -> Parser:
    """The parser; only the subcommands named in ``commands`` (default: all) get their options
    (configuring one may import the library, hence torch)."""
    chosen = set(COMMANDS) if commands is None else set(commands)
    parser = Parser(
        prog="python -m funcbwd_lab",
        description="How should in-place backward formulas be functionalized so vmap(vjp(f)) works?",
        epilog="`python -m funcbwd_lab COMMAND --help` lists a command's options.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE (a module of your own register(OpSpec(...)) calls) "
                             "before the command; repeatable")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = {}  # name -> its subparser (errors are reported by the command's own parser)
    for name, command in COMMANDS.items():
        configured = name in chosen
        p = sub.add_parser(name, help=command.HELP, description=command.HELP, add_help=configured,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.commands[name] = p
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
            from funcbwd_lab.ops import plugins

            plugins.load_modules(first.plugin)
        if not first.command:
            build_parser(commands=()).print_help()
            return 2
        # Pass 2: only the chosen command is configured. What it does not know is reported by
        # the command's own parser (its usage, its name), not by the top-level one.
        parser = build_parser([first.command])
        args, extra = parser.parse_known_args(argv)
        if extra:
            parser.commands[first.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return int(args._run(args) or 0)
    except FuncbwdError as e:
        if first.debug:
            raise
        where = f"python -m funcbwd_lab {first.command}" if first.command else "python -m funcbwd_lab"
        print(fit(f"{where}: error: {e}", WIDTH), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
