"""Every generated block of the README and of the docs pages it links to is what its generator
renders from the saved data, in the home ``funcbwd_lab.views.readme.HOMES`` names; the saved matrix is
what a fresh run computes (so neither can drift, and the matrix JSON is deterministic across runs).
The README's first screen holds the decision and the two commands, and its two example code blocks
run as they say."""

from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

import pytest
import torch

from funcbwd_lab.studies.matrix import records
from funcbwd_lab.views import readme

# The repository's files (the library renders; paths are the repository's, tools/update_readme.py).
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MATRIX_FILE = ROOT / "data" / readme.MATRIX_FILE_NAME
BENCH_FILE = ROOT / "data" / readme.BENCH_FILE_NAME
MARKER = re.compile(r"<!-- ([\w-]+):(begin|end) -->")


def block(name: str) -> str:
    """Block ``name`` as its home file has it."""
    return readme.block((ROOT / readme.HOMES[name]).read_text(), name, where=readme.HOMES[name])


# ------------------------------------------------------------------------------ where the blocks live
def test_every_block_is_once_in_its_home_and_the_readme_keeps_no_stale_copy():
    for name, home in readme.HOMES.items():
        text = (ROOT / home).read_text()
        assert text.count(f"<!-- {name}:begin -->") == text.count(f"<!-- {name}:end -->") == 1, (name, home)
    in_readme = {m.group(1) for m in MARKER.finditer(README.read_text())}
    assert in_readme == {n for n, h in readme.HOMES.items() if h == "README.md"}, (
        "README.md has blocks that live elsewhere (or lost its own): " + str(sorted(in_readme)))


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "tools" / "update_readme.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_tool_renders_every_block_in_its_home(tmp_path, monkeypatch):
    """tools/update_readme.py has a renderer for every block of HOMES (so a block moved to a new
    home is regenerated there, never left stale) and writes each block into its home only."""
    tool = _tool()
    assert set(tool.RENDERERS) == set(readme.HOMES)
    for home in set(readme.HOMES.values()):  # a copy of the homes, with every block emptied
        text = (ROOT / home).read_text()
        for name in [n for n, h in readme.HOMES.items() if h == home]:
            text = readme.replace_block(text, name, "")
        (tmp_path / home).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / home).write_text(text)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    written = tool.write({name: f"body of {name}" for name in readme.HOMES})
    assert sorted(written) == sorted(set(readme.HOMES.values()))
    for name, home in readme.HOMES.items():
        assert readme.block((tmp_path / home).read_text(), name) == f"body of {name}"
    misplaced = dict(readme.HOMES, findings="docs/decision.md")  # mutation: a block sent elsewhere
    monkeypatch.setattr(readme, "HOMES", misplaced)
    with pytest.raises(ValueError, match="docs/decision.md has no 'findings' block"):
        tool.write({"findings": "x"})


def test_readme_strategies_table_is_generated_from_the_saved_matrix():
    assert block("strategies") == readme.strategies_markdown(records.load(MATRIX_FILE))


def test_saved_matrix_equals_a_fresh_run(test_ops_matrix):
    """``test_ops_matrix`` (tests/conftest.py) is the session's one fresh run of the matrix."""
    fresh = records.stable_records(test_ops_matrix)
    ran = {r["strategy"] for r in fresh}  # the slow strategies' saved cells: tests/test_expectations.py
    saved = [r for r in json.loads(MATRIX_FILE.read_text()) if r["strategy"] in ran]
    assert len(saved) == len(fresh)
    diffs = [(s["op"], s["sample"], s["scenario"], s["strategy"], s["status"], f["status"])
             for s, f in zip(saved, fresh) if s != f]
    assert not diffs, f"{len(diffs)} records differ; regenerate with tools/update_readme.py: {diffs[:5]}"


def test_readme_bench_headline_is_generated_from_the_saved_run():
    from funcbwd_lab.studies.bench import results as bench_results

    assert block("bench") == readme.bench_markdown(bench_results.load(BENCH_FILE))


EVIDENCE_FILE = ROOT / "data" / readme.EVIDENCE_FILE_NAME


def test_readme_decision_block_is_generated_from_the_saved_evidence():
    from funcbwd_lab.studies.review import review

    assert block("decision") == readme.decision_markdown(review.load_evidence(EVIDENCE_FILE))


def test_readme_decision_summary_is_generated_from_the_saved_evidence():
    from funcbwd_lab.studies.review import review

    d = review.decision(review.load_evidence(EVIDENCE_FILE))
    summary = block("decision-summary")
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import text as bench_text

    bench = bench_results.load(BENCH_FILE)
    assert summary == readme.decision_summary_markdown(review.load_evidence(EVIDENCE_FILE), bench)
    assert summary.startswith(f"**Decision: `{d.pick}`**")
    # the headline ratio's basis, then the same run's target status beside it (issue 31)
    flat = " ".join(summary.split())
    status = bench_text.targets_summary(bench)
    assert "bench targets missed" in status and f"batch >= 64; {status})" in flat
    third = readme.COST_BASIS.sub(lambda m: f"{m.group(0)[:-1]}; {status})", d.sentences[2])
    assert third != d.sentences[2] and flat.count(" ".join(third.split())) == 1  # whole


def test_saved_evidence_counts_are_the_saved_matrix_counts():
    """The evidence's counts (what the decision weighs) are those of the saved matrix, which
    test_saved_matrix_equals_a_fresh_run compares with a fresh run; a stale evidence file fails."""
    from funcbwd_lab.studies.review import review

    evidence = review.load_evidence(EVIDENCE_FILE)
    results = records.load(MATRIX_FILE)
    assert evidence.basis == review.basis(results) and evidence.basis["samples"] == "all"
    counts = review.matrix_evidence(results)
    keys = ("fixes", "plain_failures", "wrong", "no_fallback", "applicable", "passed", "without_mechanism")
    diffs = [f"{st}.{k}: evidence {evidence.strategies[st][k]} vs matrix {counts[st][k]}"
             for st in counts for k in keys if evidence.strategies[st][k] != counts[st][k]]
    assert not diffs, "regenerate with python tools/update_readme.py: " + "; ".join(diffs)
    assert evidence.unsolved == review.unsolved_cells(results, evidence.candidates)


def test_notebooks_show_the_decision_of_the_saved_evidence():
    """00_overview and design_review open with the decision block; their stored outputs name the
    pick the saved evidence gives (the README's)."""
    import re

    from funcbwd_lab.studies.review import review

    pick = review.decision(review.load_evidence(EVIDENCE_FILE)).pick
    for name in ("00_overview", "design_review"):
        nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
        texts = ["".join(o.get("data", {}).get("text/plain", "")) for c in nb["cells"]
                 if c["cell_type"] == "code" for o in c.get("outputs", [])]
        shown = {m.group(1) for t in texts for m in [re.match(r"'?Decision: (\w+)", t)] if m}
        assert shown == {pick}, f"{name}.ipynb shows decision {shown or 'none'}, the evidence gives {pick}"


def test_readme_live_block_is_generated_from_the_saved_table():
    from funcbwd_lab.studies.deletable import render as live

    saved = json.loads((ROOT / "data" / live.LIVE_FILE_NAME).read_text())
    assert block("live") == live.markdown(saved)
    assert "of 36 hand-written branches" in block("live")


def test_readme_coverage_block_is_generated_from_the_saved_sweep():
    from funcbwd_lab.studies.coverage import data, render, summary

    doc = data.load(ROOT / "data" / data.FILE_NAME)
    assert block("coverage") == render.markdown(doc, summary.summarize(doc["records"]))


# ------------------------------------------------------------------------------ the findings
def test_readme_findings_block_lists_the_findings_registry():
    from funcbwd_lab.studies.findings import findings

    text = block("findings")
    assert text == readme.findings_markdown(findings.FINDINGS)
    flat = " ".join(text.split())
    for f in findings.FINDINGS:
        assert f"**{' '.join(f.title.split())}**" in flat and f"--only {f.key}`" in flat
    assert flat.count("\n- ") <= len(findings.FINDINGS)
    assert f"_{len(findings.FINDINGS)} torch bugs" in flat
    fewer = readme.findings_markdown(findings.FINDINGS[:-1])  # mutation: the block follows the data
    assert findings.FINDINGS[-1].key not in fewer and f"_{len(findings.FINDINGS) - 1} torch bugs" in fewer


# ------------------------------------------------------------------------------ wrapping
#: a line markdown reads as a list item, heading, quote, rule or fence (CommonMark)
RISKY = re.compile(r"^\s*(?:(?:[-+*]|#{1,6}|\d{1,9}[.)])(?:\s|$)|>|[=-]+\s*$|[`~]{3})")


def _text_with_risky_words() -> str:
    words = "a b c d e f g h i j k l m n o".split()
    return " ".join(w * 7 for w in words) + " >= 64 and - 3 items, 2. then # notes"


def test_wrap_keeps_code_spans_whole_and_never_starts_a_line_with_markdown():
    text = _text_with_risky_words() + " `python -m funcbwd_lab findings --only x`"
    for width in range(20, 60):
        lines = readme.wrap(text, "1. ", "   ", width=width)
        assert " ".join(" ".join(lines)[3:].split()) == " ".join(text.split())  # the same words
        assert not [l for l in lines[1:] if RISKY.match(l)], (width, lines)
        assert any("`python -m funcbwd_lab findings --only x`" in l for l in lines)
        assert all(len(l) <= width or " " not in l.strip() or "`" in l or RISKY.match(l.split()[-1])
                   for l in lines)
    # the check can fail: plain textwrap puts a ">=" (a quote) or "-" (a list) at a line start
    assert any(RISKY.match(l) for w in range(20, 60)
               for l in textwrap.wrap(_text_with_risky_words(), w)[1:])


def _prose_lines(text: str) -> list[str]:
    """Hand-written lines: outside generated blocks, code fences and tables."""
    text = re.sub(r"<!-- ([\w-]+):begin -->\n.*?<!-- \1:end -->", "", text, flags=re.S)
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith(("```", "~~~")):
            fence = not fence
        elif not fence and not line.startswith("|"):
            out.append(line)
    return out


#: the README and the pages that received its sections (the older docs keep their own wrapping)
WRAPPED = ["README.md", *sorted(set(readme.HOMES.values()) - {"README.md"}), "docs/setup.md",
           "docs/findings.md"]


@pytest.mark.parametrize("name", WRAPPED)
def test_prose_is_wrapped_at_100_columns(name):
    long = [l for l in _prose_lines((ROOT / name).read_text()) if len(l) > readme.WIDTH]
    assert not long, f"{name}: lines over {readme.WIDTH} columns: {long[:3]}"
    generated = [readme.block((ROOT / name).read_text(), n) for n, h in readme.HOMES.items()
                 if h == name and n in ("decision-summary", "findings")]
    assert all(len(l) <= readme.WIDTH + 1 for g in generated for l in g.splitlines())


# ------------------------------------------------------------------------------ the first screen
#: A rendered README line (GitHub, 1280x800 window: a ~830 px column of 16 px text, ~105
#: characters a line) holds one source line wrapped at 100 columns; headings take about two. Measured
#: once with Chromium on this README: 35 such lines ended 744 px down, so 37 is about 800 px.
FIRST_SCREEN_LINES = 37


def first_screen_lines(text: str, until: str) -> int:
    """Rendered lines (estimated as above) from the top to the line containing ``until``."""
    n = 0
    for line in text.splitlines():
        if MARKER.fullmatch(line.strip()) or line.startswith("<!--"):
            continue
        n += 2 if line.startswith("#") else 1
        if until in line:
            return n
    raise AssertionError(f"{until!r} not in the text")


def test_first_screen_has_the_decision_then_the_two_commands():
    text = README.read_text()
    order = [text.index(s) for s in ("<!-- decision-summary:begin -->", "## Two commands", "make lab ",
                                      "make test ")]
    assert order == sorted(order) and order[0] < text.index("\n## ")  # the decision first
    assert first_screen_lines(text, "make test ") <= FIRST_SCREEN_LINES
    longer = text.replace("## Two commands", "## Two commands\n\n" + "prose\n" * 3)  # mutation
    assert first_screen_lines(longer, "make test ") > FIRST_SCREEN_LINES
    assert text.index("## Contents") > text.index("make test ")


# ------------------------------------------------------------------------------ the example code
def _python_block(text: str, heading: str) -> str:
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, f"the section {heading!r} lost its python block"
    return m.group(1)


def _run_fix_your_own_code(src: str):
    """Run the block; its last statement (a transform applied to an input) is split so the test
    gets the function, the input and the result."""
    tree = ast.parse(src)
    *body, last = tree.body
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call), "the block must end in a call"
    ns: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "<README>", "exec"), ns)
    transform = eval(compile(ast.Expression(last.value.func), "<README>", "eval"), ns)
    args = [eval(compile(ast.Expression(a), "<README>", "eval"), ns) for a in last.value.args]
    return ns, args, transform(*args)


def test_readme_fix_your_own_code_runs_and_matches_a_per_sample_loop():
    _fixes_and_matches_the_loop(_python_block(README.read_text(), "Fix your own code"))


def test_docs_your_code_example_runs_and_matches_a_per_sample_loop():
    _fixes_and_matches_the_loop(_python_block((ROOT / "docs" / "your-code.md").read_text(),
                                              "Fix your own code"))


def _fixes_and_matches_the_loop(src: str):
    torch.manual_seed(0)
    ns, (x,), result = _run_fix_your_own_code(src)
    # the reference: torch.autograd's Jacobian of f as written (in place, no transform), per sample
    loop = torch.stack([torch.autograd.functional.jacobian(ns["f"], xi) for xi in x])
    torch.testing.assert_close(result, loop, rtol=0, atol=0)
    assert result.abs().sum() > 0
    # the check can fail: with torch's vmap (no decorator) the same block is the in-place error
    plain = src.replace("@funcbwd.functionalized", "").replace("funcbwd.vmap(", "torch.func.vmap(")
    assert plain != src
    with pytest.raises(RuntimeError, match="vmap: inplace arithmetic"):
        _run_fix_your_own_code(plain)


def test_readme_problem_cell_fails_as_it_says():
    src = _python_block(README.read_text(), "The problem in one cell")
    said = " ".join(l.lstrip("# ") for l in src.splitlines() if l.startswith("#"))
    said = said.removeprefix("RuntimeError: ").rstrip(".")
    with pytest.raises(RuntimeError) as err:
        exec(compile(src, "<README>", "exec"), {})
    assert " ".join(str(err.value).split()).startswith(said), (said, str(err.value))


# ------------------------------------------------------------------------------ headlines (issue 31)
def test_bench_prose_numbers_are_the_saved_runs():
    """docs/bench.md's prose quotes the decision's basis (data/bench-quick.json, median over the 8
    test ops at batch >= 64) and the target status beside the median; handfixed/builtin is one
    number; no sentence is left unfinished."""
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import text as bench_text

    bench = bench_results.load(BENCH_FILE)
    costs = bench_results.cost_summary(dict(bench))
    text = " ".join((ROOT / "docs" / "bench.md").read_text().split())
    assert f"is {costs['traced']['batched_vs_handfixed']:.2f}x the hand-fixed" in text
    assert f"`handfixed` itself takes {costs['handfixed']['batched_vs_builtin']:.2f}x builtin" in text
    targets = [t for t in bench_results.targets(bench) if t["status"] != "not measured"]
    missed = sum(t["status"] == "missed" for t in targets)
    assert f"{missed} of the {len(targets)} targets above are MISSED" in text
    assert "within noise" not in text and "no functional formula is," not in text
    assert not text.rstrip().endswith("no functional formula is")
    for line in (ROOT / "docs" / "bench.md").read_text().splitlines():
        assert not line.rstrip().endswith(" is"), line
    # the stale prose number (handfixed / builtin once quoted as 1.26x beside another figure) is
    # gone from the hand-written prose; the generated table may measure 1.26x for an op
    prose = re.sub(r"<!-- bench:begin -->.*<!-- bench:end -->", "", text, flags=re.S)
    assert "1.26x" not in prose and "sample runs per strategy" in readme.strategies_markdown(
        records.load(MATRIX_FILE))
