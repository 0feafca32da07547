"""The matrix runner: run one op sample in one scenario under one strategy, compare with the
per-sample loop, and classify the outcome. Every cell of every table comes from :func:`run`."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import re
import threading
import time
import warnings
from typing import Any, Callable, ContextManager, Iterable, Sequence

from funcbwd import internals
from funcbwd.ops import registry
from funcbwd.errors import BadInputError, NotApplicableError, first_line, parse_names
from funcbwd.run.scenarios import SCENARIO_NAMES, SCENARIOS, Case, Mismatch, _check_close
from funcbwd.strategies import available, get_strategy

STATUSES = ("pass", "fail", "mismatch", "not_applicable")
REASONS = {
    "vmap_inplace": "vmap in-place error: an unbatched in-place target received a batched tensor",
    "data_dependent": "data-dependent shape or control flow (.item(), nonzero, masked_select)",
    "functionalization_assert": "functionalization internal assert (a non-functional tensor met a functional one)",
    "composite_decomposed": "composite op decomposed before vmap saw it",
    "no_batch_rule": "an op with no batching rule that cannot use vmap's per-sample fallback",
    "leaked_state": "the strategy left functorch/dispatch state changed",
    "no_jvp": "no forward-mode (jvp) rule",
    "other": "other error",
    "": "",
}

# warnings.catch_warnings swaps process-global state: cells that capture the fallback warning
# run one at a time (the strategies themselves are thread-safe; see tests/test_reliability.py).
_CAPTURE_LOCK = threading.RLock()
_FALLBACK_RE = re.compile(r"batching rule for (\w+::\w+(?:\.\w+)?)")
_RECORD_KEYS = ("op", "sample", "scenario", "strategy", "status", "reason", "message",
                "fallback_ops", "seconds", "max_abs_err", "detail")


@dataclasses.dataclass
class CellResult:
    """One computed cell. ``status`` is pass / fail / mismatch / not_applicable."""

    op: str
    sample: str
    scenario: str
    strategy: str
    status: str
    reason: str = ""
    message: str = ""
    fallback_ops: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    max_abs_err: float | None = None
    detail: str = ""
    error_class: str = ""

    def record(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in _RECORD_KEYS}
        d["error_class"] = self.error_class
        d["seconds"] = round(self.seconds, 4)
        return d

    @property
    def ok(self) -> bool:
        return self.status == "pass"


def fallback_ops(caught: Iterable[warnings.WarningMessage]) -> list[str]:
    """The ATen ops named by vmap's "performance drop ... batching rule for <op>" warnings."""
    return sorted({m.group(1) for w in caught for m in [_FALLBACK_RE.search(str(w.message))] if m})


def classify(exc: BaseException) -> str:
    msg = str(exc)
    if "inplace arithmetic" in msg or re.search(r"vmap: \S+_\(self, \*extra_args\) is not possible", msg):
        return "vmap_inplace"
    if any(s in msg for s in (".item()", "data-dependent", "dynamic shape", "differently shaped",
                              "nonzero", "Cannot call sizes")):
        return "data_dependent"
    if "does not yet have a batching rule" in msg or "vmap fallback which is currently disabled" in msg:
        return "no_batch_rule"
    if "functional" in msg.lower() and ("INTERNAL ASSERT" in msg or "FunctionalTensor" in msg
                                        or "functionalization" in msg.lower()):
        return "functionalization_assert"
    if "jvp" in msg and ("not implemented" in msg.lower() or "no jvp" in msg or "forward AD" in msg):
        return "no_jvp"
    return "other"


def run(op: str | registry.OpSpec, scenario: str, strategy: str, sample: str | registry.Sample | None = None,
        *, batch: int | None = None,
        around: Callable[[], ContextManager[Any]] | None = None) -> CellResult:
    """Run one cell and compare it with the per-sample loop.

    ``around`` (e.g. the trace recorder) is entered around the scenario itself."""
    spec = op if isinstance(op, registry.OpSpec) else registry.get_op(op)
    parse_names("scenario", [scenario], SCENARIO_NAMES)
    st = get_strategy(strategy)
    smp = sample if isinstance(sample, registry.Sample) else spec.sample(sample)
    registry.validate_sample(spec, smp)
    result = CellResult(spec.name, smp.name, scenario, st.name, "pass")
    reason = st.not_applicable(spec, scenario)
    if reason:
        result.status, result.reason, result.message = "not_applicable", "", reason
        return result
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise BadInputError(f"batch must be a positive int (the vmap batch size), got {batch!r}")
    case = Case(spec, smp, st, **({"batch": batch} if batch is not None else {}))
    start = time.perf_counter()
    before = internals.dispatch_state()
    with _CAPTURE_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with around() if around else contextlib.nullcontext():
                actual, expected = SCENARIOS[scenario].run(case)
                _check_close(actual, expected, case)
        except NotApplicableError as e:
            result.status, result.message = "not_applicable", str(e)
        except Mismatch as e:
            result.status, result.max_abs_err = "mismatch", e.max_abs_err
            result.message = str(e)
        except Exception as e:  # noqa: BLE001 - every failure is a classified cell
            result.status, result.reason = "fail", classify(e)
            result.error_class, result.message = type(e).__name__, first_line(str(e))
    after = internals.dispatch_state()
    if after != before:
        # A strategy leaked transform state: that is a failure of the strategy, not something to
        # hide. Record it, then restore the stack so the next cell starts clean.
        result.status, result.reason = "fail", "leaked_state"
        result.message = f"left transform state changed: {before.describe_difference(after)}"
        internals.restore_stack_depth(before.depth)
    result.seconds = time.perf_counter() - start
    result.detail = case.detail
    result.fallback_ops = fallback_ops(caught)
    if result.status == "pass":
        result.max_abs_err = 0.0 if result.max_abs_err is None else result.max_abs_err
    return result


def run_matrix(ops: Iterable[str] | None = None, scenarios: Iterable[str] | None = None,
               strategies: Iterable[str] | None = None, *, samples: str = "all",
               progress=None) -> list[CellResult]:
    """Every op x sample x scenario x strategy cell (``samples='first'`` for one sample per op)."""
    ops = parse_names("op", ops, registry.op_names())
    scenarios = parse_names("scenario", scenarios, SCENARIO_NAMES)
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


# ------------------------------------------------------------------------------ summaries
def cell_status(results: Sequence[CellResult]) -> str:
    """One op x scenario x strategy cell over its samples: the worst status wins."""
    order = {"fail": 0, "mismatch": 1, "pass": 2, "not_applicable": 3}
    statuses = [r.status for r in results]
    if not statuses:
        return "not_applicable"
    applicable = [s for s in statuses if s != "not_applicable"]
    return min(applicable or statuses, key=order.__getitem__)


def summarize(results: Sequence[CellResult]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(op, scenario, strategy) -> {status, reason, passed, total, fallback_ops, failing samples}."""
    groups: dict[tuple[str, str, str], list[CellResult]] = {}
    for r in results:
        groups.setdefault((r.op, r.scenario, r.strategy), []).append(r)
    out = {}
    for key, rs in groups.items():
        status = cell_status(rs)
        bad = [r for r in rs if r.status == status and status != "pass"]
        out[key] = {
            "status": status,
            "reason": bad[0].reason if bad else "",
            "message": bad[0].message if bad else "",
            "passed": sum(r.status == "pass" for r in rs),
            "total": sum(r.status != "not_applicable" for r in rs),
            "fallback_ops": sorted({f for r in rs for f in r.fallback_ops}),
            "failing_samples": [r.sample for r in rs if r.status in ("fail", "mismatch")],
        }
    return out


_SYMBOL = {"pass": "ok", "fail": "FAIL", "mismatch": "WRONG", "not_applicable": "n/a"}


def format_table(results: Sequence[CellResult]) -> str:
    """A text table: one row per op x scenario, one column per strategy; cells show status,
    passed/total samples, the failure reason and '+fb' when vmap used its slow fallback."""
    summary = summarize(results)
    strategies = list(dict.fromkeys(r.strategy for r in results))
    rows = list(dict.fromkeys((r.op, r.scenario) for r in results))
    header = ["op", "scenario"] + strategies
    lines = [header]
    for op, sc in rows:
        cells = [op, sc]
        for st in strategies:
            c = summary.get((op, sc, st))
            if c is None:
                cells.append("")
                continue
            text = _SYMBOL[c["status"]]
            if c["status"] in ("fail", "mismatch"):
                text += f" {c['passed']}/{c['total']}"
                if c["reason"]:
                    text += f" {c['reason']}"
            if c["fallback_ops"]:
                text += " +fb"
            cells.append(text)
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def to_json(results: Sequence[CellResult]) -> str:
    return json.dumps([r.record() for r in results], indent=1)


def to_csv(results: Sequence[CellResult]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(_RECORD_KEYS) + ["error_class"])
    w.writeheader()
    for r in results:
        rec = r.record()
        rec["fallback_ops"] = ";".join(rec["fallback_ops"])
        w.writerow(rec)
    return buf.getvalue()


def from_records(records: Iterable[dict[str, Any]]) -> list[CellResult]:
    fields = {f.name for f in dataclasses.fields(CellResult)}
    return [CellResult(**{k: v for k, v in rec.items() if k in fields}) for rec in records]
