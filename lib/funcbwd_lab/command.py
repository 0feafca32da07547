"""The options every command has, and what they mean: ``--width N`` (text output fits N
columns; default the terminal's width when stdout is a terminal, else 100) and ``--quiet`` (no
progress on stderr). Importing this module imports no torch."""

from __future__ import annotations

import argparse
import sys

from funcbwd_lab.tables import WIDTH, terminal_width

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
                   help=f"fit text to N columns (default: the terminal's, else {WIDTH}; not JSON/CSV)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def width_of(args: argparse.Namespace) -> int:
    """The width text output fits: ``--width``, else the terminal's (stdout's) or 100."""
    return getattr(args, "width", None) or terminal_width(sys.stdout)


def say_of(args: argparse.Namespace, what: str):
    """A function printing one message as ``WHAT: message`` on stderr, fitted to 100 columns
    (silent with ``--quiet``)."""
    def say(message: str) -> None:
        if not getattr(args, "quiet", False):
            from funcbwd_lab.tables import WIDTH, fit

            print(fit(f"{what}: {message}", WIDTH), file=sys.stderr, flush=True)
    return say


def progress_of(args: argparse.Namespace, what: str, total: int | None = None):
    """The command's :class:`funcbwd_lab.progress.Progress` on stderr (silent with ``--quiet``)."""
    from funcbwd_lab.progress import Progress

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
                   help="let the output overwrite a committed file (data/, docs/)")


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


def check_out(path: "str | Path | None", force: bool = False) -> None:
    """Refuse (one line, exit 2) before any work when ``path`` is a file git tracks, unless
    ``force``: a command never silently overwrites committed data or docs. Call it before a
    long run, not after it."""
    from funcbwd.errors import BadInputError

    if path is None or force or not committed(path):
        return
    raise BadInputError(f"{path} is committed; --force overwrites it")


def out_refused(prog: str, path: "str | Path | None", force: bool = False) -> bool:
    """:func:`check_out` for a study's own ``main``: True (and one line on stderr, for an exit 2)
    when ``path`` is committed and ``force`` is not given."""
    import sys

    from funcbwd.errors import BadInputError

    try:
        check_out(path, force)
    except BadInputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return True
    return False


def check_args_out(args: argparse.Namespace, flag: str = "--out") -> None:
    """:func:`check_out` for the command's ``flag`` option and ``--force``."""
    check_out(getattr(args, flag.lstrip("-").replace("-", "_"), None), getattr(args, "force", False))


# ------------------------------------------------------------------------------ torch's warnings
#: vmap's slow-fallback warning, from C++ (``[W... BatchedFallback.cpp:82] Warning: There is a
#: performance drop because we have not yet implemented the batching rule for aten::copy. ...``)
#: or as a Python UserWarning
FALLBACK_OP = r"batching rule for (\w+::\w+(?:\.\w+)?)"


def fallback_summary(counts: "dict[str, int]", width: int = 90) -> str:
    """One line of at most ``width`` columns, in our words: which ops vmap ran through its slow
    per-sample fallback and how often (torch warned that many times), the most frequent first."""
    ranked = [f"{op} {n}x" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    head = "vmap fell back (slow) for "
    for shown in range(len(ranked), 0, -1):
        more = f" and {len(ranked) - shown} more" if shown < len(ranked) else ""
        line = head + ", ".join(ranked[:shown]) + more
        if len(line) <= width:
            return line
    return (head + f"{len(ranked)} ops")[:width]


class summarized_torch_warnings:
    """Within the block, torch's vmap-fallback warnings are counted instead of printed: the C++
    ones (written straight to file descriptor 2, 270 columns each) by pointing descriptor 2 at a
    scratch file while Python's ``sys.stderr`` keeps the real stream (progress still shows), the
    Python ones by :func:`warnings.catch_warnings`. On exit, other C++ output caught is passed on
    unchanged, and ``say`` gets one :func:`fallback_summary` line when any op fell back.
    ``.counts`` holds op -> number of warnings."""

    def __init__(self, say, width: int = 90) -> None:
        self.say, self.width, self.counts = say, width, {}

    def __enter__(self) -> "summarized_torch_warnings":
        import os
        import sys
        import tempfile
        import warnings

        sys.stderr.flush()
        self._scratch = tempfile.TemporaryFile()
        self._saved_fd = os.dup(2)
        os.dup2(self._scratch.fileno(), 2)
        self._old_stderr = sys.stderr
        try:
            python_on_fd2 = sys.stderr.fileno() == 2
        except (AttributeError, OSError, ValueError):  # already redirected (pytest's capsys)
            python_on_fd2 = False
        if python_on_fd2:
            sys.stderr = os.fdopen(os.dup(self._saved_fd), "w", buffering=1,
                                   encoding=getattr(self._old_stderr, "encoding", None) or "utf-8")
        self._warnings = warnings.catch_warnings(record=True)
        self._caught = self._warnings.__enter__()  # the filters stay as they are: a warning
        return self                                  # shown once is recorded once

    def __exit__(self, *exc: object) -> None:
        import os
        import re
        import sys
        import warnings

        self._warnings.__exit__(*exc)
        sys.stderr.flush()
        os.dup2(self._saved_fd, 2)
        os.close(self._saved_fd)
        if sys.stderr is not self._old_stderr:
            sys.stderr.close()
            sys.stderr = self._old_stderr
        self._scratch.seek(0)
        text = self._scratch.read().decode("utf-8", "replace")
        self._scratch.close()
        counts: dict[str, int] = {}
        rest = []
        for line in text.splitlines():
            m = re.search(FALLBACK_OP, line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            elif line.strip():
                rest.append(line)
        for w in self._caught:
            m = re.search(FALLBACK_OP, str(w.message))
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            else:  # not ours to hide: shown as Python would have
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        if rest:
            sys.stderr.write("\n".join(rest) + "\n")
        self.counts = counts
        if counts:
            self.say(fallback_summary(counts, self.width))
