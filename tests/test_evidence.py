"""The evidence rules of the cell runner, each with the broken case it must catch.

* the caller's tensors are the caller's: a formula that writes into its ``grad`` is reported as a
  property of the formula (eager autograd writes too), the references never see the change, and a
  strategy that writes into a caller tensor eager would not touch fails (``mutated_input``);
* errors are measured, never assumed: a pass carries its measured error, an injected error above
  the dtype's tolerance is a mismatch with that error;
* tolerances and output dtypes depend on the dtype: a float32 result served to a float64 cell fails;
* torch's own gradient is the truth: where the legacy formula is wrong (prod's second derivative
  with two zeros), a strategy agreeing with it is a mismatch (``legacy_wrong``) and the modern
  formula passes.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from funcbwd import internals
from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd import compare, tolerances
from funcbwd_lab.run import runner
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.per_formula import PerFormula
from funcbwd_lab.strategies.plain import Plain
from funcbwd_lab.strategies.traced import Traced

STRATEGIES = ("plain", "per_formula", "traced", "whole", "hooks")


def _doubling(name: str, formula) -> OpSpec:
    """An op ``2 * x`` whose backward formula is ``formula(grad)``."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, generator=gen)
    return OpSpec(name=name, torch_op=lambda t: t * 2, formula=formula,
                  formula_args=lambda a, o, g: (g[0],), grad_positions=(0,), source="a test formula",
                  fixed_by="-", make_samples=lambda: [Sample("3x4", (x,))],
                  schema="(Tensor grad) -> Tensor", group="test_only")


def _writes_grad(grad: torch.Tensor) -> torch.Tensor:
    return grad.mul_(2)  # right value, but written into the caller's cotangent


def _fills_grad(grad: torch.Tensor) -> torch.Tensor:
    out = grad * 2
    grad.fill_(0.0)  # right value returned; the caller's cotangent zeroed
    return out


WRITES = _doubling("writes_grad", _writes_grad)
FILLS = _doubling("fills_grad", _fills_grad)
CLEAN = _doubling("clean_grad", lambda grad: grad * 2)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("spec", [WRITES, FILLS], ids=lambda s: s.name)
def test_a_formula_writing_into_grad_is_its_own_property_and_corrupts_no_reference(spec, strategy):
    cell = runner.run(spec, "vmap_cotangents", strategy)
    # the references ran on copies made before the call: the result equals torch's gradient
    assert cell.status == "pass", cell.record()
    assert cell.truth_err == 0.0 and cell.max_abs_err == 0.0
    changed = {m["tensor"]: m for m in cell.input_mutation or []}
    if "cotangent 0" in changed:  # reported, and known to be what eager autograd does too
        assert changed["cotangent 0"]["eager_too"] and changed["cotangent 0"]["max_abs_change"] > 0
    assert strategy != "plain" or "cotangent 0" in changed, "eager-like plain must show the write"


def test_eager_autograd_is_what_tells_a_formula_property_from_a_strategy_bug():
    from funcbwd_lab.run import caller
    from funcbwd_lab.strategies import get_strategy

    plain = get_strategy("plain")
    assert "cotangent 0" in caller.eager_changes(WRITES, WRITES.sample(), plain)
    assert caller.eager_changes(CLEAN, CLEAN.sample(), plain) == {}


class WritesIntoGrad(PerFormula):
    """A broken strategy: after the (functionalized) formula it adds 1 to the grad it was given,
    which is the caller's cotangent; eager autograd of the clean formula writes nothing."""

    name = "writes_into_grad"

    def run_formula(self, op, args):
        out = super().run_formula(op, args)
        if internals.vmap_active():
            args[0].add_(1.0)
        return out


def test_a_strategy_changing_a_caller_tensor_fails_the_cell():
    good = runner.run(CLEAN, "vmap_cotangents", "per_formula")
    assert good.status == "pass" and good.input_mutation is None
    bad = runner.run(CLEAN, "vmap_cotangents", WritesIntoGrad())
    assert (bad.status, bad.reason) == ("fail", "mutated_input"), bad.record()
    assert bad.input_mutation[0]["tensor"] == "cotangent 0"
    assert not bad.input_mutation[0]["eager_too"]


class Off(Plain):
    """A strategy whose formula result is off by ``delta`` everywhere, under vmap only."""

    def __init__(self, delta: float, name: str = "off"):
        self.delta, self.name = delta, name

    def run_formula(self, op, args):
        out = super().run_formula(op, args)
        provenance.record(self.name, "off", True)
        return out + self.delta if internals.vmap_active() else out

    def reference(self):
        from funcbwd_lab.strategies import get_strategy

        return get_strategy("plain")


class TriplesGrad(PerFormula):
    """A broken strategy on WRITES (eager leaves the caller's cotangent x2): it returns the right
    value but leaves the caller's cotangent x3 (or zeroed); eager changes it too, by name only."""

    def __init__(self, factor: float, name: str):
        super().__init__()
        self.factor, self.name = factor, name

    def run_formula(self, op, args):
        out = super().run_formula(op, args)
        if internals.vmap_active():
            with torch.no_grad():
                args[0].mul_(self.factor / 2)  # the formula already left it x2
        return out


@pytest.mark.parametrize("factor", [3.0, 0.0])
def test_eager_changing_the_cotangent_too_is_compared_by_value(factor):
    bad = runner.run(WRITES, "vmap_cotangents", TriplesGrad(factor, f"times_{factor:g}"))
    assert (bad.status, bad.reason) == ("fail", "mutated_input"), bad.record()
    m = bad.input_mutation[0]
    assert m["tensor"] == "cotangent 0" and not m["eager_too"] and m["vs_eager"] > 0
    # per_formula leaves what eager leaves (x2): the formula's own property
    same = runner.run(WRITES, "vmap_cotangents", "per_formula")
    assert same.status == "pass", same.record()
    assert same.input_mutation and all(m["eager_too"] and m["vs_eager"] == 0.0 for m in same.input_mutation)


def test_a_pass_carries_its_measured_error_and_an_error_over_tolerance_is_a_mismatch():
    small = runner.run(CLEAN, "vmap_cotangents", Off(5e-7))
    assert small.status == "pass"
    assert small.max_abs_err == pytest.approx(5e-7, rel=0.05)  # measured, not 0.0
    assert small.truth_err == pytest.approx(5e-7, rel=0.05)
    big = runner.run(CLEAN, "vmap_cotangents", Off(5e-5))
    assert big.status == "mismatch", big.record()
    assert big.max_abs_err == pytest.approx(5e-5, rel=0.05)
    assert "float32 default" in big.tolerance


class ServesFloat32(Plain):
    """The bug of a cache that reuses a float32 graph for float64 args: under vmap the formula
    computes in float32 (autograd casts its result back to the input's dtype, so only the values
    show it: float32 rounding, up to 6e-8 relative)."""

    name = "serves_float32"

    def run_formula(self, op, args):
        if not internals.vmap_active():
            return super().run_formula(op, args)
        return super().run_formula(op, tuple(a.float() if isinstance(a, torch.Tensor) else a
                                             for a in args))

    def reference(self):
        from funcbwd_lab.strategies import get_strategy

        return get_strategy("plain")


def test_the_output_dtype_is_compared_and_float64_has_its_own_tolerance():
    ok = runner.run(CLEAN, "vmap_cotangents", "plain", dtype=torch.float64)
    assert ok.status == "pass" and ok.dtype == "float64" and "float64" in ok.tolerance
    bad = runner.run(CLEAN, "vmap_cotangents", ServesFloat32(), dtype=torch.float64)
    assert bad.status == "mismatch" and 1e-9 < bad.max_abs_err < 1e-5, bad.record()
    assert runner.run(CLEAN, "vmap_cotangents", ServesFloat32()).status == "pass"  # float32: right
    # structure: an output of another dtype is a mismatch, whatever its values
    e = torch.ones(4, dtype=torch.float64)
    wrong_dtype = compare.compare([e.float()], [e])
    assert not wrong_dtype.ok and "dtype float32 != float64" in wrong_dtype.detail
    # an error of 3.6e-5 passes no float tolerance; 5e-8 passes float32's but not float64's
    assert not compare.compare([e + 3.6e-5], [e]).ok
    assert compare.compare([(e + 5e-8).float()], [e.float()]).ok
    assert not compare.compare([e + 5e-8], [e]).ok


def test_comparisons_measure_errors_and_say_what_differs():
    e = torch.tensor([1.0, 2.0, float("nan"), 0.0])
    c = compare.compare([torch.tensor([1.0, 2.2, float("nan"), 0.0])], [e])
    assert not c.ok and c.max_abs_err == pytest.approx(0.2, rel=1e-5)
    assert c.max_rel_err == pytest.approx(0.1, rel=1e-5) and "output 0" in c.detail
    assert compare.compare([e.clone()], [e]).ok  # NaN equals NaN
    nan_vs_number = compare.compare([torch.tensor([float("nan")])], [torch.tensor([1.0])])
    assert not nan_vs_number.ok and math.isinf(nan_vs_number.max_abs_err)
    shape = compare.compare([torch.zeros(2)], [torch.zeros(3)])
    assert not shape.ok and "shape" in shape.detail
    assert not compare.compare([torch.zeros(2)], [torch.zeros(2), torch.zeros(2)]).ok
    exact = tolerances.tolerance(torch.int64)
    assert (exact.atol, exact.rtol) == (0.0, 0.0)


def test_a_loosening_applies_to_what_it_names_only():
    loose = [tolerances.Loosening(("diag",), ("jacrev",), (torch.float32,), 1e-3, 1e-3, "a test")]
    t = tolerances.tolerance(torch.float32, "diag", "jacrev", loose)
    assert (t.atol, "a test" in t.source) == (1e-3, True)
    for other in [("diag", "vmap_cotangents", torch.float32), ("sort", "jacrev", torch.float32),
                  ("diag", "jacrev", torch.float64)]:
        assert tolerances.tolerance(other[2], other[0], other[1], loose).source.endswith("default")


def test_where_the_legacy_formula_is_wrong_torchs_gradient_decides():
    """prod's legacy second derivative with two zeros is 0 (the formula returns zeros_like, no
    graph); torch's Hessian is not. Agreeing with the legacy loop is no longer enough."""
    for scenario in ("vjp_of_vjp", "jacrev_jacrev", "jacfwd_jacrev"):
        plain = runner.run("prod", scenario, "plain", "full, two zeros")
        assert (plain.status, plain.reason) == ("mismatch", "legacy_wrong"), plain.record()
        assert plain.max_abs_err == 0.0 and plain.truth_err > 1e-4 and plain.legacy_wrong
        modern = runner.run("prod", scenario, "handfixed", "full, two zeros")
        assert modern.status == "pass" and modern.truth_err < 1e-5 and modern.legacy_wrong
        assert modern.max_abs_err > 1e-4  # it disagrees with the (wrong) legacy loop
    fine = runner.run("prod", "jacrev_jacrev", "plain", "full, one zero")
    assert fine.status == "pass" and not fine.legacy_wrong


def test_cli_json_records_carry_measured_errors_truth_and_mutation(capsys):
    from funcbwd_lab import cli

    assert cli.main(["matrix", "--ops", "diag", "--strategies", "plain,traced",
                     "--scenarios", "vmap_cotangents,jacrev", "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records and all({"max_abs_err", "truth_err", "input_mutation", "dtype"} <= set(r) for r in records)
    for r in records:
        if r["status"] == "pass":
            assert isinstance(r["max_abs_err"], float) and isinstance(r["truth_err"], float), r
        assert r["input_mutation"] is None


def _strided(t: torch.Tensor) -> torch.Tensor:
    return t.as_strided((2, 3), (1, 2), 1)  # an explicit storage offset: absolute in the storage


STRIDED = OpSpec(name="strided_offset", torch_op=_strided,
                 formula=lambda x, g: torch.zeros_like(x).as_strided_scatter(g, (2, 3), (1, 2), 1),
                 formula_args=lambda a, o, g: (a[0], g[0]), grad_positions=(0,), source="a test formula",
                 fixed_by="-", make_samples=lambda: [Sample("4x4", (torch.randn(
                     4, 4, generator=torch.Generator().manual_seed(3)),))],
                 schema="(Tensor self, Tensor grad) -> Tensor", group="test_only")


@pytest.mark.parametrize("scenario", ["grad_inside_vmap", "vmap_jacrev"])
def test_torchs_gradient_per_entry_runs_on_a_clone_not_a_view_of_the_batch(scenario):
    # on an uncloned view x[b] the storage offset 1 is entry 0's storage: torch's "truth" was
    # entry 0's gradient for every entry, and builtin (right) was marked legacy_wrong (1.91, 1.0)
    cell = runner.run(STRIDED, scenario, "builtin")
    assert cell.status == "pass", cell.record()
    assert cell.truth_err == 0.0 and not cell.legacy_wrong


class ZerosTraced(Traced):
    """A broken ``traced``: its backward returns zeros under every transform (as written outside
    them, so its reference loop is the right formula)."""

    name = "zeros_traced"

    def run_formula(self, op, args):
        out = super().run_formula(op, args)
        if internals.stack_depth() == 0:
            return out
        if isinstance(out, (tuple, list)):
            return tuple(None if o is None else torch.zeros_like(o) for o in out)
        return torch.zeros_like(out)


def test_a_cell_whose_truth_is_zero_is_uninformative_and_never_a_fix():
    from funcbwd_lab.studies.matrix.summary import fixes_over_plain

    zeros = ZerosTraced()
    # index_select's second derivative is zero: the zeros formula "passes" jacrev_jacrev and jacfwd_jacrev
    cells = [runner.run("index_select", sc, s) for sc in ("jacrev_jacrev", "jacfwd_jacrev")
             for s in (zeros, "traced", "plain")]
    by = {(c.scenario, c.strategy): c for c in cells}
    for sc in ("jacrev_jacrev", "jacfwd_jacrev"):
        assert by[sc, "zeros_traced"].status == "uninformative", by[sc, "zeros_traced"].record()
        assert by[sc, "traced"].status == "uninformative"  # the right formula is no evidence there either
        assert by[sc, "plain"].status in ("fail", "mismatch")
    kinds = fixes_over_plain(cells)
    assert kinds["zeros_traced"]["fixes"] == [] and kinds["traced"]["fixes"] == []
    assert kinds["zeros_traced"]["uninformative"] == [("index_select", "jacfwd_jacrev"),
                                                     ("index_select", "jacrev_jacrev")]
    # where the answer is not zero the same mutant is caught
    assert runner.run("index_select", "vmap_cotangents", zeros).status == "mismatch"
    assert runner.run("prod", "jacrev_jacrev", zeros).status == "mismatch"
