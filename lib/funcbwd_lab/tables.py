"""Plain-text layout for the terminal: the one table formatter of the library, and paragraphs.

Every text table funcbwd prints (the matrix, the bench ratios, copy counts, coverage counts, the
fixes summary) goes through :func:`table`: columns as wide as their widest cell, two spaces
apart, and, when that is wider than ``width``, the widest wrappable columns narrowed with their
cells wrapped *between words* (a word is never broken; a column is never narrower than its
longest word, so a table of long unbreakable cells can still be wider than ``width``: choose
shorter cells for those). :func:`paragraph` and :func:`fit` wrap prose the same way.

``width`` defaults to :data:`WIDTH` (100 columns); :func:`terminal_width` is the width of the
terminal when the output is one (the CLI's ``--width`` default). This module imports nothing of
funcbwd (bottom layer) and only the standard library.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from typing import IO, Sequence

#: the width every text output fits unless told otherwise (a 100-column terminal)
WIDTH = 100
GAP = "  "


def terminal_width(stream: IO | None = None, default: int = WIDTH) -> int:
    """The columns of the terminal ``stream`` (default stdout) writes to, else ``default`` (a
    file or a pipe gets the default width, so saved output does not depend on who ran it)."""
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return default
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken only at spaces (a word longer than
    ``width`` stays whole on its own line); an empty text is one empty line."""
    return textwrap.wrap(text, max(1, width), break_long_words=False,
                         break_on_hyphens=False) or [""]


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a space, ending in ``...`` when cut (a
    first word longer than ``limit`` is cut there)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "..."


def paragraph(text: str, width: int = WIDTH, indent: str = "", hanging: str | None = None) -> str:
    """``text`` wrapped to ``width``: the first line starts with ``indent``, the others with
    ``hanging`` (default: ``indent``)."""
    hanging = indent if hanging is None else hanging
    return textwrap.fill(text, max(1, width), initial_indent=indent, subsequent_indent=hanging,
                         break_long_words=False, break_on_hyphens=False) or indent.rstrip()


def fit(text: str, width: int = WIDTH) -> str:
    """Every line of ``text`` longer than ``width`` wrapped at spaces, continued with its own
    indent plus four spaces; shorter lines are left exactly as they are (for prose and reports
    whose long lines are sentences, not table rows)."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(paragraph(line.strip(), width, indent, indent + "    "))
    return "\n".join(out)


def _widths(natural: list[int], floor: list[int], width: int) -> list[int]:
    """Narrow the widest wrappable columns (never under their longest word) until the table fits
    ``width`` or nothing can be narrowed."""
    widths = list(natural)
    while sum(widths) + len(GAP) * (len(widths) - 1) > width:
        slack = [(w, i) for i, w in enumerate(widths) if w > floor[i]]
        if not slack:
            break
        _, i = max(slack)
        widths[i] -= 1
    return widths


def table(header: Sequence[str], rows: Sequence[Sequence[object]], *, width: int = WIDTH,
          align: str = "", rule: bool = True, indent: str = "") -> str:
    """A text table of ``rows`` under ``header`` fitting ``width`` columns where words allow.

    ``align`` has one letter per column, ``l`` (default) or ``r`` (numbers); ``rule`` draws a
    dashed line under the header; ``indent`` is put before every line (counted in the width).
    Cells are ``str()``-ed; ``None`` is an empty cell. A cell (or header) wider than its column is
    wrapped over several lines at spaces; trailing spaces are stripped."""
    ncol = len(header)
    text = [[("" if c is None else str(c)) for c in row] for row in rows]
    for row in text:
        if len(row) != ncol:
            raise ValueError(f"a row has {len(row)} cells, the header {ncol}: {row!r}")
    cols = [[header[i], *(row[i] for row in text)] for i in range(ncol)]
    natural = [max(len(c) for c in col) for col in cols]
    floor = [max(len(w) for c in col for w in (c.split() or [""])) for col in cols]
    widths = _widths(natural, floor, width - len(indent))
    align = align.ljust(ncol, "l")

    def render(cells: Sequence[str]) -> list[str]:
        parts = [wrap(c, w) for c, w in zip(cells, widths)]
        height = max(len(p) for p in parts)
        lines = []
        for k in range(height):
            pieces = [(p[k] if k < len(p) else "") for p in parts]
            pieces = [s.rjust(w) if a == "r" else s.ljust(w)
                      for s, w, a in zip(pieces, widths, align)]
            lines.append((indent + GAP.join(pieces)).rstrip())
        return lines

    out = render(list(header))
    if rule:
        out.append(indent + GAP.join("-" * w for w in widths))
    for row in text:
        out += render(row)
    return "\n".join(out)


class Rich:
    """An object that shows as HTML or Markdown in Jupyter and as plain text elsewhere."""

    def __init__(self, text: str, html_text: str | None = None, markdown: str | None = None):
        self.text, self.html_text, self.markdown = text, html_text, markdown

    def _repr_html_(self) -> str | None:
        return self.html_text

    def _repr_markdown_(self) -> str | None:
        return None if self.html_text is not None else self.markdown

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__
