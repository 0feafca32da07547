"""The OpInfo sweep, rendered for the README: what ran, regressions and fixes against builtin,
and the cost of functionalizing every backward. Rendering only: the counts come from
:func:`funcbwd.measure.coverage_summary.summarize` and
:func:`funcbwd.measure.coverage_cost.summarize_cost` of the saved sweep."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from funcbwd.measure import coverage_cost, coverage_summary

COVERAGE_FILE_NAME = "coverage-all.json.gz"


def markdown(records: Sequence[dict[str, Any]], meta: dict[str, Any],
             costs: Sequence[dict[str, Any]], source: str = f"data/{COVERAGE_FILE_NAME}") -> str:
    s = coverage_summary.summarize(records)
    lines = ["| strategy | pass | fail | mismatch | n/a | slow fallback | regressions vs builtin | fixes |",
             "|---|---|---|---|---|---|---|---|"]
    regs = Counter(r["strategy"] for r in s["regressions"])
    fixes = Counter(r["strategy"] for r in s["fixes"])
    for st in s["strategies"]:
        c = s["counts"][st]
        name = st.split(" ")[0]
        lines.append(f"| `{st}` | {c.get('pass', 0)} | {c.get('fail', 0)} | {c.get('mismatch', 0)} | "
                     f"{c.get('not_applicable', 0)} | {c['fallback']} | "
                     f"{'-' if name == 'builtin' else regs.get(name, 0)} | "
                     f"{'-' if name == 'builtin' else fixes.get(name, 0)} |")
    by_op = Counter((r["strategy"], r["op"]) for r in s["regressions"])
    if by_op:
        lines += ["", "Regressions (builtin passes, the strategy fails or mismatches), by op: "
                  + "; ".join(f"`{st}` {op} ({n} samples)" for (st, op), n in sorted(by_op.items()))
                  + "."]
    else:
        lines += ["", "No regressions against builtin."]
    if costs:
        c = coverage_cost.summarize_cost(costs)
        lines += ["", coverage_cost.format_cost(c).splitlines()[0] + "."]
    rerun = meta.get("rerun")
    ran = (f"{s['ops']} OpInfo ops, {s['records']} records, all samples: {meta.get('all_samples')}, "
           f"at most {meta.get('max_in_dims')} in_dims choices per sample, distinct batch entries, "
           f"scoped rules {', '.join(meta.get('rules') or []) or 'off'}, {meta.get('workers')} Dask "
           f"workers, {meta.get('wall_seconds')} s")
    if rerun:
        ran += f"; re-run later for {', '.join(rerun.get('ops', []))} ({rerun.get('reason', '')})"
    lines += ["", f"_From `{source}` ({ran}). Recompute: `python -m funcbwd coverage --all-samples "
              f"--workers 2 --cost --out {source}`; `notebooks/coverage.ipynb` shows every row._"]
    return "\n".join(lines)
