"""The terminal layer: the one text-table formatter (:mod:`funcbwd_lab.tables`), the one progress
reporter (:mod:`funcbwd_lab.progress`) and unknown names' errors (:class:`funcbwd.errors.
UnknownNameError`). Pure Python, no torch: fast."""

from __future__ import annotations

import io

import pytest

from funcbwd_lab import tables
from funcbwd.errors import UnknownNameError, check_name, listing, parse_names, suggest
from funcbwd_lab.progress import Progress

WORDS = "the quick brown fox jumps over the lazy dog".split()


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


# ------------------------------------------------------------------------------ tables
def test_a_table_that_fits_is_laid_out_as_is():
    t = tables.table(["op", "n"], [["diag", 1], ["index_select", 22]], align="lr")
    assert t.splitlines() == ["op             n", "------------  --", "diag           1",
                              "index_select  22"]


def test_a_wide_table_is_wrapped_between_words_to_the_width():
    rows = [[f"row{i}", " ".join(WORDS * 3), " ".join(reversed(WORDS)) * 2] for i in range(3)]
    natural = tables.table(["name", "long text", "other text"], rows, width=10_000)
    assert _widest(natural) > 200  # the mutation: without fitting, it is far too wide
    for width in (100, 60, 40):
        t = tables.table(["name", "long text", "other text"], rows, width=width)
        assert _widest(t) <= width, t
        words = {w for line in t.splitlines() for w in line.split()}
        assert words >= set(WORDS), "a word was broken"
        assert "-" not in "".join(words - set(WORDS) - {"row0", "row1", "row2", "name", "long",
                                                        "text", "other"}).strip("-"), t


def test_a_column_is_never_narrower_than_its_longest_word():
    t = tables.table(["a", "b"], [["x" * 30, "y" * 30]], width=40)
    assert "x" * 30 in t and "y" * 30 in t  # wider than 40, but whole


def test_rows_must_match_the_header():
    with pytest.raises(ValueError, match="2 cells, the header 3"):
        tables.table(["a", "b", "c"], [["1", "2"]])


def test_fit_wraps_long_lines_only_and_keeps_their_indent():
    text = "short\n    " + " ".join(WORDS * 4) + "\nend"
    out = tables.fit(text, 50)
    lines = out.splitlines()
    assert lines[0] == "short" and lines[-1] == "end" and _widest(out) <= 50
    assert all(ln.startswith("    ") for ln in lines[1:-1])
    assert tables.fit(text, 10_000) == text


def test_shorten_cuts_at_a_space():
    assert tables.shorten("alpha beta gamma delta", 14) == "alpha beta..."
    assert tables.shorten("alpha beta", 40) == "alpha beta"


def test_terminal_width_is_the_default_off_a_terminal():
    assert tables.terminal_width(io.StringIO()) == tables.WIDTH == 100


# ------------------------------------------------------------------------------ progress
def test_plain_progress_prints_lines_throttled_and_the_last_one():
    out = io.StringIO()
    p = Progress("matrix", enabled=True, stream=out, tty=False, interval=3600)
    for item in p.track(["diag", "sort", "topk"], label=lambda s: f"op {s}"):
        pass
    p("copies done")
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("matrix 0/3 0% ")  # the start, then nothing until the end
    assert lines[1].startswith("matrix 3/3 100% ") and lines[1].endswith("op topk")
    assert lines[2].startswith("matrix ") and lines[2].endswith(" s: copies done")
    assert len(lines) == 3 and "\r" not in out.getvalue()


def test_terminal_progress_rewrites_one_line_and_ends_it():
    out = io.StringIO()
    with Progress("bench", 2, stream=out, tty=True) as p:
        p.doing("diag small")
        p.advance(failed=True)
        p("phase one")
        p.advance()
    text = out.getvalue()
    assert text.count("\n") == 2  # the message line, and the end of the status line
    assert "\rbench 0/2 0% 0 s  diag small\x1b[K" in text
    assert "bench 1/2 50%, 1 failed" in text and text.endswith("\n")
    assert "s: phase one\n" in text


def test_disabled_progress_writes_nothing():
    out = io.StringIO()
    with Progress("matrix", 5, enabled=False, stream=out, tty=True) as p:
        p.start(5)
        p.doing("x")
        p.advance()
        p("message")
    off = Progress.off()
    off.start(3), off.advance(), off("x")
    assert out.getvalue() == ""


def test_long_messages_are_wrapped_to_100_columns():
    out = io.StringIO()
    Progress("deletable", stream=out, tty=False)(" ".join(WORDS * 10))
    assert _widest(out.getvalue()) <= 100 and out.getvalue().count("\n") > 1


# ------------------------------------------------------------------------------ unknown names
GROUPS = {"test": ["diag", "index_select", "topk"], "extended": ["diagonal", "diag_embed", "take"],
          "live": [f"live_site_backward_{i}" for i in range(43)]}


def test_a_misspelt_name_gets_the_closest_and_the_groups():
    with pytest.raises(UnknownNameError) as e:
        check_name("op", "dig", GROUPS)
    err = e.value
    assert err.kind == "op" and err.name == "dig" and "live_site_backward_7" in err.valid
    assert err.suggestions[0] == "diag" and err.groups["test"] == sorted(GROUPS["test"])
    lines = str(err).splitlines()
    assert lines[0] == "unknown op 'dig'; did you mean diag?"
    assert lines[1] == "valid ops, by group:" and lines[2].startswith("  test (3): diag, ")
    assert any(ln.startswith("  live (43): ") for ln in lines)
    assert "... and 37 more" in str(err) and len(str(err)) < 600 and _widest(str(err)) <= 100


def test_an_ungrouped_name_lists_flat_and_a_long_list_is_shortened():
    with pytest.raises(UnknownNameError) as e:
        parse_names("strategy", "plain,trcaed", ["plain", "traced", "hooks"])
    assert str(e.value) == ("unknown strategy 'trcaed'; did you mean traced?\n"
                            "valid strategies: hooks, plain, traced")
    many = [f"op{i:03d}" for i in range(600)] + ["atan2"]
    text = listing("valid OpInfo ops", {"": sorted(many)})
    assert text.startswith("valid OpInfo ops (601): atan2, op000,") and "and 595 more" in text
    assert suggest("atan3", many) == ["atan2"] and suggest(3, many) == []


def test_no_suggestion_when_nothing_is_close():
    with pytest.raises(UnknownNameError) as e:
        check_name("form", "zzz", ["plain", "traced"])
    assert e.value.suggestions == [] and "did you mean" not in str(e.value)
