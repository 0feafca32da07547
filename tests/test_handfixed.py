"""The ``handfixed`` reference: core's modern out-of-place formulas, written in Python and run
through the legacy op, against the legacy formulas, torch's own gradients and the matrix.

(a) unbatched, every handfixed formula equals the legacy formula and torch's own gradient on
    every sample, has the legacy signature, and is one out-of-place, data-independent graph;
(b) the ``handfixed`` strategy passes every matrix cell of the 8 test ops where ``builtin``
    passes (checked against torch's own per-sample loop, and against the legacy loop except where
    that loop is itself shown to disagree with torch);
(c) a handfixed formula made in place again fails the vmap cotangent cell.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import pytest
import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import vjp, vmap

import funcbwd
import funcbwd_lab
from funcbwd_lab.run.runner import run as run_cell
from funcbwd_lab.strategies.handfixed import handfixed_formula

TEST_OPS = ("masked_select", "clamp", "diag", "index_select", "topk", "prod", "mode", "sort")
#: the legacy corpus: each op's module defines its modern formula right below the legacy one
#: (the live group carries the two branches of one helper instead)
CORPUS = [n for g in ("test", "extended", "negative_control") for n in funcbwd_lab.op_names(g)
          if funcbwd_lab.get_op(n).kind == "backward"]
HANDFIXED_OPS = [n for n in CORPUS if funcbwd_lab.get_op(n).handfixed is not None]


SCENARIOS = ("vmap_cotangents", "vmap_all_args", "vjp_of_vjp", "grad_inside_vmap", "jacrev",
             "jacrev_jacrev", "jacfwd_jacrev", "vmap_jacrev")

Handfixed = type(funcbwd_lab.get_strategy("handfixed"))
Builtin = type(funcbwd_lab.get_strategy("builtin"))


class HandfixedVsTorch(Handfixed):
    """handfixed, checked against torch's own per-sample loop instead of the legacy one."""

    name = "handfixed_vs_torch"

    def reference(self):
        return funcbwd_lab.get_strategy("builtin")


class BuiltinVsLegacy(Builtin):
    """builtin, checked against the legacy per-sample loop: shows where that loop disagrees
    with torch."""

    name = "builtin_vs_legacy"

    def reference(self):
        return funcbwd_lab.get_strategy("plain")


def _formula_args(spec, sample, seed: int = 0) -> tuple:
    """The formula's args for ``sample`` with seeded random cotangents."""
    with torch.no_grad():
        outs = spec.outputs_tuple(spec.torch_op(*sample.args))
    gen = torch.Generator().manual_seed(seed)
    grads = tuple(torch.randn(outs[i].shape, generator=gen, dtype=outs[i].dtype)
                  for i in spec.diff_outputs)
    return spec.formula_args(sample.args, outs, grads), grads


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _assert_same(a: tuple, b: tuple, what: str) -> None:
    assert len(a) == len(b), what
    for i, (x, y) in enumerate(zip(a, b)):
        assert (x is None) == (y is None), f"{what}: output {i} is None in one only"
        if x is not None:
            torch.testing.assert_close(x, y, msg=lambda m: f"{what}: output {i}: {m}")


# ================================================================== (a) unbatched
def test_every_test_op_and_most_of_the_corpus_carry_a_modern_formula():
    assert set(TEST_OPS) <= set(HANDFIXED_OPS)
    assert len(HANDFIXED_OPS) >= len(CORPUS) - 3, sorted(set(CORPUS) - set(HANDFIXED_OPS))


@pytest.mark.parametrize("op", HANDFIXED_OPS)
def test_signature_is_the_legacy_formulas(op):
    def shape(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    spec = funcbwd_lab.get_op(op)
    assert shape(spec.handfixed) == shape(spec.formula)


@pytest.mark.parametrize("op", HANDFIXED_OPS)
def test_equals_legacy_formula_on_every_sample(op):
    spec = funcbwd_lab.get_op(op)
    for k, sample in enumerate(spec.samples()):
        args, _ = _formula_args(spec, sample, seed=10 + k)
        _assert_same(_as_tuple(handfixed_formula(spec)(*args)), _as_tuple(spec.formula(*args)),
                     f"{op} / {sample.name}")


@pytest.mark.parametrize("op", HANDFIXED_OPS)
def test_gradient_through_the_legacy_op_equals_torchs_own(op):
    """autograd.grad through the legacy op under handfixed == autograd.grad through torch's op."""
    spec = funcbwd_lab.get_op(op)
    st = funcbwd_lab.get_strategy("handfixed")
    for k, sample in enumerate(spec.samples()):
        _, grads = _formula_args(spec, sample, seed=20 + k)
        results = []
        for fn in (st.function(spec), spec.torch_op):
            with torch.enable_grad():
                full = list(sample.args)
                prim = [full[p].detach().clone().requires_grad_() for p in sample.diff]
                for p, v in zip(sample.diff, prim):
                    full[p] = v
                outs = spec.diff_out(fn(*full))
                results.append(torch.autograd.grad(outs, prim, grads, allow_unused=True))
        _assert_same(*results, f"{op} / {sample.name}: handfixed vs torch")


def _trace(fn: Callable[..., Any], args: tuple) -> torch.fx.GraphModule:
    """make_fx graph of fn(*args) on fake tensors (raises on data-dependent control flow)."""
    leaves, spec = pytree.tree_flatten(args)
    tpos = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def flat(*tensors):
        full = list(leaves)
        for p, t in zip(tpos, tensors):
            full[p] = t
        return fn(*pytree.tree_unflatten(full, spec))

    return make_fx(flat, tracing_mode="fake")(*[leaves[i] for i in tpos])


def _mutating_ops(gm: torch.fx.GraphModule) -> list[str]:
    return sorted({str(n.target) for n in gm.graph.nodes
                   if n.op == "call_function" and getattr(n.target, "_schema", None) is not None
                   and n.target._schema.is_mutable})


@pytest.mark.parametrize("op", HANDFIXED_OPS)
def test_is_one_out_of_place_graph_for_every_sample(op):
    spec = funcbwd_lab.get_op(op)
    for sample in spec.samples():
        args, _ = _formula_args(spec, sample)
        gm = _trace(handfixed_formula(spec), args)  # fake tensors: .item()/nonzero would raise
        assert _mutating_ops(gm) == [], f"{op} / {sample.name}"


def test_graph_checks_can_fail_on_the_legacy_formulas():
    diag = funcbwd_lab.get_op("diag")
    args, _ = _formula_args(diag, diag.sample("3x5 k=1"))
    assert _mutating_ops(_trace(diag.formula, args)) == ["aten.copy_.default"]
    prod = funcbwd_lab.get_op("prod")
    for name in ("full, one zero", "dim=1, one zero"):
        args, _ = _formula_args(prod, prod.sample(name))
        with pytest.raises(Exception, match="data-dependent"):
            _trace(prod.formula, args)


# ================================================================== the strategy and OpSpec.handfixed
def test_strategy_is_registered_and_checked_against_the_legacy_loop():
    st = funcbwd_lab.get_strategy("handfixed")
    assert st.name == "handfixed" and st.reference() == "plain"


def test_the_strategy_runs_the_specs_own_handfixed_formula():
    spec = funcbwd_lab.get_op("diag")
    assert handfixed_formula(spec) is spec.handfixed is not None

    def own(grad, input_sizes, diagonal):
        return spec.handfixed(grad, input_sizes, diagonal) * 2

    patched = dataclasses.replace(spec, name="diag_handfixed_doubled", handfixed=own)
    assert handfixed_formula(patched) is own
    sample = spec.sample("3x5 k=1")
    doubled = run_cell(patched, "vmap_cotangents", "handfixed", sample)
    assert doubled.status == "mismatch"  # its own formula ran, compared with the legacy loop


def test_ops_without_a_handfixed_formula_are_not_applicable():
    missing = [n for n in CORPUS if n not in HANDFIXED_OPS]
    assert missing, "every op has a handfixed formula: pick another op for this test"
    spec = funcbwd_lab.get_op(missing[0])
    cell = run_cell(spec, "vmap_cotangents", "handfixed", spec.sample())
    assert cell.status == "not_applicable" and "no handfixed formula" in cell.message
    with pytest.raises(funcbwd.NotApplicableError, match="no handfixed formula"):
        args, _ = _formula_args(spec, spec.sample())
        funcbwd_lab.get_strategy("handfixed").run_formula(spec, args)


# ================================================================== (b) the matrix
@pytest.fixture(scope="module")
def cells() -> dict[tuple[str, str, str], dict[str, Any]]:
    """(op, sample, scenario) -> {strategy label: cell result} for the 8 test ops, every sample."""
    strategies = {"builtin": "builtin", "handfixed": "handfixed",
                  "handfixed_vs_torch": HandfixedVsTorch()}
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for op in TEST_OPS:
        spec = funcbwd_lab.get_op(op)
        for sample in spec.samples():
            for sc in SCENARIOS:
                out[op, sample.name, sc] = {label: run_cell(spec, sc, st, sample)
                                            for label, st in strategies.items()}
    return out


def _brief(r) -> str:
    return f"{r.status} {r.reason} {r.message[:160]}".strip()


#: a pass, or a cell where torch's answer is zero (uninformative: both agree, and prove nothing)
OK = ("pass", "uninformative")


def test_handfixed_matches_torch_wherever_builtin_passes(cells):
    passing = [k for k, c in cells.items() if c["builtin"].status in OK]
    assert len(passing) > 0.8 * len(cells)
    bad = {k: _brief(cells[k]["handfixed_vs_torch"]) for k in passing
           if cells[k]["handfixed_vs_torch"].status not in OK}
    assert not bad, bad


def test_handfixed_passes_wherever_builtin_passes_unless_the_legacy_loop_is_wrong(cells):
    """Against the default (legacy) loop: every builtin-passing cell passes, except mismatches
    where builtin itself, checked against the same legacy loop, mismatches too (the legacy formula
    computes different numbers from torch, e.g. prod's second derivative with two zeros)."""
    excused = []
    for (op, sample, sc), c in cells.items():
        if c["builtin"].status not in OK or c["handfixed"].status in OK:
            continue
        assert c["handfixed"].status == "mismatch", ((op, sample, sc), _brief(c["handfixed"]))
        witness = run_cell(funcbwd_lab.get_op(op), sc, BuiltinVsLegacy(), sample)
        assert witness.status == "mismatch", ((op, sample, sc), _brief(witness))
        excused.append((op, sample, sc))
    # every excuse is a prod sample with more than one zero: the legacy formula's zeros_like
    # shortcut has a zero derivative there (core only takes it with grad mode off)
    assert all(op == "prod" and "two zeros" in sample for op, sample, _ in excused), excused


def test_where_builtin_fails_handfixed_passes_or_fails_for_data_dependence(cells, capsys):
    """Prints what handfixed does in every cell where builtin fails; it must pass there, or fail
    for a data-dependent reason (vmap over masked_select's mask: no formula can fix that)."""
    rows = [(k, c["builtin"], c["handfixed"]) for k, c in cells.items()
            if c["builtin"].status not in OK]
    with capsys.disabled():
        print(f"\nbuiltin fails in {len(rows)} of {len(cells)} cells; handfixed there:")
        for (op, sample, sc), b, h in rows:
            print(f"  {op} / {sample} / {sc}: builtin {_brief(b)[:70]!r} | "
                  f"handfixed {_brief(h)[:70]!r}")
    worse = [(k, _brief(h)) for k, _, h in rows
             if not (h.status in OK or (h.status == "fail" and h.reason == "data_dependent"))]
    assert not worse, worse


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_finding_builtin_masked_select_backward_is_wrong_under_vmap_for_broadcast_input():
    """torch's masked_select_backward batch rule (BatchRulesBinaryOps.cpp) aligns an unbatched
    lower-rank ``self`` with the mask's leading dim: vmap(vjp) gives wrong numbers when the batch
    size equals that dim and an error otherwise; the handfixed formula (out-of-place masked_scatter,
    then sum_to_size) matches the per-sample loop."""
    spec = funcbwd_lab.get_op("masked_select")
    sample = spec.sample("input (4,) broadcast to mask 3x4")
    x, mask = sample.args
    _, vjp_fn = vjp(lambda t: torch.masked_select(t, mask), x)
    cts = torch.randn(3, int(mask.sum()), generator=torch.Generator().manual_seed(7))
    loop = torch.stack([vjp_fn(c)[0] for c in cts])
    assert not torch.allclose(vmap(vjp_fn)(cts)[0], loop)
    handfixed = vmap(lambda c: spec.handfixed(c, x, mask))(cts)
    torch.testing.assert_close(handfixed, loop)


# ================================================================== (c) mutation check
def _diag_in_place_again(grad, input_sizes, diagonal):
    if len(input_sizes) == 1:
        return grad.diagonal(diagonal, -2, -1)
    grad_input = torch.zeros(tuple(input_sizes), dtype=grad.dtype)  # unbatched under vmap
    grad_input.diagonal(diagonal).copy_(grad)
    return grad_input


def _index_select_in_place_again(grad, self_sizes, dim, index):
    return torch.zeros(tuple(self_sizes), dtype=grad.dtype).index_add_(dim, index, grad)


@pytest.mark.parametrize("op,mutated,sample", [
    ("diag", _diag_in_place_again, "3x5 k=1"),
    ("index_select", _index_select_in_place_again, "dim0 repeated"),
])
def test_handfixed_made_in_place_again_fails_the_vmap_cotangent_cell(op, mutated, sample):
    spec = funcbwd_lab.get_op(op)
    good = run_cell(spec, "vmap_cotangents", "handfixed", sample)
    assert good.status == "pass", _brief(good)
    bad_spec = dataclasses.replace(spec, name=f"{op}_handfixed_in_place", handfixed=mutated)
    args, _ = _formula_args(spec, spec.sample(sample))
    _assert_same(_as_tuple(mutated(*args)), _as_tuple(spec.formula(*args)), "unbatched it is right")
    assert _mutating_ops(_trace(mutated, args)), "the graph check sees the mutation"
    bad = run_cell(bad_spec, "vmap_cotangents", "handfixed", sample)
    assert bad.status == "fail" and bad.reason == "vmap_inplace", _brief(bad)
