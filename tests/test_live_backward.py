"""The live corpus, backward part (funcbwd_lab.ops.live.backward) against torch, against a broken variant, and
against its inventory (docs/live-sites.md).

* Faithfulness: for every registered site and sample, unbatched, the fast path (``formula``),
  the out-of-place path (``handfixed``) and core's plain-tensor behaviour (every site fast)
  each equal torch's own gradient of ``torch_op`` for a seeded random cotangent.
* Mutation: the site's first fast-path call is broken (an in-place call's result is perturbed
  when it takes a tensor operand; a data-dependent call is given a wrong answer). The same
  comparison must then fail (every sample for an in-place site, at least one for a control),
  while the out-of-place path still passes: the comparison can fail, the samples reach the
  site, and the call is the fast path's alone.
* Inventory: the doc's table and the registered sites agree (ids, kinds, op names, calls), and
  the doc's totals are its table's.
* Why it matters, on two sites: under ``vmap`` over cotangents of ``torch.func.vjp`` the fast
  path hits vmap's in-place error and the out-of-place path equals the per-sample loop.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re

import pytest
import torch

import funcbwd
import funcbwd_lab
from funcbwd_lab import legacy
from funcbwd_lab.ops.live import backward as L
from funcbwd_lab.ops.live import index as LF  # the module whose _index_put_impl_ a test swaps
from funcbwd_lab.ops.live import jvp as LJ

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "live-sites.md"
SPECS = {name: funcbwd_lab.get_op(name) for name in L.SITES}
CASES = [(name, s.name) for name, spec in SPECS.items() for s in spec.samples()]


# ------------------------------------------------------------------------------ helpers
def _cotangents(spec, outs: tuple, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    cts = [torch.randn(outs[i].shape, dtype=outs[i].dtype, generator=g) for i in spec.diff_outputs]
    if spec.formula.__wrapped_formula__ is L.linalg_eig_backward:  # real views of complex outputs
        V, gV = (torch.complex(t[..., 0], t[..., 1]) for t in (outs[1].detach(), cts[1]))
        cts[1] = torch.view_as_real(L.eig_gauge_fix(V, gV))
    return tuple(cts)


def _torch_grads(spec, sample) -> tuple[tuple, list]:
    """Cotangents and torch's own grads (create_graph=True, as torch.func.vjp differentiates)."""
    args = tuple(a.detach().clone().requires_grad_(i in sample.diff) if isinstance(a, torch.Tensor) else a
                 for i, a in enumerate(sample.args))
    outs = spec.outputs_tuple(spec.torch_op(*args))
    cts = _cotangents(spec, outs)
    grads = torch.autograd.grad([outs[i] for i in spec.diff_outputs], [args[p] for p in sample.diff],
                                cts, create_graph=True)
    return cts, [g.detach() for g in grads]


def _formula_grads(spec, sample, fn, cts) -> list:
    """Run ``fn`` on freshly built formula args with grad mode off (as in a plain backward); the
    grads of the sample's differentiable args, reduced to their shapes as the engine does."""
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in sample.args)
    with torch.no_grad():
        outs = spec.outputs_tuple(spec.torch_op(*args))
        res = fn(*spec.formula_args(args, outs, cts))
    res = res if isinstance(res, tuple) else (res,)
    return [res[spec.grad_positions.index(p)].sum_to_size(sample.args[p].shape) for p in sample.diff]


def _assert_close(got: list, ref: list, what: str) -> None:
    for i, (g, r) in enumerate(zip(got, ref)):
        tol = dict(rtol=1e-5, atol=1e-6) if r.dtype in (torch.float32, torch.complex64) else dict(rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(g, r, **tol, msg=lambda m: f"{what}, grad {i}: {m}")


def _matches(got: list, ref: list) -> bool:
    try:
        _assert_close(got, ref, "")
        return True
    except AssertionError:
        return False


def _all_fast(spec):
    return functools.partial(spec.formula.__wrapped_formula__, fast=L.ALL)


# ------------------------------------------------------------------------------ faithfulness
@pytest.mark.parametrize("name,sample_name", CASES)
def test_fast_path_equals_out_of_place_equals_torch(name, sample_name):
    spec = SPECS[name]
    sample = spec.sample(sample_name)
    cts, ref = _torch_grads(spec, sample)
    before = [a.clone() for a in sample.args if isinstance(a, torch.Tensor)]
    for label, fn in (("fast path", spec.formula), ("out-of-place path", spec.handfixed),
                      ("every site fast (core on plain tensors)", _all_fast(spec))):
        _assert_close(_formula_grads(spec, sample, fn, cts), ref, f"{name} [{sample_name}] {label}")
    for b, a in zip(before, (a for a in sample.args if isinstance(a, torch.Tensor))):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True,
                                   msg=f"{name}: a formula wrote into the sample's own tensors")


def test_every_site_registered_once_with_its_contract():
    assert len(SPECS) == len(set(s.site_id for s in L.SITES.values())) > 0
    for name, spec in SPECS.items():
        site = L.SITES[name]
        assert spec.group == "live" and spec.kind == "backward" and spec.handfixed is not None
        assert site.kind in ("backward", "control") and site.fast_calls
        assert (site.kind == "control") == spec.notes.startswith("negative control: data-dependent"), name
        assert spec.formula.__wrapped_formula__ is spec.handfixed.__wrapped_formula__
        assert re.fullmatch(r"live_[a-z_]+_\d+", name), name


# ------------------------------------------------------------------------------ mutation
def _perturbing(original):
    """The original call, then its result perturbed whenever it took a tensor operand (a
    scalar operand, as in ``div_(numel)``, is left alone: those calls sit on both paths)."""

    def broken(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        flat = [x for a in args for x in (a if isinstance(a, (list, tuple)) else (a,))]
        if any(isinstance(x, torch.Tensor) for x in flat):
            out.logical_not_() if out.dtype == torch.bool else out.add_(1)
        return out

    return broken


def _break(m: pytest.MonkeyPatch, call: str) -> None:
    if call == "allclose":
        m.setattr(torch, "allclose", lambda *a, **k: False)
    elif call == "item":
        m.setattr(torch.Tensor, "item", lambda self: 0)
    elif call == "nonzero":
        m.setattr(torch.Tensor, "nonzero", lambda self, *a, **k: torch.empty(0, self.dim(), dtype=torch.long))
    elif call == "masked_select":
        m.setattr(torch.Tensor, "masked_select", lambda self, mask: self.reshape(-1))
    elif call == "_index_put_impl_":
        m.setattr(LF, "_index_put_impl_", _perturbing(LF._index_put_impl_))
    else:
        m.setattr(torch.Tensor, call, _perturbing(getattr(torch.Tensor, call)))


@pytest.mark.parametrize("name", list(SPECS))
def test_broken_fast_path_fails_the_same_comparison(name, monkeypatch):
    spec, site = SPECS[name], L.SITES[name]
    call = site.fast_calls[0]
    fast_ok, slow_ok = [], []
    for sample in spec.samples():
        cts, ref = _torch_grads(spec, sample)
        with monkeypatch.context() as m:
            _break(m, call)
            try:
                fast = _formula_grads(spec, sample, spec.formula, cts)
            except RuntimeError:  # e.g. the eig check raising on a wrong allclose
                fast = None
            slow = _formula_grads(spec, sample, spec.handfixed, cts)
        fast_ok.append(fast is not None and _matches(fast, ref))
        slow_ok.append(_matches(slow, ref))
    assert all(slow_ok), f"{name}: breaking {call} changed the out-of-place path too"
    if site.kind == "backward":
        assert not any(fast_ok), f"{name}: breaking {call} went unnoticed for some sample: {fast_ok}"
    else:
        assert not all(fast_ok), f"{name}: breaking {call} went unnoticed for every sample"


def test_mutation_check_is_not_vacuous_unbroken(monkeypatch):
    """Control for the mutation test: the same harness, nothing broken, passes."""
    spec = SPECS["live_take_backward_1"]
    sample = spec.samples()[0]
    cts, ref = _torch_grads(spec, sample)
    with monkeypatch.context():
        assert _matches(_formula_grads(spec, sample, spec.formula, cts), ref)


# ------------------------------------------------------------------------------ inventory
def _doc_rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"`?[a-z_]+#\d+`?", cells[0]):
            rows.append(cells)
    return rows


def test_doc_table_and_registered_sites_agree():
    rows = _doc_rows()
    by_id = {r[0].strip("`"): r for r in rows}
    assert len(by_id) == len(rows), "duplicate site ids in the doc table"
    registered = {s.site_id: s for s in L.SITES.values()}
    listed = {i for i, r in by_id.items() if r[1] in ("backward", "control")}
    assert listed == set(registered), (f"only in doc: {sorted(listed - set(registered))}; "
                                       f"only registered: {sorted(set(registered) - listed)}")
    for site_id, site in registered.items():
        kind, op, calls = by_id[site_id][1], by_id[site_id][2], by_id[site_id][4]
        assert kind == site.kind, site_id
        assert op == f"`{site.op_name}`", site_id
        assert set(re.findall(r"`([A-Za-z_]+)`", calls)) == set(site.fast_calls), site_id
    others = [r for r in rows if r[1] not in ("backward", "control")]
    assert all(r[1] == "jvp" for r in others), others
    jvp_sites = {s.site_id: s for s in LJ.SITES.values() if s.counted}
    assert {r[0].strip("`") for r in others} == set(jvp_sites)
    for r in others:
        site = jvp_sites[r[0].strip("`")]
        assert r[2] == f"`{site.op_name}`", r[0]
        assert set(site.fast_calls) <= set(re.findall(r"`([A-Za-z_]+)`", r[4])), r[0]


def test_doc_totals_are_its_tables():
    rows = _doc_rows()
    text = DOC.read_text()
    m = re.search(r"Totals counted: (\d+) backward sites in (\d+) functions, (\d+) jvp sites in "
                  r"(\d+) functions, (\d+) data-dependent controls; (\d+) guarded in-place calls "
                  r"\((\d+) in backward sites, (\d+) in jvp sites\)", text)
    assert m, "the doc lost its totals line"
    totals = [int(x) for x in m.groups()]
    calls = {k: sum(int(r[5]) for r in rows if r[1] == k) for k in ("backward", "jvp")}
    assert totals[5:] == [calls["backward"] + calls["jvp"], calls["backward"], calls["jvp"]]
    totals = totals[:5]

    def function(r):
        return r[0].strip("`").split("#")[0]

    kinds = {k: [r for r in rows if r[1] == k] for k in ("backward", "jvp", "control")}
    assert totals == [len(kinds["backward"]), len({function(r) for r in kinds["backward"]}),
                      len(kinds["jvp"]), len({function(r) for r in kinds["jvp"]}), len(kinds["control"])]


# ------------------------------------------------------------------------------ vmap, two sites
def _vjp_fn(spec, sample, formula):
    fn = legacy.function_for(dataclasses.replace(spec, formula=formula)).apply

    def f(x):
        return fn(x, *sample.args[1:])

    return torch.func.vjp(f, sample.args[0])[1]


@pytest.mark.parametrize("name", ["live_take_backward_1", "live_differential_analytic_matrix_function_1"])
def test_vmap_over_cotangents_breaks_the_fast_path_only(name):
    spec = SPECS[name]
    sample = spec.samples()[0]
    out = spec.torch_op(*sample.args)
    cts = torch.randn((3,) + out.shape, generator=torch.Generator().manual_seed(5))
    with pytest.raises(RuntimeError, match=r"vmap: .*(inplace|in-place|is not possible)"):
        torch.func.vmap(_vjp_fn(spec, sample, spec.formula))(cts)
    got = torch.func.vmap(_vjp_fn(spec, sample, spec.handfixed))(cts)[0]
    x = sample.args[0].detach().clone().requires_grad_()
    for b in range(3):
        (ref,) = torch.autograd.grad(spec.torch_op(x, *sample.args[1:]), x, cts[b])
        torch.testing.assert_close(got[b], ref)


def test_eig_gauge_fix_names_bad_input_and_fixes_the_gauge():
    V = torch.linalg.eig(torch.randn(3, 3, generator=torch.Generator().manual_seed(9), dtype=torch.float64))[1]
    gV = torch.randn(3, 3, dtype=torch.complex128, generator=torch.Generator().manual_seed(10))
    assert (V.mH @ gV).diagonal().imag.abs().max() > 1e-3  # a random cotangent violates the gauge
    assert (V.mH @ L.eig_gauge_fix(V, gV)).diagonal().imag.abs().max() < 1e-12
    with pytest.raises(funcbwd.BadInputError, match="same shape"):
        L.eig_gauge_fix(V, gV[:2])
    with pytest.raises(funcbwd.BadInputError, match="complex eigenvectors"):
        L.eig_gauge_fix(V.real, gV.real)
