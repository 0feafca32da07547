"""HTML and Markdown for outputs that look the same stored as run: the views' building blocks.

A notebook opened without running it (a fresh clone in JupyterLab, GitHub, nbviewer) shows its
stored HTML through a sanitizer: ``<style>`` elements are dropped (so class-based CSS matches
nothing), and so is every style declaration the sanitizer does not know, e.g.
``overflow-wrap:anywhere``. Run, the same output is trusted and shown whole. So every table
here is built from inline styles of a small vocabulary the sanitizer keeps (padding, border,
background, text-align, vertical-align, white-space, font-size, font-weight, width),
left-aligned (JupyterLab right-aligns table cells), identifiers never broken (``white-space:
nowrap`` on the columns that hold them, prose wrapping at spaces in the others).
tests/test_browser_open.py runs the page's own sanitizer over every stored output (with the
detectors of tests/test_browser_layout.py).

Markdown shown in a notebook renders as Markdown; a section taken out of a longer document
(:func:`section`) has its reference links (``[text][ref]``, defined at the document's end)
resolved into inline links that point where they pointed from the document's own folder
(:func:`resolve_links`), so none is left as text.
"""

from __future__ import annotations

import html
import posixpath
import re
from typing import Mapping, Sequence

#: one table cell (head or body): the declarations every table here shares (rules between rows
#: are the rows' own, :data:`ROW`, so a cell's style stays short: outputs have a size budget)
CELL = "padding:1px 6px;text-align:left;vertical-align:top"
HEAD = CELL + ";background:#eee;font-weight:600"
ROW = "border-bottom:1px solid #ddd"
NOWRAP = "white-space:nowrap"
TABLE = "border-collapse:collapse;font-size:12px"
CAPTION = "text-align:left;font-weight:600;padding:2px 0"


def inline(text: str) -> str:
    """``text`` escaped, with Markdown's inline code (backticks) as ``<code>``."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


#: where a long name may break across lines: after these separators, never inside a word
BREAK_AFTER = re.compile(r"(::|[./(,=])(?=\w)")


def breakable(text: str, longer_than: int = 16) -> str:
    """``text`` escaped, each token longer than ``longer_than`` allowed to break after its dots,
    slashes, ``::``, opening brackets, commas and ``=`` (``<wbr>``): a long op name or URL wraps
    in a narrow column without a word cut in two."""
    return " ".join(BREAK_AFTER.sub(r"\1<wbr>", html.escape(t)) if len(t) > longer_than else html.escape(t)
                    for t in text.split(" "))


def details(summary: str, body: str, open_: bool = False) -> str:
    """HTML ``body`` under a ``<details>`` with ``summary`` (HTML) visible, open or closed."""
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{body}</details>"


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, caption: str = "",
          nowrap: Sequence[int] = (), cell_styles: Sequence[Sequence[str]] | None = None,
          titles: Sequence[Sequence[str]] | None = None, head_styles: Sequence[str] | None = None,
          escaped: bool = False, style: str = "", groups: Mapping[int, str] | None = None,
          compact: bool = False) -> str:
    """An HTML table of ``rows`` under ``columns``: cells escaped (``escaped``: already HTML),
    the columns ``nowrap`` (indices) kept on one line, ``cell_styles`` / ``titles`` per cell
    (extra declarations, hover text), ``head_styles`` per column header, ``style`` the table's
    own extra declarations, ``groups`` a heading row (full width) before the row of each index;
    ``compact``: 11 px text and narrow padding (a wide grid of short marks)."""
    esc = (lambda s: s) if escaped else html.escape
    cell, head_cell = (CELL, HEAD) if not compact else (CELL.replace("1px 6px", "1px 3px"),
                                                        HEAD.replace("1px 6px", "1px 3px"))
    style = ";".join(filter(None, ["font-size:11px" if compact else "", style]))
    head = "".join(f'<th style="{head_cell};{NOWRAP}{";" + head_styles[i] if head_styles else ""}">'
                   f"{esc(c)}</th>" for i, c in enumerate(columns))
    body = []
    for r, row in enumerate(rows):
        if groups and r in groups:
            body.append(f'<tr style="{ROW}"><td colspan="{len(columns)}" style="{cell};font-weight:600;'
                        f'background:#f6f6f6">{esc(groups[r])}</td></tr>')
        tds = []
        for i, v in enumerate(row):
            css = cell + (";" + NOWRAP if i in nowrap else "")
            if cell_styles and cell_styles[r][i]:
                css += ";" + cell_styles[r][i]
            title = f' title="{html.escape(titles[r][i])}"' if titles and titles[r][i] else ""
            tds.append(f'<td style="{css}"{title}>{esc(v)}</td>')
        body.append(f'<tr style="{ROW}">' + "".join(tds) + "</tr>")
    cap = f'<caption style="{CAPTION}">{html.escape(caption)}</caption>' if caption else ""
    return (f'<table style="{TABLE}{";" + style if style else ""}">{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def legend(items: Sequence[tuple[str, str | None, str]], title: str = "",
           text_colors: Mapping[str, str] | None = None) -> str:
    """Marks and their meanings, one a line: ``(mark, background colour or None, meaning)``; a
    mark in ``text_colors`` is written in that colour (white on a dark background)."""
    rows = []
    for mark, color, meaning in items:
        swatch = f";background:{color}" if color else ""
        fg = f";color:{text_colors[mark]}" if text_colors and mark in text_colors else ""
        rows.append(f'<div style="margin:1px 0"><code style="{NOWRAP}{swatch}{fg};padding:0 4px">'
                    f"{html.escape(mark)}</code> {inline(meaning)}</div>")
    head = f'<div style="font-weight:600;margin-top:4px">{html.escape(title)}</div>' if title else ""
    return f'<div style="font-size:12px;margin:4px 0">{head}{"".join(rows)}</div>'


# ------------------------------------------------------------------------------ Markdown
_DEFINITION = re.compile(r"^\[([^\]]+)\]:\s*(\S+)\s*$", re.M)
_REFERENCE = re.compile(r"\[([^\[\]]+)\]\[([^\[\]]+)\]")
_INLINE = re.compile(r"\]\(([^()\s]+)\)")


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
    ``definitions`` (``[ref]: target`` lines) made an inline link, and every link's target
    rebased (:func:`rebase`) from ``document`` to folder ``here``; the definition lines in
    ``text`` itself are dropped."""
    targets = {ref: rebase(t, document, here) for ref, t in _DEFINITION.findall(definitions)}

    def link(m: re.Match) -> str:
        target = targets.get(m.group(2))
        return f"[{m.group(1)}]({target})" if target else m.group(0)

    body = _INLINE.sub(lambda m: f"]({rebase(m.group(1), document, here)})", _DEFINITION.sub("", text))
    return re.sub(r"\n{3,}", "\n\n", _REFERENCE.sub(link, body)).strip() + "\n"


def section(text: str, heading: str, *, until: str | None = None, keep_heading: bool = True) -> str:
    """The part of Markdown ``text`` from the line ``heading`` (e.g. ``## What it costs``) to the
    next heading of the same or a higher level (the end, when none), or to the first line that
    starts with ``until``; without its heading line with ``keep_heading=False`` (under a heading
    of the notebook's own)."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise KeyError(f"no heading {heading!r} in the document; its headings: "
                       + ", ".join(ln for ln in lines if ln.startswith("#"))) from None
    level = len(heading) - len(heading.lstrip("#"))
    end = next((i for i in range(start + 1, len(lines))
                if (until and lines[i].startswith(until)) or re.match(rf"^#{{1,{level}}} ", lines[i])),
               len(lines))
    return "\n".join(lines[start + (0 if keep_heading else 1):end]).strip() + "\n"


def collapsed(summary: str, markdown: str) -> str:
    """Markdown shown under a closed ``<details>`` (its ``summary`` visible): renderers render the
    Markdown inside (blank lines around it), sanitizers keep the element."""
    return f"<details><summary>{html.escape(summary)}</summary>\n\n{markdown.strip()}\n\n</details>\n"


def unresolved(text: str) -> list[str]:
    """The reference links of Markdown ``text`` that no definition in it resolves (shown as
    text by any renderer)."""
    defined = {ref for ref, _ in _DEFINITION.findall(text)}
    return [m.group(0) for m in _REFERENCE.finditer(text) if m.group(2) not in defined]
