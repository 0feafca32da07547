"""HTML and Markdown for outputs that look the same stored as run: the views' building blocks.

A notebook opened without running it (a fresh clone in JupyterLab, GitHub, nbviewer) shows its
stored HTML through a sanitizer: ``<style>`` elements are dropped (so class-based CSS matches
nothing), and so is every style declaration the sanitizer does not know, e.g.
``overflow-wrap:anywhere``. Run, the same output is trusted and shown whole. So every table
here is built from inline styles of a small vocabulary the sanitizer keeps (padding, border,
background, text-align, vertical-align, white-space, font-size, font-weight, width),
left-aligned (JupyterLab right-aligns table cells), identifiers never broken (``white-space:
nowrap`` on the columns that hold them, prose wrapping at spaces in the others).
tests/test_browser_layout.py runs the page's own sanitizer over every stored output.

Markdown shown in a notebook renders as Markdown; a section taken out of a longer document
(:func:`section`) has its reference links (``[text][ref]``, defined at the document's end)
resolved into inline links that point where they pointed from the document's own folder
(:func:`resolve_links`), so none is left as text.
"""

from __future__ import annotations

import html
import posixpath
import re
from typing import Sequence

#: one table cell (head or body): the declarations every table here shares
CELL = "padding:1px 6px;border:1px solid #ccc;text-align:left;vertical-align:top"
HEAD = CELL + ";background:#eee;font-weight:600"
NOWRAP = "white-space:nowrap"
TABLE = "border-collapse:collapse;font-size:12px"
CAPTION = "text-align:left;font-weight:600;padding:2px 0"


def inline(text: str) -> str:
    """``text`` escaped, with Markdown's inline code (backticks) as ``<code>``."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, caption: str = "",
          nowrap: Sequence[int] = (), cell_styles: Sequence[Sequence[str]] | None = None,
          titles: Sequence[Sequence[str]] | None = None, head_styles: Sequence[str] | None = None,
          escaped: bool = False, style: str = "") -> str:
    """An HTML table of ``rows`` under ``columns``: cells escaped (``escaped``: already HTML),
    the columns ``nowrap`` (indices) kept on one line, ``cell_styles`` / ``titles`` per cell
    (extra declarations, hover text), ``head_styles`` per column header, ``style`` the table's
    own extra declarations."""
    esc = (lambda s: s) if escaped else html.escape
    head = "".join(f'<th style="{HEAD};{NOWRAP}{";" + head_styles[i] if head_styles else ""}">'
                   f"{esc(c)}</th>" for i, c in enumerate(columns))
    body = []
    for r, row in enumerate(rows):
        tds = []
        for i, v in enumerate(row):
            css = CELL + (";" + NOWRAP if i in nowrap else "")
            if cell_styles and cell_styles[r][i]:
                css += ";" + cell_styles[r][i]
            title = f' title="{html.escape(titles[r][i])}"' if titles and titles[r][i] else ""
            tds.append(f'<td style="{css}"{title}>{esc(v)}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    cap = f'<caption style="{CAPTION}">{html.escape(caption)}</caption>' if caption else ""
    return (f'<table style="{TABLE}{";" + style if style else ""}">{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def legend(items: Sequence[tuple[str, str | None, str]], title: str = "") -> str:
    """Marks and their meanings, one a line: ``(mark, background colour or None, meaning)``."""
    rows = []
    for mark, color, meaning in items:
        swatch = f";background:{color}" if color else ""
        rows.append(f'<div style="margin:1px 0"><code style="{NOWRAP}{swatch};padding:0 4px">'
                    f"{html.escape(mark)}</code> {inline(meaning)}</div>")
    head = f'<div style="font-weight:600;margin-top:4px">{html.escape(title)}</div>' if title else ""
    return f'<div style="font-size:12px;margin:4px 0">{head}{"".join(rows)}</div>'


# ------------------------------------------------------------------------------ Markdown
_DEFINITION = re.compile(r"^\[([^\]]+)\]:\s*(\S+)\s*$", re.M)
_REFERENCE = re.compile(r"\[([^\[\]]+)\]\[([^\[\]]+)\]")


def rebase(target: str, document: str, here: str) -> str:
    """A link ``target`` written in ``document`` (a path from the repository's root, e.g.
    ``docs/rfc.md``) as it must be written in a file of folder ``here`` (e.g. ``notebooks``):
    an anchor of the document's own becomes ``document#anchor``; a URL stays as it is."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return target
    path, _, anchor = target.partition("#")
    full = posixpath.normpath(posixpath.join(posixpath.dirname(document), path)) if path else document
    return posixpath.relpath(full, here) + (f"#{anchor}" if anchor else "")


def resolve_links(text: str, definitions: str, document: str, here: str) -> str:
    """``text`` with every reference link ``[label][ref]`` whose ``ref`` is defined in
    ``definitions`` (``[ref]: target`` lines) made an inline link, its target rebased
    (:func:`rebase`); the definition lines in ``text`` itself are dropped."""
    targets = {ref: rebase(t, document, here) for ref, t in _DEFINITION.findall(definitions)}

    def link(m: re.Match) -> str:
        target = targets.get(m.group(2))
        return f"[{m.group(1)}]({target})" if target else m.group(0)

    body = _DEFINITION.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", _REFERENCE.sub(link, body)).strip() + "\n"


def section(text: str, heading: str) -> str:
    """The part of Markdown ``text`` from the line ``heading`` (e.g. ``## What it costs``) to the
    next heading of the same or a higher level (the end, when none)."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise KeyError(f"no heading {heading!r} in the document; its headings: "
                       + ", ".join(ln for ln in lines if ln.startswith("#"))) from None
    level = len(heading) - len(heading.lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if re.match(rf"^#{{1,{level}}} ", lines[i])), len(lines))
    return "\n".join(lines[start:end]).strip() + "\n"


def unresolved(text: str) -> list[str]:
    """The reference links of Markdown ``text`` that no definition in it resolves (shown as
    text by any renderer)."""
    defined = {ref for ref, _ in _DEFINITION.findall(text)}
    return [m.group(0) for m in _REFERENCE.finditer(text) if m.group(2) not in defined]
