"""The cell runner: one op sample in one scenario under one strategy, compared with the
per-sample loop, classified, with its provenance. Every cell of every table comes from :func:`run`.

Provenance: the scenario runs the strategy's own part of the cell inside
:meth:`funcbwd.run.scenarios.Case.strategy_part` (which opens
:func:`funcbwd.strategies.provenance.collecting`; the per-sample reference loop runs outside it).
:func:`run` turns the events the strategy recorded into ``mechanism`` (what ran, distinct texts,
the mechanism's own first) and ``mechanism_ran`` (any event of this strategy with ``ran=True``).
A pass with ``mechanism_ran`` False passed without the strategy's mechanism (e.g. the formula ran
as written because no vmap level was active when it ran).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import warnings
from typing import Any, Callable, ContextManager, Sequence

from funcbwd import internals
from funcbwd.errors import BadInputError, NotApplicableError, first_line, parse_names
from funcbwd.ops import registry
from funcbwd.run.compare import Mismatch, check_close
from funcbwd.run.outcomes import classify, fallback_ops
# [forward scenarios] every scenario, backward and forward-mode (funcbwd.run.forward_scenarios)
from funcbwd.run.forward_scenarios import ALL_SCENARIO_NAMES as SCENARIO_NAMES
from funcbwd.run.forward_scenarios import ALL_SCENARIOS as SCENARIOS
from funcbwd.run.scenarios import Case
from funcbwd.strategies import get_strategy
from funcbwd.strategies.provenance import Event

# warnings.catch_warnings swaps process-global state: cells that capture the fallback warning
# run one at a time (the strategies themselves are thread-safe; see tests/test_reliability.py).
_CAPTURE_LOCK = threading.RLock()
RECORD_KEYS = ("op", "sample", "scenario", "strategy", "status", "reason", "message",
               "fallback_ops", "seconds", "max_abs_err", "detail", "mechanism", "mechanism_ran",
               "error_class")


@dataclasses.dataclass
class CellResult:
    """One computed cell. ``status`` is pass / fail / mismatch / not_applicable; ``mechanism``
    says what of the strategy ran, ``mechanism_ran`` whether its own mechanism acted."""

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
    mechanism: str = ""
    mechanism_ran: bool = False

    def record(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in RECORD_KEYS}
        d["seconds"] = round(self.seconds, 4)
        return d

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    @property
    def plain_path_pass(self) -> bool:
        """A pass whose strategy mechanism did not run (it passed on the formula as written)."""
        return self.status == "pass" and not self.mechanism_ran


def mechanism_of(strategy: str, events: Sequence[Event]) -> tuple[str, bool]:
    """(mechanism text, mechanism_ran) from the events ``strategy`` recorded; others' are ignored
    (e.g. ``traced``'s fallback runs ``per_formula``'s decorator, whose events are per_formula's)."""
    own = [e for e in events if e.strategy == strategy]
    ran = [e.mechanism for e in own if e.ran]
    other = [e.mechanism for e in own if not e.ran]
    text = "; ".join(dict.fromkeys(ran + other))
    return text, bool(ran)


def run(op: str | registry.OpSpec, scenario: str, strategy: Any, sample: str | registry.Sample | None = None,
        *, batch: int | None = None,
        around: Callable[[], ContextManager[Any]] | None = None) -> CellResult:
    """Run one cell and compare it with the per-sample loop.

    ``strategy`` is a name or a :class:`funcbwd.strategies.Strategy` instance (tests pass
    deliberately broken variants). ``around`` (an observer, e.g. the trace recorder) is entered
    around the scenario itself."""
    spec = op if isinstance(op, registry.OpSpec) else registry.get_op(op)
    parse_names("scenario", [scenario], SCENARIO_NAMES)
    st = get_strategy(strategy)
    smp = sample if isinstance(sample, registry.Sample) else spec.sample(sample)
    registry.validate_sample(spec, smp)
    result = CellResult(spec.name, smp.name, scenario, st.name, "pass")
    reason = st.not_applicable(spec, scenario) or SCENARIOS[scenario].not_applicable(spec, st)
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
                check_close(actual, expected, case.detail)
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
    result.mechanism, result.mechanism_ran = mechanism_of(st.name, case.events)
    if result.status == "pass":
        result.max_abs_err = 0.0 if result.max_abs_err is None else result.max_abs_err
    return result
