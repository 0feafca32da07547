"""The options every command has, and what they mean: ``--width N`` (text output fits N
columns; default the terminal's width when stdout is a terminal, else 100) and ``--quiet`` (no
progress on stderr). Importing this module imports no torch."""

from __future__ import annotations

import argparse
import sys

from funcbwd.tables import WIDTH, terminal_width

#: the narrowest ``--width`` accepted (a table column needs its longest word)
MIN_WIDTH = 40


def _width(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of columns, got {text!r}") from None
    if n < MIN_WIDTH:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_WIDTH} columns, got {n}")
    return n


def add_common(p: argparse.ArgumentParser) -> None:
    """Add ``--width`` and ``--quiet`` to a command's parser."""
    p.add_argument("--width", type=_width, default=None, metavar="N",
                   help=f"fit text output to N columns (default: the terminal's width when stdout "
                        f"is a terminal, else {WIDTH}); JSON and CSV are not affected")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def width_of(args: argparse.Namespace) -> int:
    """The width text output fits: ``--width``, else the terminal's (stdout's) or 100."""
    return getattr(args, "width", None) or terminal_width(sys.stdout)


def progress_of(args: argparse.Namespace, what: str, total: int | None = None):
    """The command's :class:`funcbwd.progress.Progress` on stderr (silent with ``--quiet``)."""
    from funcbwd.progress import Progress

    return Progress(what, total, enabled=not getattr(args, "quiet", False))


#: environment variable naming the directory of saved results (``--data``'s default)
DATA_ENV = "FUNCBWD_DATA"


def default_data_dir() -> "Path":
    """``$FUNCBWD_DATA`` if set, else ``./data`` of the current directory."""
    import os
    from pathlib import Path

    return Path(os.environ.get(DATA_ENV) or Path.cwd() / "data")


def data_dir_of(args: argparse.Namespace) -> "Path":
    """The directory of saved results a command reads: ``--data DIR``, else
    :func:`default_data_dir`; one that does not exist is an error (exit 2), never a page or a
    document without its sections."""
    from pathlib import Path

    from funcbwd.errors import BadInputError

    data_dir = Path(args.data) if getattr(args, "data", None) else default_data_dir()
    if not data_dir.is_dir():
        raise BadInputError(f"no data directory {data_dir}; pass --data DIR (e.g. data/)")
    return data_dir


# ------------------------------------------------------------------------------ outputs
def add_out(p: argparse.ArgumentParser, help: str, *, flag: str = "--out",
            default: str | None = None, metavar: str = "FILE") -> None:
    """Add ``flag`` (a file to write) and ``--force`` (allow it to overwrite a committed file)."""
    p.add_argument(flag, default=default, metavar=metavar, help=help)
    add_force(p)


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="let the output overwrite a file git tracks (regenerating committed "
                        "data/ or docs/)")


def committed(path: "str | Path") -> bool:
    """Does git track ``path`` (a committed data or doc file)? False outside a git work tree or
    without git."""
    import subprocess
    from pathlib import Path

    path = Path(path).absolute()
    parent = path.parent
    if not parent.is_dir():  # a new directory: nothing in it is tracked
        return False
    try:
        p = subprocess.run(["git", "ls-files", "--error-unmatch", "--", path.name], cwd=parent,
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0


def check_out(path: "str | Path | None", force: bool = False, flag: str = "--out") -> None:
    """Refuse (one line, exit 2) before any work when ``path`` is a file git tracks, unless
    ``force``: a command never silently overwrites committed data or docs. Call it before a
    long run, not after it."""
    from funcbwd.errors import BadInputError

    if path is None or force or not committed(path):
        return
    raise BadInputError(f"{path} is committed; --force overwrites it")


def check_args_out(args: argparse.Namespace, flag: str = "--out") -> None:
    """:func:`check_out` for the command's ``flag`` option and ``--force``."""
    check_out(getattr(args, flag.lstrip("-").replace("-", "_"), None),
              getattr(args, "force", False), flag)
