"""The matrix: every op x sample x scenario x strategy cell through :func:`funcbwd_lab.run.runner.run`,
and the summaries and text table built from the cells.

A cell of a summary (op x scenario x strategy) is the worst status over its samples; a passing
cell counts as the strategy's pass only if the strategy's mechanism ran in every sample
(``mechanism_ran``); otherwise tables show it apart ("ok*": passed on the plain path).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from funcbwd_lab import tables
from funcbwd.errors import parse_names
from funcbwd_lab.ops import registry
from funcbwd_lab.progress import Progress
from funcbwd_lab.run.outcomes import REASONS
from funcbwd_lab.run.runner import CellResult, run
from funcbwd_lab.run.scenarios import SCENARIO_GROUPS, names_for
from funcbwd_lab.strategies import available
from funcbwd_lab.tables import WIDTH


def run_matrix(ops: Iterable[str] | None = None, scenarios: Iterable[str] | None = None,
               strategies: Iterable[str] | None = None, *, samples: str = "all",
               progress: Progress | None = None) -> list[CellResult]:
    """Every op x sample x scenario x strategy cell (``samples='first'`` for one sample per op);
    ``progress`` (:class:`funcbwd_lab.progress.Progress`) counts the cells and shows the running one."""
    # [live ops] None: the default op set (opt-in groups such as "live" only when named or grouped);
    # [forward scenarios] None: every scenario that runs the formula kind of some chosen op
    ops = (registry.op_names() if ops is None
           else parse_names("op", ops, registry.op_groups(include_opt_in=True)))
    scenarios = (names_for({registry.get_op(o).kind for o in ops}) if scenarios is None
                 else parse_names("scenario", scenarios, SCENARIO_GROUPS))
    strategies = (default_strategies() if strategies is None
                  else parse_names("strategy", strategies, available()))
    specs = [registry.get_op(op) for op in ops]
    cells = [(spec, smp, sc, st) for spec in specs
             for smp in (spec.samples() if samples == "all" else spec.samples()[:1])
             for sc in scenarios for st in strategies]
    progress = progress or Progress.off()
    progress.start(len(cells))
    results = []
    for spec, smp, sc, st in cells:
        progress.doing(f"{spec.name} {sc} {st}")
        results.append(run(spec, sc, st, smp))
        progress.advance()
    return results


def default_strategies() -> list[str]:
    """Every available strategy but the slow ones (``Strategy.slow``: ``compiled``), which run
    when named (and in the saved matrix, :func:`run_test_ops`)."""
    from funcbwd_lab.strategies import get_strategy

    return [s for s in available() if not get_strategy(s).slow]


def run_test_ops(*, slow: bool = True, progress=None) -> list[CellResult]:
    """The saved matrix (``data/matrix-test-ops.json``): the 8 test ops, every sample, scenario
    and strategy; ``slow=False`` leaves out the slow strategies (``Strategy.slow``: the test
    suite's fresh run)."""
    strategies = available() if slow else default_strategies()
    return run_matrix(registry.TEST_OPS, None, strategies, progress=progress)


# ------------------------------------------------------------------------------ summaries
#: worst first; "uninformative" after "pass": one informative passing sample makes the cell a pass
_ORDER = {"fail": 0, "mismatch": 1, "timeout": 2, "pass": 3, "uninformative": 4, "not_applicable": 5}


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


def without_mechanism(cell: dict[str, Any]) -> bool:
    """A summarized cell that passed although the strategy's mechanism did not run in every sample."""
    return cell["status"] == "pass" and not cell["mechanism_ran"]


# ------------------------------------------------------------------------------ cell texts
#: A summarized cell's display kind (:func:`cell_kind`), in legend order, with its long label
#: (HTML tables, hovers, figure legends) and its short text (heatmap cells); the one vocabulary
#: of every view of the matrix.
STATUS_ORDER = ("pass", "pass_fallback", "without_mechanism", "mismatch", "fail", "timeout",
                "uninformative", "not_applicable")
STATUS_LABEL = {"pass": "pass", "pass_fallback": "pass (slow fallback)",
                "without_mechanism": "pass, mechanism not run", "mismatch": "WRONG result",
                "fail": "FAIL", "timeout": "budget spent (not a pass)",
                "uninformative": "uninformative (zeros would pass)", "not_applicable": "n/a"}
STATUS_SHORT = {"pass": "ok", "pass_fallback": "ok+fb", "without_mechanism": "ok*", "mismatch": "WRONG",
                "fail": "FAIL", "timeout": "TIME", "uninformative": "zero?", "not_applicable": "n/a"}
#: failure reason (:data:`funcbwd_lab.run.outcomes.REASONS`) -> its code in a compact cell (``F:code``)
REASON_CODE = {"vmap_inplace": "inpl", "inplace_shape": "inpl", "data_dependent": "data",
               "functionalization_assert": "func",
               "composite_decomposed": "comp", "no_batch_rule": "rule", "leaked_state": "leak",
               "no_jvp": "jvp", "mutated_input": "mut", "reference_failed": "ref", "other": "other",
               "": "other"}
#: what each mark of a compact cell means (the text table's legend lists the marks it uses)
LEGEND = {
    "ok": "passed: every applicable sample matched the per-sample loop",
    "ok*": "passed without the strategy's mechanism running in every sample (plain path: e.g. "
           "the formula ran as written outside vmap, or the op was decomposed before its kernel)",
    "+fb": "passed using vmap's slow per-sample fallback",
    "WRONG": "ran, but the result differs from torch's own gradient (or, for a formula torch "
             "has no op for, the per-sample loop); WRONG* = it agrees with the legacy formula, "
             "which is wrong there",
    "TIME": "the budget ran out before every in_dims choice ran (not a pass)",
    "k/n": "k of the n applicable samples passed (shown when some, not all, did)",
    "n/a": "not applicable (e.g. no forward-mode rule for a jvp scenario)",
    "zero?": "uninformative: torch's answer is zero there, so a formula returning zeros would pass",
}


def cell_kind(cell: dict[str, Any]) -> str:
    """A summarized cell's display kind: pass_fallback when vmap needed its slow path,
    without_mechanism when it passed without the strategy's mechanism running in every sample."""
    if cell["status"] == "pass" and cell["fallback_ops"]:
        return "pass_fallback"
    if without_mechanism(cell):
        return "without_mechanism"
    return cell["status"]


def cell_text(cell: dict[str, Any], long: bool = False) -> str:
    """A summarized cell as text. Compact (the text table; at most 7 characters, so 8 strategies
    fit 100 columns): ``ok``, ``ok*``, ``F:<reason code>`` (:data:`REASON_CODE`), ``WRONG``,
    ``n/a``; ``+fb`` after a pass that used the slow fallback (a failure's fallback is left to the
    long text), `` k/n`` after a failure when only some samples passed. ``long`` (HTML tables and
    hovers): :data:`STATUS_LABEL` and, for a failure, ``k/n (reason)``."""
    status = cell["status"]
    if long:
        text = STATUS_LABEL[cell_kind(cell)]
        if status in ("fail", "mismatch"):
            text += f" {cell['passed']}/{cell['total']}"
            if cell["reason"]:
                text += f" ({cell['reason']})"
        return text
    if status == "fail":
        text = "F:" + REASON_CODE.get(cell["reason"], cell["reason"])
    else:
        text = STATUS_SHORT["without_mechanism" if without_mechanism(cell) else status]
        if status == "mismatch" and cell["reason"] == "legacy_wrong":
            text += "*"
    if cell["fallback_ops"] and status == "pass":
        text += "+fb"
    if status in ("fail", "mismatch") and 0 < cell["passed"] < cell["total"]:
        text += f" {cell['passed']}/{cell['total']}"
    return text


def legend(cells: Iterable[dict[str, Any]], width: int = WIDTH) -> str:
    """The marks the compact texts of ``cells`` use, each with its meaning (:data:`LEGEND`,
    failure codes with :data:`funcbwd_lab.run.outcomes.REASONS`)."""
    cells = list(cells)
    used = {
        "ok": any(c["status"] == "pass" and not without_mechanism(c) for c in cells),
        "ok*": any(without_mechanism(c) for c in cells),
        "+fb": any(c["fallback_ops"] and c["status"] == "pass" for c in cells),
        "WRONG": any(c["status"] == "mismatch" for c in cells),
        "TIME": any(c["status"] == "timeout" for c in cells),
        "k/n": any(c["status"] in ("fail", "mismatch") and 0 < c["passed"] < c["total"]
                   for c in cells),
        "n/a": any(c["status"] == "not_applicable" for c in cells),
        "zero?": any(c["status"] == "uninformative" for c in cells),
    }
    rows = [[m, LEGEND[m]] for m in LEGEND if used[m]]
    for r in dict.fromkeys(c["reason"] for c in cells if c["status"] == "fail"):
        rows.append([f"F:{REASON_CODE.get(r, r)}", "failed: " + (REASONS.get(r) or "other error")])
    return tables.table(["mark", "meaning"], rows, width=width, rule=False)


def format_table(results: Sequence[CellResult], width: int = WIDTH) -> str:
    """The matrix as text fitting ``width`` columns: one block per op (a heading line, then one
    row per scenario and one column per strategy, :func:`cell_text`'s compact texts, each the
    worst over the op's samples), and the legend of the marks used."""
    summary = summarize(results)
    strategies = list(dict.fromkeys(r.strategy for r in results))
    ops = list(dict.fromkeys(r.op for r in results))
    blocks = []
    for op in ops:
        scenarios = list(dict.fromkeys(r.scenario for r in results if r.op == op))
        samples = len({r.sample for r in results if r.op == op})
        rows = [[sc, *(cell_text(summary[(op, sc, st)]) if (op, sc, st) in summary else ""
                       for st in strategies)] for sc in scenarios]
        head = f"{op}: {samples} sample{'s' if samples != 1 else ''}, worst over them"
        blocks.append(head + "\n" + tables.table(["scenario", *strategies], rows, width=width))
    return "\n\n".join(blocks + ["legend:\n" + legend(summary.values(), width)])
