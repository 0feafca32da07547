"""The matrix: every op x sample x scenario x strategy cell through :func:`funcbwd.run.runner.run`,
and the summaries and text table built from the cells.

A cell of a summary (op x scenario x strategy) is the worst status over its samples; a passing
cell counts as the strategy's pass only if the strategy's mechanism ran in every sample
(``mechanism_ran``); otherwise tables show it apart ("ok*": passed on the plain path).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from funcbwd.errors import parse_names
from funcbwd.ops import registry
from funcbwd.run.runner import CellResult, run
from funcbwd.run.scenarios import SCENARIO_NAMES, names_for
from funcbwd.strategies import available


def run_matrix(ops: Iterable[str] | None = None, scenarios: Iterable[str] | None = None,
               strategies: Iterable[str] | None = None, *, samples: str = "all",
               progress=None) -> list[CellResult]:
    """Every op x sample x scenario x strategy cell (``samples='first'`` for one sample per op)."""
    # [live ops] None: the default op set (opt-in groups such as "live" only when named or grouped);
    # [forward scenarios] None: every scenario that runs the formula kind of some chosen op
    ops = (registry.op_names() if ops is None
           else parse_names("op", ops, registry.op_names(include_opt_in=True)))
    scenarios = (names_for({registry.get_op(o).kind for o in ops}) if scenarios is None
                 else parse_names("scenario", scenarios, SCENARIO_NAMES))
    strategies = parse_names("strategy", strategies, available())
    results = []
    for op in ops:
        spec = registry.get_op(op)
        smps = spec.samples() if samples == "all" else spec.samples()[:1]
        for smp in smps:
            for sc in scenarios:
                for st in strategies:
                    r = run(spec, sc, st, smp)
                    results.append(r)
                    if progress:
                        progress(r)
    return results


def run_test_ops() -> list[CellResult]:
    """The saved matrix (``data/matrix-test-ops.json``): the 8 test ops, every sample, scenario
    and strategy."""
    return run_matrix(registry.TEST_OPS, None, None)


# ------------------------------------------------------------------------------ summaries
_ORDER = {"fail": 0, "mismatch": 1, "timeout": 2, "pass": 3, "not_applicable": 4}


def cell_status(results: Sequence[CellResult]) -> str:
    """One op x scenario x strategy cell over its samples: the worst status wins."""
    statuses = [r.status for r in results]
    if not statuses:
        return "not_applicable"
    applicable = [s for s in statuses if s != "not_applicable"]
    return min(applicable or statuses, key=_ORDER.__getitem__)


def summarize(results: Sequence[CellResult]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(op, scenario, strategy) -> {status, reason, message, passed, total, fallback_ops,
    failing_samples, mechanism_ran (in every applicable sample), mechanism (the distinct texts)}."""
    groups: dict[tuple[str, str, str], list[CellResult]] = {}
    for r in results:
        groups.setdefault((r.op, r.scenario, r.strategy), []).append(r)
    out = {}
    for key, rs in groups.items():
        status = cell_status(rs)
        bad = [r for r in rs if r.status == status and status != "pass"]
        applicable = [r for r in rs if r.status != "not_applicable"]
        texts = [t for r in applicable for t in r.mechanism.split("; ") if t]
        out[key] = {
            "status": status,
            "reason": bad[0].reason if bad else "",
            "message": bad[0].message if bad else "",
            "passed": sum(r.status == "pass" for r in rs),
            "total": len(applicable),
            "fallback_ops": sorted({f for r in rs for f in r.fallback_ops}),
            "failing_samples": [r.sample for r in rs if r.status in ("fail", "mismatch")],
            "mechanism_ran": bool(applicable) and all(r.mechanism_ran for r in applicable),
            "mechanism": "; ".join(dict.fromkeys(texts)),
        }
    return out


def passed_without_mechanism(cell: dict[str, Any]) -> bool:
    """A summarized cell that passed although the strategy's mechanism did not run in every sample."""
    return cell["status"] == "pass" and not cell["mechanism_ran"]


_SYMBOL = {"pass": "ok", "fail": "FAIL", "mismatch": "WRONG", "timeout": "TIME", "not_applicable": "n/a"}
LEGEND = ("ok* = passed without the strategy's mechanism running in every sample (plain path: "
          "e.g. the formula ran as written outside vmap, or the op was decomposed before its kernel); "
          "+fb = vmap used its slow per-sample fallback; n/r = passed/applicable samples")


def cell_text(cell: dict[str, Any]) -> str:
    """A summarized cell as table text: ok / ok* / FAIL n/r reason / WRONG n/r / n/a, '+fb'."""
    text = _SYMBOL[cell["status"]]
    if passed_without_mechanism(cell):
        text += "*"
    if cell["status"] in ("fail", "mismatch"):
        text += f" {cell['passed']}/{cell['total']}"
        if cell["reason"]:
            text += f" {cell['reason']}"
    if cell["fallback_ops"]:
        text += " +fb"
    return text


def format_table(results: Sequence[CellResult]) -> str:
    """A text table: one row per op x scenario, one column per strategy (:func:`cell_text`), and
    the legend under it when a cell passed without its mechanism."""
    summary = summarize(results)
    strategies = list(dict.fromkeys(r.strategy for r in results))
    rows = list(dict.fromkeys((r.op, r.scenario) for r in results))
    header = ["op", "scenario"] + strategies
    lines = [header]
    for op, sc in rows:
        cells = [op, sc]
        for st in strategies:
            c = summary.get((op, sc, st))
            cells.append("" if c is None else cell_text(c))
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    if any(passed_without_mechanism(c) for c in summary.values()):
        out += ["", LEGEND]
    return "\n".join(out)
