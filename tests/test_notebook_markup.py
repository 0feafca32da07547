"""The views' building blocks for outputs that look the same stored as run (fast, no browser):
``funcbwd_lab.views.markup`` (sanitizer-safe tables, Markdown sections with their links resolved)
and the display helpers built on it. tests/test_browser_open.py checks the rendered result in a
real JupyterLab; these check the parts, each with the fault it guards against."""

from __future__ import annotations

import re

import pytest

from funcbwd_lab.views import display, markup

DOC = """# RFC

## Summary

- the pick; see [the objections](#the-objections) and [data][e1].

## The objections

| # | evidence |
|---|---|
| [1][o1] | [coverage][e1] |

### 1. First

Answer.

[o1]: #1-first
[e1]: ../data/coverage.json.gz
"""


def test_a_section_stops_at_the_next_heading_of_its_level_or_at_until():
    assert markup.section(DOC, "## Summary", keep_heading=False).startswith("- the pick")
    objections = markup.section(DOC, "## The objections")
    assert "### 1. First" in objections and "[o1]:" in objections  # to the end: no next ##
    assert "### 1." not in markup.section(DOC, "## The objections", until="### 1. ")
    with pytest.raises(KeyError, match="## Summary"):
        markup.section(DOC, "## Missing")


def test_links_resolve_to_where_they_point_from_the_notebooks_folder():
    part = markup.section(DOC, "## The objections", until="### 1. ", keep_heading=False)
    assert markup.unresolved(part) == ["[1][o1]", "[coverage][e1]"]  # the definitions are elsewhere
    resolved = markup.resolve_links(part, DOC, "docs/rfc.md", "notebooks")
    assert "[1](../docs/rfc.md#1-first)" in resolved and "[coverage](../data/coverage.json.gz)" in resolved
    assert markup.unresolved(resolved) == [] and "[o1]:" not in resolved
    summary = markup.resolve_links(markup.section(DOC, "## Summary"), DOC, "docs/rfc.md", "notebooks")
    assert "[the objections](../docs/rfc.md#the-objections)" in summary  # an inline anchor, rebased
    assert markup.rebase("https://x.org/a", "docs/rfc.md", "notebooks") == "https://x.org/a"


def test_unresolved_markdown_is_refused_not_shown():
    """Mutation: a section shown without its links resolved (issue 36: design_review printed the
    RFC's table with ``[coverage][e1]`` as text) is refused by ``display.markdown``."""
    part = markup.section(DOC, "## The objections", until="### 1. ")
    with pytest.raises(ValueError, match=re.escape("[coverage][e1]")):
        display.markdown(part)
    shown = display.document_part(DOC, "## The objections", until="### 1. ", document="docs/rfc.md")
    assert shown._repr_markdown_() == repr(shown) and "](../data/coverage.json.gz)" in repr(shown)


def test_tables_use_only_inline_styles_and_keep_names_whole():
    html = markup.table(["site", "reason"], [["a_long_site_name#1", "cost above 1.2x"]],
                        nowrap=[0], caption="c")
    assert "<style" not in html and "class=" not in html
    assert "anywhere" not in html  # overflow-wrap:anywhere: dropped by JupyterLab's sanitizer
    first = re.search(r"<td style=\"([^\"]*)\">a_long", html).group(1)
    assert "white-space:nowrap" in first and "text-align:left" in first
    assert markup.breakable("nn.functional.feature_alpha_dropout.without_train") == (
        "nn.<wbr>functional.<wbr>feature_alpha_dropout.<wbr>without_train")
    assert markup.breakable("short.name") == "short.name"


def test_the_graph_diff_keeps_its_colours_and_indentation_stored():
    """issue 36: the explorer's stored graph diff was right-aligned proportional text (its CSS in
    a ``<style>`` the sanitizer drops); now every declaration is inline."""
    from funcbwd_lab.studies.graphs import graphs

    html = display.graph_diff_html(graphs.diff("diag", "plain", "traced"))
    assert "<style" not in html
    assert "background:#fdd" in html and "background:#dfd" in html
    assert "font-family:monospace;white-space:pre-wrap" in html and "text-align:left" in html


def test_the_matrix_legend_names_every_mark_the_table_uses():
    """issue 36: the overview described marks the output did not use and the text legend missed
    ``zero?``; the HTML legend is derived from the cells shown, every mark with its meaning."""
    results = display.matrix_results(["diag"], data="data")
    table = display.matrix_table(results, pick="traced")
    cells = re.findall(r"<td style=\"[^\"]*background:[^\"]*\"[^>]*>([^<]*)</td>", table.html_text)
    marks = {re.sub(r"\u00a0\d+/\d+$", "", c).replace("+fb", "") for c in cells}
    legend = {m for m, _, _ in display.matrix_legend(display.matrix.summarize(results).values())}
    assert "zero?" in marks and marks <= legend, (marks, legend)
    assert "traced (pick)" in table.html_text
