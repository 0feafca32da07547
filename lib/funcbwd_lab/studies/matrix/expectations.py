"""Reviewed expectations: what every cell of the test-op matrix should be, and why.

``(strategy, op, scenario) -> Expected(status, reason, mechanism_ran, why)`` over the 8 test ops x
8 scenarios x every strategy, for the cell as :func:`funcbwd_lab.studies.matrix.matrix.summarize` computes it
(worst status over the op's samples; ``mechanism_ran`` in every applicable sample). Written like
functorch's xfail lists: each strategy passes with its mechanism ran by default, and
:data:`RULES` lists the exceptions (later rules override earlier ones), each with a one-line
``why`` that was checked against the computed cells and their messages. ``tests/test_expectations.py``
compares every cell of a fresh run with this table, so a change in behaviour (or a wrong ``why``
left behind) shows up as a failing test, never as a silently different number.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from funcbwd_lab.ops.registry import TEST_OPS
from funcbwd_lab.strategies import CANDIDATES, available, names
from funcbwd_lab.run.scenarios import BACKWARD_NAMES

STRATEGIES = tuple(available())  # the registry's matrix strategies (funcbwd_lab.strategies.REGISTRY)
#: the strategies that run a legacy formula through functionalization
FUNCTIONALIZING = CANDIDATES
INPLACE_OPS = ("diag", "index_select", "topk", "mode", "sort")
JACOBIANS = ("jacrev", "jacrev_jacrev", "jacfwd_jacrev", "vmap_jacrev")
PRIMAL_BATCHING = ("vmap_all_args", "grad_inside_vmap", "vmap_jacrev")
ALL = "*"


@dataclasses.dataclass(frozen=True)
class Expected:
    """A cell's expected ``status``, ``reason`` (required for a fail; for a mismatch, e.g.
    ``legacy_wrong``), ``mechanism_ran``, and ``why`` (required for every non-pass and every pass
    without the mechanism)."""

    status: str = "pass"
    reason: str = ""
    mechanism_ran: bool = True
    why: str = ""


def _fail(reason: str, why: str, ran: bool = True) -> Expected:
    return Expected("fail", reason, ran, why)


def _plain_path(why: str) -> Expected:
    return Expected("pass", "", False, why)


_SCATTER = "zeros(sizes).scatter_(dim, indices, grad) writes the batched grad into an unbatched buffer"
_DYNAMIC_MASK = ("vmap over the mask: masked_select's output size depends on the mask's values "
                 "(dynamic shape); the forward fails before any backward runs")
_NONZERO = ("the batched input reaches the formula's data-dependent control flow: "
            "(input == 0).nonzero() (full reduction) and .item() (dim) cannot be batched")
_SAVED_EXPAND = ("zeros_like(input.expand(...)) is built from a saved, non-functional tensor; "
                 "masked_scatter_ of the functional grad into it asserts in functionalization")
_FIRST_BACKWARD_OUTSIDE = ("the first backward runs outside vmap (formula as written); the vmapped "
                           "second backward differentiates the formula's recorded out-of-place ops")
_CTX = ("under torch.func dynamo inlines the legacy Function's forward (dropping its backward, "
        "pytorch#193279) and passes ctx into forward(*args): InternalTorchDynamoError "
        "'AutogradFunctionContextVariable' has no 'proxy', before any backend")
_FALLBACK = ("dynamo breaks the graph inside the transform and runs it eagerly, where the formula "
             "as written meets vmap's in-place check (plain's failure)")
_EAGER_PASS = "passes in dynamo's eager fallback, as plain does (no graph holds the transform)"
_TORCH = ("compiled, but dynamo inlined the legacy Function's forward: the graph differentiates "
          "torch.prod with torch's own formula (pytorch#193279), so it agrees with torch's gradient")
_PROD_LEGACY_WRONG = ("the legacy formula is wrong here, not the strategy: for >= 2 zeros it returns "
                      "zeros_like(input) (no graph), so its second derivative is 0 where prod's "
                      "Hessian is not (sample 'full, two zeros'); the strategy agrees with the "
                      "formula's per-sample loop, torch's own gradient disagrees with both "
                      "(handfixed and builtin pass)")

#: (strategies, ops, scenarios, expected): later rules override earlier ones; ALL matches all.
RULES: list[tuple[Any, Any, Any, Expected]] = [
    # ---- no evidence: the second derivative of a piecewise-linear op is zero (the rules below
    # override it where a strategy fails)
    (ALL, [op for op in TEST_OPS if op != "prod"], ["jacrev_jacrev", "jacfwd_jacrev"], Expected(
        "uninformative", "", True, "the op is piecewise linear in its input, so torch's second "
        "derivative is identically zero: a formula returning zeros passes too (no evidence, never "
        "a fix)")),
    # ---- every strategy
    (ALL, ["masked_select"], ["vmap_all_args"], _fail("data_dependent", _DYNAMIC_MASK, ran=False)),
    # ---- plain: the legacy formula as written (its "mechanism" is the formula itself)
    (["plain"], ["diag"], [s for s in BACKWARD_NAMES if s != "vjp_of_vjp"], _fail(
        "vmap_inplace", "non-square samples: zeros(sizes).diagonal(k).copy_(grad) writes the "
        "batched grad into an unbatched buffer")),
    (["plain"], ["index_select"], [s for s in BACKWARD_NAMES if s != "vjp_of_vjp"], _fail(
        "vmap_inplace", "zeros(sizes).index_add_(dim, index, grad) writes the batched grad into an "
        "unbatched buffer")),
    (["plain"], ["topk", "mode", "sort"], [s for s in BACKWARD_NAMES if s != "vjp_of_vjp"],
     _fail("vmap_inplace", _SCATTER)),
    (["plain"], ["masked_select"], ["vmap_cotangents", *JACOBIANS], _fail(
        "vmap_inplace", "zeros_like(input.expand(...)).masked_scatter_(mask, grad): the buffer is "
        "unbatched (input is not batched at the grad's vmap level), the grad is")),
    (["plain"], ["clamp"], ["vmap_all_args"], _fail(
        "vmap_inplace", "mixed batching: (self >= min).logical_and_(self <= max) with self/min "
        "unbatched and max batched (an in_dims choice with None)")),
    (["plain", *FUNCTIONALIZING], ["prod"], PRIMAL_BATCHING, _fail("data_dependent", _NONZERO)),
    # ---- builtin: torch's own op and formula
    (["builtin"], ["masked_select"], ["vmap_all_args"], _fail("data_dependent", _DYNAMIC_MASK)),
    (["builtin"], ["masked_select"], ["vmap_cotangents"], Expected("mismatch", "", True,
        "torch 2.13 bug: masked_select's batched backward is silently wrong when the input (4,) is "
        "broadcast implicitly to the mask (3x4) and the batch is 3 (sample 'input (4,) broadcast "
        "to mask 3x4')")),
    (["builtin"], ["masked_select"], JACOBIANS, _fail(
        "other", "the same torch bug with a batch other than 3 (jacrev's one-hot rows): a size "
        "mismatch error (sample 'input (4,) broadcast to mask 3x4')")),
    # ---- composite
    (["composite"], ["prod"], ["grad_inside_vmap"], _fail(
        "data_dependent", "input needs grad under the grad level above vmap, so the Autograd "
        "kernel decomposes the op (batched kernel not called) and nonzero meets vmap", ran=False)),
    (["composite"], ALL, ["vjp_of_vjp"], _plain_path(
        "the first backward runs outside vmap and needs a graph, so the Autograd kernel decomposes "
        "the op; the vmapped second backward differentiates its recorded ops (prod: only its "
        "no-zero samples reach the kernel again, through the saved result)")),
    (["composite"], ["masked_select", "clamp"], ["grad_inside_vmap"], _plain_path(
        "a formula input needs grad under the grad level above vmap (masked_select's input, "
        "clamp's self), so the Autograd kernel decomposes the op before vmap; its in-place writes "
        "meet batched buffers here, so it passes as plain does")),
    # ---- hooks and whole: functionalize whole backward nodes / the whole vjp_fn
    (["hooks", "whole"], ["masked_select"], ["vmap_cotangents", "grad_inside_vmap", *JACOBIANS],
     _fail("functionalization_assert", _SAVED_EXPAND)),
    (["hooks", "whole"], ["clamp"], ["vmap_all_args"], _fail(
        "vmap_inplace", "(self >= min) is built from saved, non-functional tensors, so "
        "logical_and_ still writes in place into an unbatched mask with a batched operand")),
    (["hooks"], ["prod"], ["vjp_of_vjp"], _plain_path(
        "sample 'full, two zeros': the legacy formula returns zeros_like(input) (no graph), so the "
        "vmapped second backward runs no node to hook")),
    # ---- per_formula and traced
    (["per_formula"], ALL, ["vjp_of_vjp"], _plain_path(
        _FIRST_BACKWARD_OUTSIDE + " (prod: only its no-zero samples run the formula again under "
        "vmap, through the saved result)")),
    # traced runs its graph whenever a functorch level is active (vjp's grad level too), so under
    # vjp_of_vjp the vmapped second backward differentiates the graph's ops: its mechanism ran.
    (["traced"], ["prod"], ["vmap_cotangents", "vjp_of_vjp", "jacrev", "jacrev_jacrev",
                            "jacfwd_jacrev"], _plain_path(
        "prod's formula cannot be traced (data-dependent .item()/nonzero on fake tensors): it falls "
        "back to per_formula, which passes with the input unbatched")),
    (["traced"], ["prod"], PRIMAL_BATCHING, _fail(
        "data_dependent", "untraceable, so the per_formula fallback runs, and " + _NONZERO, ran=False)),
    # ---- compiled (a reference row: torch.compile, aot_eager, of the whole transform call)
    (["compiled"], ["masked_select", "clamp", "diag", "index_select"], ["vmap_cotangents", *JACOBIANS],
     _fail("other", _CTX, ran=False)),
    (["compiled"], ["topk", "mode", "sort"], ALL, _fail("vmap_inplace", _FALLBACK, ran=False)),
    (["compiled"], ["clamp", "diag", "index_select"], ["vmap_all_args"], _fail("vmap_inplace", _FALLBACK, ran=False)),
    (["compiled"], ["diag", "index_select"], ["grad_inside_vmap"], _fail("vmap_inplace", _FALLBACK, ran=False)),
    (["compiled"], ["masked_select", "clamp"], ["grad_inside_vmap"], _plain_path(_EAGER_PASS)),
    (["compiled"], ALL, ["vjp_of_vjp"], _plain_path(_EAGER_PASS + "; the first backward runs outside vmap")),
    (["compiled"], ["prod"], ["vmap_all_args", "grad_inside_vmap"], _fail(
        "data_dependent", "eager fallback: nonzero/.item() in the formula meets vmap", ran=False)),
    (["compiled"], ["prod"], ["vmap_jacrev"], _fail(
        "data_dependent", "dim=1 samples: .item() under vmap (the full samples compile on torch's formula)",
        ran=False)),
    (["compiled"], ["prod"], ["vmap_cotangents"], _fail(
        "other", "AOTAutograd raises 'Cannot access storage of TensorWrapper' on dynamo's graph (samples "
        "'full, ...'; the eager backend passes them on torch's formula)", ran=False)),
    (["compiled"], ["prod"], ["jacrev", "jacrev_jacrev", "jacfwd_jacrev"], _plain_path(_TORCH)),
    (["compiled"], ["prod"], ["vjp_of_vjp"], Expected("mismatch", "legacy_wrong", False,
        "the eager fallback runs the legacy formula as written: " + _PROD_LEGACY_WRONG)),
    # ---- the legacy formula itself is wrong (checked against torch's own gradient): every
    # strategy that runs it inherits the error; mechanism_ran as the rules above say
    *[([st], ["prod"], [sc], Expected("mismatch", "legacy_wrong", ran, _PROD_LEGACY_WRONG))
      for st, sc, ran in [(st, sc, st in ("plain", "whole") or (sc != "vjp_of_vjp" and st != "traced"))
                          for st in ("plain", *FUNCTIONALIZING)
                          for sc in ("vjp_of_vjp", "jacrev_jacrev", "jacfwd_jacrev")]],
]


def _names(spec: Any, universe: Iterable[str]) -> list[str]:
    return list(universe) if spec == ALL else list(spec)


def table() -> dict[tuple[str, str, str], Expected]:
    """Every (strategy, op, scenario) of the test-op matrix with its reviewed expectation."""
    out = {(st, op, sc): Expected() for st in STRATEGIES for op in TEST_OPS for sc in BACKWARD_NAMES}
    for strategies, ops, scenarios, exp in RULES:
        for st in _names(strategies, STRATEGIES):
            for op in _names(ops, TEST_OPS):
                for sc in _names(scenarios, BACKWARD_NAMES):
                    out[st, op, sc] = exp
    return out


def expected(strategy: str, op: str, scenario: str) -> Expected:
    """The reviewed expectation of one cell (KeyError if the cell is not in the reviewed table)."""
    return table()[strategy, op, scenario]


def differences(summary: dict[tuple[str, str, str], dict[str, Any]],
                reviewed: dict[tuple[str, str, str], Expected] | None = None) -> list[str]:
    """Each cell of ``summary`` (:func:`funcbwd_lab.studies.matrix.matrix.summarize`, keyed (op, scenario,
    strategy)) whose status, reason or mechanism_ran differs from the table (``reviewed``, default
    :func:`table`; :func:`cpp_table` for the C++ study's cells), as one line each; cells the
    table does not cover are listed too."""
    exp = table() if reviewed is None else reviewed
    out = []
    for (op, sc, st), cell in sorted(summary.items()):
        e = exp.get((st, op, sc))
        if e is None:
            out.append(f"{st} {op} {sc}: no reviewed expectation")
            continue
        got = (cell["status"], cell["reason"] if cell["status"] != "pass" else "", cell["mechanism_ran"])
        want = (e.status, e.reason, e.mechanism_ran)
        if got != want:
            out.append(f"{st} {op} {sc}: got {got}, expected {want} ({e.why or 'pass'})")
    return out


# ------------------------------------------------------------------ the C++ study's strategies
#: the C++ study's strategies (role "cpp", funcbwd_lab.strategies.cpp): the same formulas and the
#: same mechanisms written in C++, each expected to give its Python counterpart's cell, cell for
#: cell (checked: every cell of data/cpp.json's matrix against data/matrix-test-ops.json's)
CPP_STRATEGIES = tuple(names("cpp"))
CPP_COUNTERPART = {"cpp_legacy": "plain", "cpp_handfixed": "handfixed", "cpp_guard": "per_formula",
                   "cpp_composite": "composite", "cpp_whole": "whole", "cpp_traced": "traced"}
#: exceptions to the counterpart rule, as RULES (later rules override); none found so far
CPP_RULES: list[tuple[Any, Any, Any, Expected]] = []


def cpp_table() -> dict[tuple[str, str, str], Expected]:
    """Every (C++ strategy, test op, scenario) with its reviewed expectation: the counterpart's,
    its why saying so, then :data:`CPP_RULES`."""
    base = table()
    out = {}
    for st, py in CPP_COUNTERPART.items():
        for op in TEST_OPS:
            for sc in BACKWARD_NAMES:
                e = base[py, op, sc]
                why = f"as {py}, the same formula and mechanism in C++" + (f": {e.why}" if e.why else "")
                out[st, op, sc] = dataclasses.replace(e, why=why)
    for strategies, ops, scenarios, exp in CPP_RULES:
        for st in _names(strategies, CPP_STRATEGIES):
            for op in _names(ops, TEST_OPS):
                for sc in _names(scenarios, BACKWARD_NAMES):
                    out[st, op, sc] = exp
    return out
