"""Provenance in every cell: ``mechanism`` says what of the strategy ran, ``mechanism_ran`` whether
its own mechanism acted (funcbwd_lab.strategies.provenance, collected by the runner around the
strategy's part of a cell only).

* Every strategy says what ran on a cell that needs its mechanism.
* The known passes without the mechanism are shown as such: composite under grad_inside_vmap for
  masked_select and clamp (its kernel is not called), per_formula under vjp_of_vjp (the first
  backward runs outside vmap); tables mark them "ok*".
* The per-sample reference loop is not collected.
* Mutation: a per_formula variant whose decorator never functionalizes shows mechanism_ran False
  and fails where functionalization is needed.
"""

from __future__ import annotations

import functools

import pytest

from funcbwd import internals
from funcbwd_lab.run import runner
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.studies.matrix import records
from funcbwd_lab.strategies import available, provenance
from funcbwd_lab.strategies.per_formula import PerFormula, observed

NEEDS_MECHANISM = ("diag", "vmap_cotangents", "3x5 k=1")  # plain fails it: vmap_inplace


@pytest.mark.parametrize("strategy", available())
def test_every_strategy_says_what_ran(strategy):
    r = runner.run(*NEEDS_MECHANISM[:2], strategy, NEEDS_MECHANISM[2])
    assert r.mechanism, f"{strategy} recorded nothing"
    assert r.mechanism_ran == (r.status == "pass" or strategy == "plain"), (r.status, r.mechanism)


@pytest.mark.parametrize("op", ["masked_select", "clamp"])
def test_composite_kernel_is_not_called_under_grad_inside_vmap(op):
    r = runner.run(op, "grad_inside_vmap", "composite")
    assert r.status == "pass" and not r.mechanism_ran and r.without_mechanism
    assert r.mechanism == "op decomposed before vmap (kernel not called)"


def test_vjp_of_vjp_passes_without_functionalizing():
    r = runner.run("diag", "vjp_of_vjp", "per_formula", "3x5 k=1")
    assert (r.status, r.mechanism_ran, r.mechanism) == ("pass", False, "formula ran as written (no vmap level)")
    p = runner.run("diag", "vjp_of_vjp", "plain", "3x5 k=1")
    assert p.status == "pass" and p.mechanism == "legacy formula ran as written (no vmap level)"


def test_the_reference_loop_is_not_collected():
    # plain's own part runs the formula once, under vmap; its per-sample loop (plain too) runs it
    # 3 times with no vmap level. Only the first may appear.
    r = runner.run("diag", "vmap_cotangents", "plain", "square 3x3 k=0")
    assert r.status == "pass" and r.mechanism == "legacy formula ran as written under vmap"


def test_recording_outside_a_cell_is_a_no_op_and_blocks_nest():
    provenance.record("x", "ignored", True)
    with provenance.collecting() as outer:
        provenance.record("x", "outer", True)
        with provenance.collecting() as inner:
            provenance.record("x", "inner", False)
    assert [e.mechanism for e in outer] == ["outer"] and [e.mechanism for e in inner] == ["inner"]


def test_records_and_tables_carry_the_mechanism():
    cells = [runner.run("diag", "vjp_of_vjp", "per_formula", "3x5 k=1"),
             runner.run("diag", "vmap_cotangents", "per_formula", "3x5 k=1")]
    rec = cells[0].record()
    assert rec["mechanism_ran"] is False and rec["mechanism"]
    assert "mechanism,mechanism_ran" in records.to_csv(cells).splitlines()[0]
    back = records.from_records([c.record() for c in cells])
    assert [(c.mechanism, c.mechanism_ran) for c in back] == [(c.mechanism, c.mechanism_ran) for c in cells]
    table = matrix.format_table(cells)
    assert "ok*" in table and "passed without the strategy's mechanism running" in table
    assert "ok*" not in matrix.format_table(cells[1:])


# ------------------------------------------------------------------------------ the mutation
class NeverFunctionalizes(PerFormula):
    """Deliberately broken: the same vmap-gated, observed formula, but never functionalized."""

    name = "per_formula_never_functionalizes"

    def wrapped(self, op):
        body = observed(op.formula, self.name)

        @functools.wraps(op.formula)
        def wrapper(*args):
            return body(*args) if internals.vmap_active() else op.formula(*args)

        return wrapper


def test_a_decorator_that_never_functionalizes_shows_it():
    broken = NeverFunctionalizes()
    r = runner.run(*NEEDS_MECHANISM[:2], broken, NEEDS_MECHANISM[2])
    assert (r.status, r.reason, r.mechanism_ran) == ("fail", "vmap_inplace", False)
    assert r.mechanism == "formula ran unfunctionalized under vmap"
    square = runner.run("diag", "vmap_cotangents", broken, "square 3x3 k=0")  # no in-place line
    assert square.status == "pass" and square.without_mechanism
    real = runner.run("diag", "vmap_cotangents", "per_formula", "square 3x3 k=0")
    assert real.status == "pass" and real.mechanism_ran
