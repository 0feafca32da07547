"""``python -m funcbwd doctor MODULE:FUNC --args "..."``: the tool's one command. The workbench's
commands (matrix, bench, coverage, rfc, report, ...) are ``python -m funcbwd_lab``'s."""

import argparse
import sys
import textwrap

from funcbwd.errors import FuncbwdError


def main(argv: list[str] | None = None) -> int:
    from funcbwd.doctor import cli

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "doctor":
        what = repr(argv[0]) if argv else "nothing"
        print("usage: python -m funcbwd doctor MODULE:FUNC --args \"...\"\n"
              f"python -m funcbwd: error: the tool's one command is doctor, got {what}; the "
              "workbench's commands are python -m funcbwd_lab's", file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(prog="python -m funcbwd doctor", description=cli.HELP)
    cli.configure(p)
    args = p.parse_args(argv[1:])
    try:
        return cli.main(args)
    except FuncbwdError as e:  # one message, wrapped to 100 columns, continuations indented
        lines = []
        for i, line in enumerate(f"python -m funcbwd doctor: error: {e}".splitlines()):
            lines += textwrap.wrap(line, 100, subsequent_indent="    ") if i == 0 else [line]
        print("\n".join(lines), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
