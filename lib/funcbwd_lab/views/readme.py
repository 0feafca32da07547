"""The README's generated sections and those of the docs pages it points to (markdown rendering
only): each block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in the file
:data:`HOMES` names, and is rendered from saved results, never typed by hand. The strategies table
comes from a saved matrix run (``data/matrix-test-ops.json`` in the repository, written and read
by :mod:`funcbwd_lab.studies.matrix.records`); ``tests/test_readme.py`` checks both that every block matches its
source and that the saved matrix matches a fresh run (:func:`funcbwd_lab.studies.matrix.matrix.run_test_ops`).

Rendering only: the README, the docs and the data files are the repository's, so their paths are
the repository tool's (``tools/update_readme.py``, which joins :data:`HOMES` to the repository
root), never computed from where this module sits."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab.strategies import get_strategy

#: the saved results the README's blocks are rendered from, in the repository's ``data/``
MATRIX_FILE_NAME = "matrix-test-ops.json"
BENCH_FILE_NAME = "bench-quick.json"
EVIDENCE_FILE_NAME = "review-evidence.json"  # funcbwd_lab.studies.review.review.EVIDENCE_FILE

#: Where each generated block lives, relative to the repository root: the README keeps the short
#: ones a newcomer reads first, the docs pages the README links to keep the long ones.
#: ``tools/update_readme.py`` writes every block in its home and the tests read it there.
HOMES: dict[str, str] = {
    "decision-summary": "README.md",
    "findings": "README.md",
    "decision": "docs/decision.md",
    "strategies": "docs/strategies.md",
    "coverage": "docs/opinfo-sweep.md",
    "live": "docs/deletable-branches.md",
    "bench": "docs/bench.md",
    "bad-input": "docs/bad-input.md",
    "corpus": "docs/your-code.md",
    "corpus-summary": "README.md",
    "corpus-cost": "docs/your-code.md",
    "first-call": "docs/contract.md",
    "cpp-pick": "README.md",
    "libraries-summary": "README.md",
    "generated-summary": "README.md",
}
WIDTH = 100  # columns of the prose the blocks wrap (rendered markdown joins the lines again)
#: a word that, starting a line, would make it a list item, heading, quote, rule or fence
_RISKY_START = re.compile(r"^(?:[-+*]|>.*|#{1,6}|\d{1,9}[.)]|=+|-+|[`~]{3}.*)$")


def wrap(text: str, first: str = "", rest: str = "", width: int = WIDTH) -> list[str]:
    """``text`` wrapped at spaces to ``width`` columns as markdown lines that render exactly as
    the one long line would: no word or code span is split, and no line starts with a word
    markdown reads as a list item, heading, quote, rule or fence (``-``, ``2.``, ``#``, ``>=``...;
    such a word stays on the line before). A line runs over ``width`` only for a word or code span
    longer than that, or such a word."""
    words: list[str] = []
    for w in text.split(" "):  # a code span is one word (it reads better unbroken)
        if words and words[-1].count("`") % 2:
            words[-1] += " " + w
        else:
            words.append(w)
    lines: list[str] = []
    line, empty = first, True
    for word in words:
        if empty:
            line, empty = line + word, False
        elif len(line) + 1 + len(word) > width and not _RISKY_START.match(word):
            lines.append(line)
            line = rest + word
        else:
            line += " " + word
    return lines + [line]


#: where a headline ratio's basis ends in the decision's cost sentence (the bench's target
#: status goes right beside it)
COST_BASIS = re.compile(r"\(median over \d+ ops, batch >= \d+\)")


def decision_summary_markdown(evidence, bench=None) -> str:
    """The README's ``decision-summary`` block, its first screen: the pick (with what it is, its
    strategy's one-line summary), the runner-up and the decision's three sentences, wrapped; the
    full table and the basis of every count are the ``decision`` block of ``docs/decision.md``,
    which the ``cpp-pick`` block above it links.
    With ``bench`` (the saved run the costs come from), the cost's basis is followed by that run's
    target status (:func:`funcbwd_lab.studies.bench.text.targets_summary`): a median of 1.00x must
    not read as a met target."""
    from funcbwd_lab.studies.review import review

    d = review.decision(evidence)
    pick = f"**Decision: `{d.pick}`**: {get_strategy(d.pick).summary}."
    if d.runner_up:
        pick += f" Runner-up: `{d.runner_up}`."
    sentences = list(d.sentences)
    if bench is not None:
        from funcbwd_lab.studies.bench import text as bench_text

        status = bench_text.targets_summary(bench)
        sentences = [COST_BASIS.sub(lambda m: f"{m.group(0)[:-1]}; {status})", s, count=1)
                     for s in sentences]
    lines = wrap(pick) + [""]
    for i, s in enumerate(sentences, 1):
        lines += wrap(s, f"{i}. ", " " * len(f"{i}. "))
    return "\n".join(lines)


def findings_markdown(findings) -> str:
    """The README's ``findings`` block: one line per torch bug of ``findings`` (the registry
    :data:`funcbwd_lab.studies.findings.findings.FINDINGS`): its title, the batching rule at fault (the op
    whose vmap kernel it is, and the file) and the command that prints its upstream report."""
    lines = []
    for f in findings:
        lines += wrap(f"**{f.title}**: the batching rule of `{f.rule.op}` (`{f.rule.file}`); "
                      f"`python -m funcbwd_lab findings --only {f.key}`.", "- ", "  ")
    seen = " or ".join(sorted({f.torch_seen for f in findings}))
    lines += [""] + wrap(f"_{len(findings)} torch bugs (first seen on torch {seen}), listed from "
                         "`funcbwd_lab.studies.findings.findings.FINDINGS`. "
                         "`python -m funcbwd_lab findings` checks each now and prints it as an upstream bug "
                         "report (a torch-only repro, observed vs expected, the rule at fault, an "
                         "emulation of the rule with its fix); `tests/test_findings_report.py` fails the "
                         "day torch fixes one. Explained: [docs/torch-2.13-notes.md]"
                         "(docs/torch-2.13-notes.md#four-batching-rule-bugs)._")
    from funcbwd_lab.studies.findings.known import KNOWN_BUGS

    for b in KNOWN_BUGS:  # upstream's, not found here: cited, with what it makes wrong
        lines += [""] + wrap(f"Known torch bug, upstream's ({b.cite()}): **{b.title}** on torch "
                             f"{b.torch_seen} CPU, where eager is right; the compiled study counts "
                             f"its {b.backend} {', '.join(b.ops)} cases as wrong "
                             "(`funcbwd_lab.studies.findings.known`, `tests/test_findings_known.py` "
                             "fails the day torch fixes it).")
    return "\n".join(lines)


def decision_markdown(evidence) -> str:
    """The ``decision`` block (``docs/decision.md``): :func:`funcbwd_lab.studies.review.review.decision` of the saved
    evidence, rendered by :func:`funcbwd_lab.studies.review.decision.markdown` (the same block as the
    notebooks and the report show)."""
    from funcbwd_lab.studies.review import review
    from funcbwd_lab.studies.review import decision

    return decision.markdown(review.decision(evidence))


def strategies_markdown(results: Sequence[CellResult]) -> str:
    """One row per strategy: what it is, cells passed (op x scenario, every sample), where it
    fails and why, and how many passing cells needed vmap's slow fallback."""
    summary = matrix.summarize(results)
    strategies = list(dict.fromkeys(r.strategy for r in results))
    lines = [
        "| strategy | what it is | cells passing (of applicable) | slow fallback in | fails (reason: cells) |",
        "|---|---|---|---|---|",
    ]
    for st in strategies:
        cells = {k: v for k, v in summary.items() if k[2] == st}
        applicable = [c for c in cells.values() if c["status"] != "not_applicable"]
        passing = [c for c in applicable if c["status"] == "pass"]
        fb = sum(1 for c in passing if c["fallback_ops"])
        reasons = Counter(c["reason"] or c["status"] for c in applicable if c["status"] != "pass")
        fails = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items())) or "none"
        lines.append(f"| `{st}` | {get_strategy(st).summary} | {len(passing)}/{len(applicable)} "
                     f"| {fb} | {fails} |")
    ops = sorted({r.op for r in results})
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    lines.append("")
    lines.append(f"_Generated from `data/matrix-test-ops.json`: {len(ops)} ops x {len(scenarios)} "
                 f"scenarios, {len(results) // max(len(strategies), 1)} sample runs per strategy (x "
                 f"{len(strategies)} strategies), each compared with a per-sample loop and with "
                 "torch's own gradient (per-dtype tolerances; `max_abs_err`, `truth_err` in the data). "
                 "Regenerate with `python tools/update_readme.py`._")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str, where: str = "README") -> str:
    """``text`` with the body of its block ``name`` replaced by ``body`` (``where``: the file's
    name, for the error when the block is missing)."""
    pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"{where} has no '{name}' block")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)


def block(text: str, name: str, where: str = "README") -> str:
    """The body of block ``name`` in ``text`` (``where``: the file's name, for the error)."""
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    if not m:
        raise ValueError(f"{where} has no '{name}' block")
    return m.group(1).rstrip("\n")


def _x(v, digits: int = 2) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}x"


def bench_markdown(results: dict, source: str = f"data/{BENCH_FILE_NAME}") -> str:
    """The saved bench run as the README's block: per op the best strategy with its worst ratios
    vs handfixed and vs builtin (small and large inputs, batch >= 64) and its speedup over the
    per-sample loop; the targets, met or missed with their numbers; the hooks claim; and the
    command that reproduces it (``source``: the saved run's path as the README names it).
    Everything computed by ``funcbwd_lab.studies.bench.results``."""
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import text as bench_text

    h = bench_results.headline(results)
    sizes = results["config"]["sizes"]
    large = bench_results.headline(results, size="large")["per_op"] if "large" in sizes else {}
    env = results["environment"]
    lines = ["| op | best strategy | vs handfixed, small | vs builtin, small "
             "| vs min(handfixed, builtin), large | vs builtin, large | speedup vs per-sample loop |",
             "|---|---|---|---|---|---|---|"]
    for op, row in h["per_op"].items():
        if not row.get("best"):
            lines.append(f"| {op} | none passed | | | | | |")
            continue
        big = large.get(op, {})
        same = big.get("all", {}).get(row["best"], {})
        note = ""
        if big.get("best") and big["best"] != row["best"]:
            note = f" (best at large: `{big['best']}` {_x(big['worst_ratio_vs_floor'])})"
        lines.append(f"| {op} | `{row['best']}` | {_x(row['worst_ratio_vs_handfixed'])} "
                     f"| {_x(row['worst_ratio_vs_builtin'])} "
                     f"| {_x(same.get('worst_ratio_vs_floor'))}{note} "
                     f"| {_x(same.get('worst_ratio_vs_builtin'))} | {_x(row['min_speedup_vs_loop'], 0)} |")
    lines.append("")
    lines.append("Ratios are each op's worst case over batch sizes >= 64 (lower is better); "
                 "`handfixed` is core's modern out-of-place formula run in Python through the same "
                 "machinery, so `x handfixed` is what functionalizing costs and `x builtin` adds the "
                 "cost of running a formula in Python at all. At large inputs handfixed can do more "
                 "work than a functional formula needs (under vmap `new_zeros` is batched zeros that "
                 "`diagonal_scatter` / `index_add` copy whole), so large inputs are compared with the "
                 "cheaper of handfixed and builtin at each batch size.")
    lines.append("")
    lines += [f"- {r['text']}" for r in bench_results.reference_check(results)
              if r["size"] == "large" and r["op"] in h["per_op"]]
    lines.append("")
    lines.append("Targets (computed from the same run):")
    lines.append("")
    for t in bench_results.targets(results):
        lines.append(f"- {bench_text.target_line(t)}")
    lines.append("")
    claim = bench_results.hooks_claim_result(results)
    if claim["status"] == "ok":
        lines.append("`hooks` with vmap off, per node over a no-op Python hook (paired samples on "
                     "one graph, alternating):")
        lines.append("")
        lines += [f"- {bench_text.hooks_claim_line(g)}" for g in claim["graphs"]]
    else:
        lines.append(f"`hooks` with vmap off: not measured ({claim.get('reason')}).")
    lines.append("")
    lines.append(f"_From `{source}` (config `{results['config']['name']}`, "
                 f"torch {env['torch']}, {env['cpu_count']} cores, {env['torch_num_threads_used']} "
                 f"torch thread, {results.get('elapsed_s')} s; ratios of medians measured in one run "
                 "on a shared machine). Reproduce: `python -m funcbwd_lab bench --quick --out "
                 "data/bench-quick.json --force`; full run: `python -m funcbwd_lab bench --out "
                 "data/bench-full.json --force` (about 14 min)._")
    return "\n".join(lines)
