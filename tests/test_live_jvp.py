"""The live forward-mode sites (funcbwd_lab.ops.live.jvp): faithful, in place where claimed, and what
vmap does to them.

* faithfulness: for every site and sample, the fast path, the out-of-place path and torch's own
  forward-mode derivative (``torch.func.jvp`` of ``torch_op``) agree; broken variants do not;
* in place: tracing the fast path (``make_fx``) shows the site's in-place aten ops, tracing the
  out-of-place path shows none;
* vmap: over a batch of tangents (primals and saved values unbatched) and over a batch of primals
  (one shared tangent), the out-of-place path and ``functionalize(fast path)`` run and match a
  per-sample loop; the fast path fails with vmap's in-place error exactly in the modes
  ``VMAP_HAZARD`` claims, and matches the loop in the others.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import funcbwd
import funcbwd_lab
from funcbwd_lab.ops.live import jvp as LJ

B = 3
MODES = ("tangents", "primals")
EXPECTED_SITES = {
    "live_norm_jvp_1", "live_norm_jvp_2", "live_logcumsumexp_jvp_1", "live_logsumexp_jvp_1",
    "live_householder_product_jvp_1", "live_linalg_matrix_exp_differential_jvp_1",
    "live__invstd_jvp_1", "live__norm_jvp_1", "live__affine_jvp_1", "live__affine_jvp_2",
    "live_rms_norm_jvp_1", "live_rms_norm_jvp_2", "live_rms_norm_rstd_jvp_1",
}
#: the messages vmap gives when a batched value is written into an unbatched tensor in place
#: (mul_/div_/copy_: the in-place batching check; add_: TensorIterator's broadcast check).
INPLACE_ERRORS = ("inplace arithmetic", "doesn't match the broadcast shape")


def tup(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def rand_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(seed), dtype=t.dtype)


def close(xs, ys) -> bool:
    xs, ys = tup(xs), tup(ys)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        tol = dict(atol=1e-10, rtol=1e-8) if x.dtype == torch.float64 else dict(atol=1e-5, rtol=1e-4)
        if x.shape != y.shape or not torch.allclose(x, y, **tol):
            return False
    return True


def tangents_for(sample, seed: int) -> tuple:
    return tuple(rand_like(sample.args[p], seed + j) for j, p in enumerate(sample.diff))


def torch_jvp(spec, sample, tangents) -> tuple[tuple, tuple]:
    """(outputs, tangents of the diff outputs) from torch's own forward-mode AD of ``torch_op``."""
    def f(*diff_args):
        args = list(sample.args)
        for p, v in zip(sample.diff, diff_args):
            args[p] = v
        return spec.torch_op(*args)

    outs, out_tangents = torch.func.jvp(f, tuple(sample.args[p] for p in sample.diff), tangents)
    return tup(outs), tuple(tup(out_tangents)[i] for i in spec.diff_outputs)


def cases():
    return [pytest.param(n, s.name, id=f"{n}|{s.name}")
            for n in LJ.SITE_NAMES for s in funcbwd_lab.get_op(n).samples()]


def spec_sample(name: str, sample_name: str):
    spec = funcbwd_lab.get_op(name)
    return spec, spec.sample(sample_name)


# ---------------------------------------------------------------------------- inventory
def test_every_jvp_site_is_registered_with_the_jvp_contract():
    assert set(LJ.SITE_NAMES) == EXPECTED_SITES
    assert set(LJ.VMAP_HAZARD) == set(LJ.SITE_INPLACE_OPS) == set(LJ.SITES) == EXPECTED_SITES
    assert sum(s.counted for s in LJ.SITES.values()) == 12  # docs/live-sites.md: 12 jvp sites
    for name in LJ.SITE_NAMES:
        assert LJ.SITES[name].kind == "jvp" and LJ.SITES[name].op_name == name
        assert name.isidentifier() and name not in funcbwd_lab.op_names()  # opt-in group
        assert name in funcbwd_lab.op_names("live")
        spec = funcbwd_lab.get_op(name)
        assert (spec.kind, spec.group, spec.jvp) == ("jvp", "live", None)
        assert spec.handfixed is not None and spec.handfixed is not spec.formula
        assert "002ca6715ba1" in spec.source
        for s in spec.samples():
            assert s.diff == spec.grad_positions, (name, s.name)
            with torch.no_grad():
                spec.torch_op(*s.args)


def test_norm_jvp_rejects_an_order_it_does_not_recreate():
    x = torch.randn(3)
    with pytest.raises(funcbwd.BadInputError, match="p=1 and p=inf .* got p=2"):
        LJ.norm_jvp_fast(x, x, 2.0, x.norm(), [0], False)


# ---------------------------------------------------------------------------- faithfulness
@pytest.mark.parametrize("name,sample_name", cases())
def test_fast_and_out_of_place_paths_equal_torch_forward_mode(name, sample_name):
    spec, sample = spec_sample(name, sample_name)
    tangents = tangents_for(sample, seed=7)
    outs, expected = torch_jvp(spec, sample, tangents)
    fargs = spec.formula_args(sample.args, outs, tangents)
    before = [a.clone() for a in fargs if isinstance(a, torch.Tensor)]
    fast = spec.formula(*fargs)
    after = [a for a in fargs if isinstance(a, torch.Tensor)]
    assert all(torch.equal(x, y) for x, y in zip(before, after)), "fast path wrote into its inputs"
    assert close(fast, expected), f"{name} fast path != torch jvp"
    assert close(spec.handfixed(*spec.formula_args(sample.args, outs, tangents)), expected)


@pytest.mark.parametrize("name", sorted(EXPECTED_SITES))
def test_the_comparison_catches_a_formula_fed_the_wrong_direction(name):
    spec = funcbwd_lab.get_op(name)
    sample = spec.samples()[0]
    outs, expected = torch_jvp(spec, sample, tangents_for(sample, seed=7))
    wrong = spec.formula(*spec.formula_args(sample.args, outs, tangents_for(sample, seed=1007)))
    assert not close(wrong, expected)


def logsumexp_jvp_reordered(self_p, self_t, dim, keepdim):
    """A broken fast path: the in-place multiply runs before sumexp_p is read (aliasing bug)."""
    self_p_exp = (self_p - torch.amax(self_p, dim, True)).exp()
    self_p_exp *= self_t
    sumexp_p = self_p_exp.sum(dim, keepdim)
    return self_p_exp.sum(dim, keepdim) / sumexp_p


def logcumsumexp_jvp_reordered(self_p, self_t, dim):
    """A broken fast path: cumsumexp_p is taken after the in-place multiply."""
    self_p_exp = (self_p - torch.max(self_p, dim, True)[0]).exp()
    self_p_exp *= self_t
    return self_p_exp.cumsum(dim) / (self_p_exp.cumsum(dim) + 1e-13)


@pytest.mark.parametrize("name,broken", [("live_logsumexp_jvp_1", logsumexp_jvp_reordered),
                                         ("live_logcumsumexp_jvp_1", logcumsumexp_jvp_reordered)])
def test_an_in_place_ordering_bug_fails_the_comparison(name, broken):
    spec = funcbwd_lab.get_op(name)
    for sample in spec.samples():
        tangents = tangents_for(sample, seed=7)
        outs, expected = torch_jvp(spec, sample, tangents)
        assert not close(broken(*spec.formula_args(sample.args, outs, tangents)), expected)


# ---------------------------------------------------------------------------- in place or not
def traced_inplace_ops(fn, fargs) -> list[str]:
    """The in-place aten ops (``aten.<name>_.<overload>``) in a make_fx trace of ``fn(*fargs)``."""
    pos = [i for i, a in enumerate(fargs) if isinstance(a, torch.Tensor)]

    def call(*tensors):
        args = list(fargs)
        for i, t in zip(pos, tensors):
            args[i] = t
        return fn(*args)

    gm = make_fx(call, tracing_mode="real")(*[fargs[i].clone() for i in pos])
    names = [str(n.target).split(".") for n in gm.graph.nodes if n.op == "call_function"]
    return [parts[1] for parts in names if parts[0] == "aten" and parts[1].endswith("_")]


def test_the_trace_check_sees_an_in_place_op_and_no_false_one():
    x = torch.randn(3)
    assert traced_inplace_ops(lambda a, b: a.exp().mul_(b), (x, x)) == ["mul_"]
    assert traced_inplace_ops(lambda a, b: a.exp() * b, (x, x)) == []


@pytest.mark.parametrize("name", sorted(EXPECTED_SITES))
def test_fast_path_writes_in_place_and_out_of_place_path_does_not(name):
    spec = funcbwd_lab.get_op(name)
    sample = spec.samples()[0]
    tangents = tangents_for(sample, seed=7)
    outs, _ = torch_jvp(spec, sample, tangents)
    fargs = spec.formula_args(sample.args, outs, tangents)
    fast_ops = set(traced_inplace_ops(spec.formula, fargs))
    assert LJ.SITE_INPLACE_OPS[name] <= fast_ops, (name, fast_ops)
    assert traced_inplace_ops(spec.handfixed, fargs) == []


# ---------------------------------------------------------------------------- vmap
def batched_call(spec, sample, mode: str):
    """``(wrap, inputs, in_dims)``: ``vmap(wrap(formula), in_dims)(*inputs)`` runs a formula over B
    tangents (mode "tangents"; primals and outputs unbatched) or over B primals with their own
    outputs and one shared tangent (mode "primals"). Every tensor, primal or saved, is an input of
    the vmapped function, so functionalize wraps them all."""
    args = sample.args
    tpos = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if mode == "tangents":
        outs = tup(spec.torch_op(*args))
        tangents = [torch.stack([rand_like(args[p], 100 + 10 * b + j) for b in range(B)])
                    for j, p in enumerate(sample.diff)]
        prims, dims = [args[i] for i in tpos], [0] * len(tangents) + [None] * (len(tpos) + len(outs))
    else:
        per_sample = []
        for b in range(B):
            a = list(args)
            for j, p in enumerate(sample.diff):
                a[p] = args[p] + 0.1 * rand_like(args[p], 200 + 10 * b + j)
            per_sample.append(a)
        outs_b = [tup(spec.torch_op(*a)) for a in per_sample]
        outs = tuple(torch.stack([o[k] for o in outs_b]) for k in range(len(outs_b[0])))
        prims = [torch.stack([a[i] for a in per_sample]) if i in sample.diff else args[i] for i in tpos]
        tangents = [rand_like(args[p], 300 + j) for j, p in enumerate(sample.diff)]
        dims = ([None] * len(tangents) + [0 if i in sample.diff else None for i in tpos]
                + [0] * len(outs))
    nt, npr = len(tangents), len(prims)

    def wrap(fn):
        def run(*xs):
            a = list(args)
            for i, p in zip(tpos, xs[nt:nt + npr]):
                a[i] = p
            return fn(*spec.formula_args(tuple(a), tuple(xs[nt + npr:]), tuple(xs[:nt])))
        return run

    return wrap, (*tangents, *prims, *outs), tuple(dims)


def per_sample_reference(wrap, inputs, dims, fn) -> tuple:
    rows = [tup(wrap(fn)(*[x if d is None else x.select(d, b) for x, d in zip(inputs, dims)]))
            for b in range(B)]
    return tuple(torch.stack([r[k] for r in rows]) for k in range(len(rows[0])))


def vmap_outcome(spec, sample, mode: str, path: str) -> tuple[str, tuple | None, list[str]]:
    """Run ``path`` ("fast", "out_of_place", "functionalized") under vmap in ``mode``: (outcome,
    the per-sample reference, vmap fallback warnings). Outcome is "pass", "mismatch", "vmap
    in-place error", or "<ErrorType>: <first line>"."""
    wrap, inputs, dims = batched_call(spec, sample, mode)
    fn = wrap(spec.handfixed if path == "out_of_place" else spec.formula)
    if path == "functionalized":
        fn = torch.func.functionalize(fn)
    ref = per_sample_reference(wrap, inputs, dims, spec.handfixed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = torch.func.vmap(fn, in_dims=dims)(*inputs)
        except RuntimeError as e:
            msg = str(e)
            kind = ("vmap in-place error" if any(m in msg for m in INPLACE_ERRORS)
                    else f"RuntimeError: {msg.splitlines()[0][:90]}")
            return kind, ref, []
    fallbacks = sorted({str(w.message).split("batching rule for ")[1].split(".")[0]
                        for w in caught if "batching rule for" in str(w.message)})
    return ("pass" if close(out, ref) else "mismatch"), ref, fallbacks


def vmap_cases():
    return [pytest.param(n, m, id=f"{n}|{m}") for n in LJ.SITE_NAMES for m in MODES]


@pytest.mark.parametrize("name,mode", vmap_cases())
def test_vmap_breaks_the_fast_path_exactly_where_claimed(name, mode):
    spec = funcbwd_lab.get_op(name)
    for sample in spec.samples():
        assert vmap_outcome(spec, sample, mode, "out_of_place")[0] == "pass"
        assert vmap_outcome(spec, sample, mode, "functionalized")[0] == "pass"
        fast = vmap_outcome(spec, sample, mode, "fast")[0]
        expected = "vmap in-place error" if mode in LJ.VMAP_HAZARD[name] else "pass"
        assert fast == expected, (name, sample.name, mode, fast)


def test_the_per_sample_comparison_is_sensitive_to_the_batch_order():
    spec = funcbwd_lab.get_op("live_logsumexp_jvp_1")
    wrap, inputs, dims = batched_call(spec, spec.samples()[0], "tangents")
    out = torch.func.vmap(wrap(spec.handfixed), in_dims=dims)(*inputs)
    ref = per_sample_reference(wrap, inputs, dims, spec.handfixed)
    assert close(out, ref)
    assert not close(out, tuple(r.roll(1, 0) for r in ref))
