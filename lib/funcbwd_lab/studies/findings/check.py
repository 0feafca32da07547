"""A finding and the checks behind its report: running its programs and re-creating its cause.

A :class:`Finding` is data: a title, the torch version it was first seen on, a minimal repro that
imports nothing but torch, the batching rule at fault (:class:`Rule`: file and function in
pytorch/pytorch, the commit it was read at) and a family of related cases (:class:`Case`).
Every program follows one contract: it imports only torch, defines ``looped`` (the per-sample
loop, the reference) and then ``batched`` (the transform; it may raise), and may print.
:func:`run` executes one in a fresh namespace and compares ``batched`` with ``looped``
(:func:`compare`); :meth:`CaseResult.of` adds the two checks that tie a result to its cause:

* **explained**: a Python emulation of the batching rule *as written* (``emulate(ns, fixed=False)``
  on a case's namespace) must reproduce what vmap returned (the same tensor, or an error where
  vmap raised);
* **fix**: the same emulation with the proposed fix (``fixed=True``) must equal the per-sample
  loop.

:meth:`Finding.check` runs the repro and every case now and returns a
:class:`funcbwd_lab.studies.findings.report.Report`. The findings themselves (each with its
emulation) are the ``findings_<name>`` modules, collected by :mod:`funcbwd_lab.studies.findings.findings`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import platform
import warnings
from typing import Any, Callable

import torch

from funcbwd import internals
from funcbwd.errors import BadInputError
from funcbwd_lab.studies.findings.report import Report

STATUSES = ("ok", "wrong values", "wrong shape", "raises")
ATOL, RTOL = 1e-6, 1e-5


# ------------------------------------------------------------------------------ data
@dataclasses.dataclass(frozen=True)
class Rule:
    """The batching rule at fault, as a reviewer finds it in pytorch/pytorch."""

    file: str  # path in pytorch/pytorch
    function: str
    op: str  # the dispatcher op (with overload) whose FuncTorchBatched kernel it is
    introduced_by: str  # the upstream PR that added the rule
    flaw: str  # what goes wrong, in prose
    fix: str  # the proposed change, in prose
    read_at: str = ""  # which copy of pytorch/pytorch the quoted code was read from (commit, PR)


@dataclasses.dataclass(frozen=True)
class Case:
    """One program of a finding's family; ``params`` feed the finding's ``claim``."""

    label: str
    source: str
    params: dict
    emulable: bool = True  # whether the namespace carries what ``emulate`` reads


@dataclasses.dataclass(frozen=True)
class Finding:
    """One torch bug as data; :meth:`check` computes its report."""

    key: str
    title: str
    torch_seen: str
    summary: str  # the bug in a few sentences, for the report
    repro: str  # the main case: the smallest program that shows it
    repro_params: dict
    rule: Rule
    claim_text: str  # which cases are affected, in prose; ``claim`` says it as code
    claim: Callable[[dict], bool]
    cases: Callable[[], tuple[Case, ...]]
    emulate: Callable[[dict, bool], torch.Tensor]

    def main_case(self) -> Case:
        return Case("the repro above", self.repro, self.repro_params)

    def check(self, with_cases: bool = True) -> Report:
        """Run the repro (and the cases) now, on this torch."""
        results = [CaseResult.of(self, c) for c in ((self.main_case(),) + (self.cases() if with_cases else ()))]
        return Report(self, results[0], tuple(results[1:]), internals.batching_kernel_source(self.rule.op),
                      versions())


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one program did: ``status`` is ``ok`` when ``batched`` equals ``looped``."""

    status: str
    observed: str  # the transform's result, or the error it raised
    expected: str  # the per-sample loop's result
    printed: str
    namespace: dict = dataclasses.field(repr=False, compare=False)

    @property
    def bug(self) -> bool:
        return self.status != "ok"

    @property
    def batched(self) -> torch.Tensor | None:
        return self.namespace.get("batched")


def run(source: str, label: str = "repro", ns: dict[str, Any] | None = None) -> Outcome:
    """Execute ``source`` in a fresh namespace (or ``ns``, e.g. a module's ``__dict__``; stdout
    captured, warnings silenced) and compare its ``batched`` with its ``looped``. A source that
    breaks the contract (no ``looped``, or no ``batched`` without an error) is a
    :class:`funcbwd.errors.BadInputError`."""
    ns = {"__name__": "__repro__"} if ns is None else ns
    out = io.StringIO()
    error = None
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exec(compile(source, "<repro>", "exec"), ns)
        except Exception as e:  # noqa: BLE001 - the error is the observation
            error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    looped = ns.get("looped")
    if not isinstance(looped, torch.Tensor):
        raise BadInputError(
            f"{label}: a repro must define `looped` (the per-sample loop) as a tensor before `batched`"
            + (f"; it raised first: {error}" if error else ""))
    if error is not None:
        return Outcome("raises", error, _show(looped), out.getvalue(), ns)
    batched = ns.get("batched")
    if not isinstance(batched, torch.Tensor):
        raise BadInputError(f"{label}: a repro must define `batched` (the transform's result) as a tensor")
    return Outcome(compare(batched, looped), _show(batched), _show(looped), out.getvalue(), ns)


def compare(got: torch.Tensor, want: torch.Tensor) -> str:
    if got.shape != want.shape:
        return "wrong shape"
    return "ok" if torch.allclose(got, want, atol=ATOL, rtol=RTOL) else "wrong values"


def _show(t: torch.Tensor) -> str:
    return f"{t}  # shape {tuple(t.shape)}"


@dataclasses.dataclass(frozen=True)
class CaseResult:
    case: Case
    outcome: Outcome
    claimed_bug: bool
    explained: bool | None  # the rule as written reproduces vmap's result (None: not emulable)
    fix_works: bool | None  # the fixed rule equals the per-sample loop

    @classmethod
    def of(cls, finding: Finding, case: Case) -> "CaseResult":
        """Run ``case`` of ``finding`` and check its claim, its explanation and its fix."""
        outcome = run(case.source, case.label)
        explained = fix_works = None
        if case.emulable:
            as_written = _attempt(finding.emulate, outcome.namespace, False)
            explained = (outcome.status == "raises") if as_written is None else (
                outcome.batched is not None and compare(as_written, outcome.batched) == "ok")
            fixed = _attempt(finding.emulate, outcome.namespace, True)
            fix_works = fixed is not None and compare(fixed, outcome.namespace["looped"]) == "ok"
        return cls(case, outcome, finding.claim(case.params), explained, fix_works)


def _attempt(fn: Callable, *args) -> torch.Tensor | None:
    """The emulation's result, or None where the rule it emulates would raise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args)
        except RuntimeError:
            return None


def versions() -> dict[str, str]:
    return {"torch": torch.__version__, "torch git": torch.version.git_version or "?",
            "python": platform.python_version(),
            "os": platform.platform(), "cuda": str(torch.version.cuda)}


# ------------------------------------------------------------------------------ helpers for emulation
def sum_to(physical: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Autograd's ``sum_to`` (the engine reduces a broadcast gradient to the input's shape), applied
    per batch entry to a tensor whose dim 0 is the batch dim."""
    logical = physical.shape[1:]
    if len(logical) < len(shape) or any(s not in (1, l) for s, l in zip(reversed(shape), reversed(logical))):
        raise RuntimeError(f"invalid gradient: got {list(logical)}, expected shape compatible with {list(shape)}")
    lead = len(logical) - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and logical[lead + i] != 1]
    out = physical.sum([d + 1 for d in dims], keepdim=True) if dims else physical
    return out.reshape(physical.shape[0], *shape)
