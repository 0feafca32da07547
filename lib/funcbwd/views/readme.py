"""The README's generated sections (markdown rendering only): the strategies table comes from a
saved matrix run (``data/matrix-test-ops.json`` in the repository, written and read by
:mod:`funcbwd.studies.matrix.records`), never typed by hand; ``tests/test_readme.py`` checks both that the
README matches the file and that the file matches a fresh run
(:func:`funcbwd.studies.matrix.matrix.run_test_ops`).

Rendering only: the README and the data files are the repository's, so their paths are the
repository tool's (``tools/update_readme.py``), never computed from where this module sits."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

from funcbwd.studies.matrix import matrix
from funcbwd.run.runner import CellResult
from funcbwd.strategies import get_strategy

#: the saved results the README's blocks are rendered from, in the repository's ``data/``
MATRIX_FILE_NAME = "matrix-test-ops.json"
BENCH_FILE_NAME = "bench-quick.json"
EVIDENCE_FILE_NAME = "review-evidence.json"  # funcbwd.studies.review.review.EVIDENCE_FILE


def decision_markdown(evidence) -> str:
    """The README's ``decision`` block: :func:`funcbwd.studies.review.review.decision` of the saved
    evidence, rendered by :func:`funcbwd.studies.review.decision.markdown` (the same block as the
    notebooks and the report show)."""
    from funcbwd.studies.review import review
    from funcbwd.studies.review import decision

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
                 f"scenarios, {len(results)} sample runs, each compared with a per-sample loop and with "
                 "torch's own gradient (per-dtype tolerances; `max_abs_err`, `truth_err` in the data). "
                 "Regenerate with `python tools/update_readme.py`._")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"README has no '{name}' block")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)


def block(text: str, name: str) -> str:
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    if not m:
        raise ValueError(f"README has no '{name}' block")
    return m.group(1).rstrip("\n")


def _x(v, digits: int = 2) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}x"


def bench_markdown(results: dict, source: str = f"data/{BENCH_FILE_NAME}") -> str:
    """The saved bench run as the README's block: per op the best strategy with its worst ratios
    vs handfixed and vs builtin (small and large inputs, batch >= 64) and its speedup over the
    per-sample loop; the targets, met or missed with their numbers; the hooks claim; and the
    command that reproduces it (``source``: the saved run's path as the README names it).
    Everything computed by ``funcbwd.studies.bench.results``."""
    from funcbwd.studies.bench import results as bench_results
    from funcbwd.studies.bench import text as bench_text

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
                 "on a shared machine). Reproduce: `python -m funcbwd bench --quick --out "
                 "data/bench-quick.json`; full run: `python -m funcbwd bench --out data/bench-full.json`._")
    return "\n".join(lines)
