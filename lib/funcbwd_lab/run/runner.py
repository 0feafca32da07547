"""The cell runner: one op sample in one scenario under one strategy, checked against two
references, classified, with its provenance. Every cell of every table comes from :func:`run`.

For each trial of the scenario (:mod:`funcbwd_lab.run.scenario`; one per in_dims choice, or one):

1. snapshot the caller's tensors (:class:`funcbwd_lab.run.caller.Snapshot`), run the strategy's part
   (inside :meth:`Case.strategy_part`: provenance collected), then see what it changed;
2. run the per-sample loop of the formula and torch's own gradient (``truth``), each on fresh
   copies of the inputs as they were before the call;
3. compare, measuring the errors against both (:func:`funcbwd.compare.compare`, per-dtype
   tolerances from :mod:`funcbwd.tolerances`).

A cell whose every trial an all-zeros result would pass too (torch's answer is zero there, or
within tolerance of it) is ``uninformative``, a verdict of its own: no evidence, never a fix.

A trial passes when it agrees with torch's truth where the scenario has one (and then the
loop is only a witness: ``legacy_wrong`` when the loop itself disagrees with the truth, i.e. the
legacy formula is wrong there), else with the loop. A result that agrees with a wrong legacy
loop but not with the truth is a ``mismatch`` with reason ``legacy_wrong``. A caller tensor the
call changed is ``input_mutation``; when eager autograd leaves it with the same values
(:func:`funcbwd_lab.run.caller.eager_after`, per batch entry on the caller's values, compared by value:
the formula writes into its own args) it is reported as the formula's property, otherwise the cell
fails with reason ``mutated_input``.

Provenance: :func:`run` turns the events the strategy recorded into ``mechanism`` (what ran,
distinct texts, the mechanism's own first) and ``mechanism_ran`` (any event of this strategy with
``ran=True``). A pass with ``mechanism_ran`` False passed without the strategy's mechanism.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
from typing import Any, Callable, ContextManager, Sequence

import torch

from funcbwd import internals
from funcbwd.errors import BadInputError, NotApplicableError, first_line, parse_names
from funcbwd_lab.ops import registry
from funcbwd import tolerances
from funcbwd_lab.run import caller
from funcbwd.compare import Comparison, compare
from funcbwd_lab.run.outcomes import classify, fallbacks_seen
from funcbwd_lab.run.scenario import Case, Trial
from funcbwd_lab.run.scenarios import SCENARIO_GROUPS, SCENARIOS
from funcbwd_lab.strategies import get_strategy
from funcbwd_lab.strategies.provenance import Event

# fallbacks_seen swaps process-global state (warnings filters, fd 2): cells that capture the
# fallback warning run one at a time (the strategies themselves are thread-safe; see tests/test_reliability.py).
_CAPTURE_LOCK = threading.RLock()
RECORD_KEYS = ("op", "sample", "scenario", "strategy", "dtype", "status", "reason", "message",
               "fallback_ops", "seconds", "max_abs_err", "max_rel_err", "truth_err",
               "legacy_wrong", "input_mutation", "tolerance", "detail", "mechanism",
               "mechanism_ran", "error_class", "trials_run", "trials_total", "entries", "rules")


@dataclasses.dataclass
class CellResult:
    """One computed cell. ``status`` is pass / fail / mismatch / not_applicable. Errors are
    measured (None only where no comparison ran): ``max_abs_err`` / ``max_rel_err`` against the
    per-sample loop of the formula, ``truth_err`` against torch's own gradient (None where the
    scenario or op has no truth). ``input_mutation``: None, or the caller tensors the call changed
    (``tensor``, ``max_abs_change``, ``eager_too``). ``mechanism`` says what of the strategy ran,
    ``mechanism_ran`` whether its own mechanism acted."""

    op: str
    sample: str
    scenario: str
    strategy: str
    status: str
    dtype: str = ""
    reason: str = ""
    message: str = ""
    fallback_ops: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    truth_err: float | None = None
    legacy_wrong: bool = False
    input_mutation: list[dict[str, Any]] | None = None
    tolerance: str = ""
    detail: str = ""
    error_class: str = ""
    mechanism: str = ""
    mechanism_ran: bool = False
    #: trials (in_dims choices) run, of how many; a budget that ran out gives status "timeout"
    trials_run: int = 0
    trials_total: int = 0
    #: "distinct" or "copies" (:attr:`funcbwd_lab.run.scenario.Case.entries_kind`)
    entries: str = "distinct"
    #: the scoped vmap rules the strategy ran its backward under (:mod:`funcbwd_lab.batching`)
    rules: list[str] = dataclasses.field(default_factory=list)

    def record(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in RECORD_KEYS}
        d["seconds"] = round(self.seconds, 4)
        for k in ("max_abs_err", "max_rel_err", "truth_err"):
            v = d[k]
            d[k] = None if v is None else ("inf" if math.isinf(v) else float(f"{v:.3g}"))
        return d

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    @property
    def without_mechanism(self) -> bool:
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


@dataclasses.dataclass
class TrialOutcome:
    """What one trial measured (see the module docstring)."""

    vs_loop: Comparison
    vs_truth: Comparison | None
    legacy_wrong: bool
    changes: list[caller.Change]
    truth_note: str = ""
    #: an all-zeros result would pass this trial's check too (its true answer is zero, or within
    #: tolerance of it): the trial cannot tell a zero formula from the right one
    zeros_pass: bool = False

    @property
    def ok(self) -> bool:
        return (self.vs_truth or self.vs_loop).ok and not self.mutated

    @property
    def mutated(self) -> bool:
        return any(not c.eager_too for c in self.changes)


class ReferenceFailed(RuntimeError):
    """The per-sample loop (the reference), not the strategy, raised."""


def _unless_reference_fails_too(trial: Trial, snap: caller.Snapshot, error: Exception) -> None:
    """When the strategy's call raised: if the per-sample loop raises as well, the composition
    does not exist unbatched (e.g. torch has no double-backward formula for the op), which is
    not the transform's failure: not applicable, saying why. Otherwise returns (the caller
    re-raises the strategy's error)."""
    try:
        trial.loop(snap.fresh())
    except Exception as e:  # noqa: BLE001
        raise NotApplicableError(
            f"the composition fails without vmap too (the per-sample loop raises "
            f"{type(e).__name__}: {first_line(str(e), 120)}); the transform raised "
            f"{type(error).__name__}") from error


def _against_eager(case: Case, trial: Trial, snap: caller.Snapshot, changes: list[caller.Change],
                   tol: Callable[[torch.dtype], tolerances.Tolerance]) -> list[caller.Change]:
    """Each change compared by value with what plain eager autograd leaves in that tensor
    (:func:`funcbwd_lab.run.caller.eager_after`, on the values the caller handed over): ``eager_too``
    only where the strategy left the same values eager does."""
    try:
        after = caller.eager_after(case.op, case.sample, case.reference, snap.names, snap.copies,
                                   case.batch, trial.bdims)
    except Exception:  # noqa: BLE001 - eager cannot run on these values: nothing to excuse a change
        after = {}
    out = []
    for c in changes:
        now = snap.tensors[snap.names.index(c.tensor)]
        t = tol(now.dtype)
        same, diff = caller.matches_eager(now, after.get(c.tensor), t.atol, t.rtol)
        out.append(dataclasses.replace(c, eager_too=same, vs_eager=diff))
    return out


def run_trial(case: Case, trial: Trial, tol: Callable[[torch.dtype], tolerances.Tolerance]) -> TrialOutcome:
    """One trial: the strategy's call on the caller's tensors, then both references on fresh
    copies. Raises what the strategy's call raises."""
    snap = caller.Snapshot.of(trial.inputs)
    try:
        with case.strategy_part():
            actual = tuple(trial.call())
    except NotApplicableError:
        raise
    except Exception as e:
        if case.op.formula is None:  # torch's own op: it may lack the composition unbatched
            _unless_reference_fails_too(trial, snap, e)
        raise  # a formula of ours that raises is the cell's failure, whatever the loop does
    changes = snap.changes()
    if changes:
        # the results may alias a changed caller tensor (a formula returning its grad): keep them
        actual = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in actual)
        changes = _against_eager(case, trial, snap, changes, tol)
        snap.restore()  # later trials and the references see the caller's values
    try:
        expected = tuple(trial.loop(snap.fresh()))
    except Exception as e:  # noqa: BLE001 - not the strategy's failure: the reference's
        raise ReferenceFailed(f"the per-sample loop raised {type(e).__name__}: "
                              f"{first_line(str(e), 160)}") from e
    truth, note = None, ""
    if trial.truth is not None and case.op.formula is not None:
        try:
            truth = tuple(trial.truth(snap.fresh()))
        except Exception as e:  # noqa: BLE001 - torch's own composition cannot run: say so
            note = f"torch's own gradient unavailable: {type(e).__name__}: {first_line(str(e), 160)}"
    vs_loop = compare(actual, expected, tol)
    decides = truth if truth is not None and case.op.formula is not None else expected
    zeros = zeros_would_pass(decides, tol)
    if case.op.formula is None:  # no legacy formula: the loop is torch's own gradient already
        return TrialOutcome(vs_loop, vs_loop, False, changes, note, zeros)
    vs_truth = compare(actual, truth, tol) if truth is not None else None
    legacy_wrong = truth is not None and not compare(expected, truth, tol).ok
    return TrialOutcome(vs_loop, vs_truth, legacy_wrong, changes, note, zeros)


def zeros_would_pass(expected: Sequence[Any], tol: Callable[[torch.dtype], tolerances.Tolerance]) -> bool:
    """Whether a result of all zeros passes the check against ``expected`` (the mutant that
    tells an informative trial from one that cannot fail a zero formula)."""
    try:
        zeros = [torch.zeros_like(torch.as_tensor(e)) for e in expected]
    except Exception:  # noqa: BLE001 - a non-tensor output: the check is not a tensor comparison
        return False
    return compare(zeros, expected, tol).ok


def _cast(sample: registry.Sample, dtype: torch.dtype | None) -> registry.Sample:
    if dtype is None:
        return sample
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise BadInputError(f"dtype must be a floating torch.dtype (e.g. torch.float64), got {dtype!r}")
    args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in sample.args)
    return dataclasses.replace(sample, args=args)


def _fill(result: CellResult, outcomes: list[TrialOutcome]) -> None:
    """The cell's measured errors and verdict from its trials (the first failing one decides)."""
    loop = Comparison.worst([o.vs_loop for o in outcomes])
    truths = [o.vs_truth for o in outcomes if o.vs_truth is not None]
    truth = Comparison.worst(truths) if len(truths) == len(outcomes) else None
    if loop is not None:
        result.max_abs_err, result.max_rel_err = loop.max_abs_err, loop.max_rel_err
        result.tolerance = loop.tolerance
    result.truth_err = truth.max_abs_err if truth is not None else None
    result.legacy_wrong = any(o.legacy_wrong for o in outcomes)
    changes = [c for o in outcomes for c in o.changes]
    result.input_mutation = [c.record() for c in changes] or None
    notes = [o.truth_note for o in outcomes if o.truth_note]
    bad = next((o for o in outcomes if not o.ok), None)
    if bad is None:
        if notes:
            result.message = notes[0]
        return
    if bad.mutated:
        c = next(c for c in bad.changes if not c.eager_too)
        result.status, result.reason = "fail", "mutated_input"
        result.message = (f"changed the caller's {c.tensor} by up to {c.max_abs_change:.3g} "
                          + ("(eager autograd does not)" if c.vs_eager is None or c.vs_eager == c.max_abs_change
                             else f"(eager autograd changes it too, to values {c.vs_eager:.3g} away)"))
        return
    result.status = "mismatch"
    cmp = bad.vs_truth or bad.vs_loop
    if bad.vs_truth is not None and bad.vs_loop.ok and bad.legacy_wrong:
        result.reason = "legacy_wrong"
        result.message = f"agrees with the legacy formula, which is wrong here: {cmp.detail}"
    else:
        against = "torch's own gradient" if bad.vs_truth is not None else "the per-sample loop"
        result.message = f"vs {against}: {cmp.detail}"


def run(op: str | registry.OpSpec, scenario: str, strategy: Any,
        sample: str | registry.Sample | None = None, *, batch: int | None = None,
        dtype: torch.dtype | None = None, entries: str = "distinct", budget_s: float | None = None,
        first: Sequence[str] = (),
        around: Callable[[], ContextManager[Any]] | None = None) -> CellResult:
    """Run one cell against its references (see the module docstring).

    ``strategy`` is a name or a :class:`funcbwd_lab.strategies.Strategy` instance (tests pass
    deliberately broken variants). ``dtype`` casts the sample's floating args (default: as the
    sample has them). ``entries``: "distinct" or "copies" (batch entries). ``budget_s``: after
    that many seconds no further trial starts, and a cell with trials left is a ``timeout``
    (never a pass). ``first``: trial labels (e.g. the in_dims choice another strategy failed on)
    to run before the others, so a budget spends itself where the answer is. ``around`` (an
    observer, e.g. the trace recorder) is entered around the scenario itself."""
    spec = op if isinstance(op, registry.OpSpec) else registry.get_op(op)
    parse_names("scenario", [scenario], SCENARIO_GROUPS)
    st = get_strategy(strategy)
    smp = _cast(sample if isinstance(sample, registry.Sample) else spec.sample(sample), dtype)
    registry.validate_sample(spec, smp)
    result = CellResult(spec.name, smp.name, scenario, st.name, "pass",
                        dtype=str(smp.args[smp.diff[0]].dtype).removeprefix("torch."))
    reason = st.not_applicable(spec, scenario) or SCENARIOS[scenario].not_applicable(spec, st)
    if reason:
        result.status, result.message = "not_applicable", reason
        return result
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise BadInputError(f"batch must be a positive int (the vmap batch size), got {batch!r}")
    if entries not in ("distinct", "copies"):
        raise BadInputError(f"entries must be 'distinct' or 'copies', got {entries!r}")
    case = Case(spec, smp, st, entries_kind=entries, **({"batch": batch} if batch is not None else {}))
    result.entries, result.rules = entries, list(getattr(st, "rules", ()))
    tol = lambda dt: tolerances.tolerance(dt, spec.name, scenario)  # noqa: E731
    outcomes: list[TrialOutcome] = []
    label = ""
    start = time.perf_counter()
    before = internals.dispatch_state()
    with _CAPTURE_LOCK, fallbacks_seen() as seen:
        try:
            with around() if around else contextlib.nullcontext():
                trials = SCENARIOS[scenario].trials(case)
                if first:
                    trials.sort(key=lambda t: t.label not in first)  # stable: the rest keep order
                result.trials_total = len(trials)
                for trial in trials:
                    if budget_s is not None and outcomes and time.perf_counter() - start > budget_s:
                        break
                    label = trial.label
                    outcomes.append(run_trial(case, trial, tol))
                    result.trials_run += 1
                    if not outcomes[-1].ok:
                        break
            _fill(result, outcomes)
            if result.status == "pass" and result.trials_run < len(trials):
                result.status = "timeout"
                result.message = (f"budget of {budget_s:g} s spent after {result.trials_run} of "
                                  f"{len(trials)} trials (all passed); not a pass")
                label = f"{result.trials_run} of {len(trials)} in_dims choices ran"
            elif result.status == "pass":
                label = f"{len(trials)} in_dims choices" if len(trials) > 1 else ""
            if result.status == "pass" and outcomes and all(o.zeros_pass for o in outcomes):
                result.status = "uninformative"
                result.message = ("torch's answer here is zero (within tolerance): a formula returning "
                                  "zeros passes too, so this pass is no evidence (never a fix)")
        except NotApplicableError as e:
            result.status, result.message = "not_applicable", str(e)
        except Exception as e:  # noqa: BLE001 - every failure is a classified cell
            _fill(result, outcomes)  # the trials before it were measured
            result.status, result.reason = "fail", classify(e)
            result.error_class, result.message = type(e).__name__, first_line(str(e))
    after = internals.dispatch_state()
    if after != before:
        # A strategy leaked transform state: that is a failure of the strategy, not something to
        # hide. Record it, then restore the stack so the next cell starts clean.
        result.status, result.reason = "fail", "leaked_state"
        result.message = f"left transform state changed: {before.describe_difference(after)}"
        internals.restore_dispatch_state(before)
    result.seconds = time.perf_counter() - start
    result.detail = label
    result.fallback_ops = seen.ops
    result.mechanism, result.mechanism_ran = mechanism_of(st.name, case.events)
    return result
