"""funcbwd_lab.run.compositions: functorch's five compositions, built as upstream builds them.

* in_dims: the number of choices is counted from first principles (every tensor at dim -1 or
  unbatched, but not all unbatched, plus the all-zero choice: 2**n; the batch-norm rule by its
  definition), and a generator that caps is caught;
* each builder's function, run unbatched, equals the composition written here directly with
  torch.func for the sample (and a builder that forgets a cotangent is caught);
* the vmap-of-vmap wrapper equals the single vmap, and catches a batching rule that is wrong only
  when its input has no batch dim at the inner level;
* vmap of each composition equals the per-sample loop over distinct entries.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
import torch.nn.functional as F
from torch.func import jvp, vjp, vmap

from funcbwd import internals
from funcbwd.errors import BadInputError
from funcbwd_lab.run import compositions as C
from funcbwd.compare import Mismatch, check_close
from funcbwd_lab.run.entries import distinct_entries


@functools.lru_cache(maxsize=None)
def _opinfo(name: str, variant: str = ""):
    return next(o for o in internals.opinfo_database()
                if o.name == name and o.variant_test_name == variant)


def _sample(name: str, i: int = 0, requires_grad: bool = True):
    return list(_opinfo(name).sample_inputs("cpu", torch.float32, requires_grad=requires_grad))[i]


def _build(comp: str, name: str, i: int = 0, seed: int = 0):
    op = _opinfo(name)
    s = _sample(name, i, requires_grad=comp != "vmapjvpall")
    return C.BUILDERS[comp](op.op, s, torch.Generator().manual_seed(seed), name=op.name), s


# ------------------------------------------------------------------------------ in_dims counts
def _check_choices(choices, is_tensor, expected_count):
    """Structure every upstream choice has, and the count the rule gives."""
    assert len(choices) == expected_count, f"{len(choices)} choices, expected {expected_count}"
    assert len(set(choices)) == len(choices), "repeated choice"
    for c in choices:
        assert len(c) == len(is_tensor)
        assert all((d is None) for d, t in zip(c, is_tensor) if not t), "a non-tensor is batched"
        assert all(d in (0, -1, None) for d in c)
        assert any(d is not None for d in c), "an all-unbatched choice"


def _is_tensor(c):
    return [isinstance(a, torch.Tensor) for a in c.args]


@pytest.mark.parametrize("comp,name,i", [
    ("vmapvjp", "sin", 0), ("vmapvjp", "index_select", 2), ("vmapvjp", "nn.functional.layer_norm", 0),
    ("vmapvjpvjp", "nn.functional.layer_norm", 0), ("vmapjvpvjp", "index_select", 2),
    ("vmapjvpall", "nn.functional.layer_norm", 1), ("vjpvmap", "index_select", 2),
    ("vmapvjp", "native_batch_norm", 0),  # not batch-norm special-cased upstream (by name)
])
def test_choices_are_two_to_the_number_of_tensors(comp, name, i):
    c, _ = _build(comp, name, i)
    n = sum(_is_tensor(c))
    choices = c.in_dims()
    _check_choices(choices, _is_tensor(c), 2 ** n)
    assert choices[0] == tuple(0 if t else None for t in _is_tensor(c))  # all-zero first
    assert sum(1 for ch in choices if 0 in ch) == 1


def test_counts_by_hand():
    # sin: x and its cotangent; index_select: x, an int, the index, the cotangent
    assert len(_build("vmapvjp", "sin")[0].in_dims()) == 4
    assert len(_build("vmapvjp", "index_select", 2)[0].in_dims()) == 8
    # layer_norm's first sample: x, three ints of normalized_shape, weight, bias (+ cotangent)
    c, _ = _build("vmapvjp", "nn.functional.layer_norm", 0)
    assert [type(a).__name__ for a in c.args] == ["Tensor", "int", "int", "int", "Tensor", "Tensor",
                                                   "Tensor"]
    assert len(c.in_dims()) == 16
    # vjpvmap batches the sample args only (no cotangent among them)
    assert len(_build("vjpvmap", "index_select", 2)[0].in_dims()) == 4


def _bn_training_sample(training: bool):
    for s in _opinfo("nn.functional.batch_norm").sample_inputs("cpu", torch.float32,
                                                                requires_grad=True):
        if s.kwargs.get("training") is training and s.args[0] is not None:
            return s
    raise AssertionError("no such batch_norm sample")


def test_batch_norm_training_rule():
    op = _opinfo("nn.functional.batch_norm")
    s = _bn_training_sample(True)
    c = C.vmapvjp(op.op, s, torch.Generator().manual_seed(0), name=op.name)
    assert c.batch_norm_and_training
    tensors = [i for i, t in enumerate(_is_tensor(c)) if t]
    n = len(tensors)
    x, mean, var = tensors[:3]  # input, running_mean, running_var lead the args
    choices = c.in_dims()
    # by the rule: every choice but all-None, minus those batching x without both stats
    # (x at -1: 2**(n-1) choices, of which 2**(n-3) batch both stats), plus the all-zero one
    _check_choices(choices, _is_tensor(c), 2 ** (n - 1) + 2 ** (n - 3))
    for ch in choices:
        if ch[x] is not None:
            assert ch[mean] is not None and ch[var] is not None
    # not training: the plain rule
    c2 = C.vmapvjp(op.op, _bn_training_sample(False), torch.Generator().manual_seed(0), name=op.name)
    assert not c2.batch_norm_and_training
    assert len(c2.in_dims()) == 2 ** sum(_is_tensor(c2))


def test_instance_norm_never_batches_the_input():
    # instance_norm's stats are kwargs, so positions 1 and 2 hold no running stats: the input
    # (first tensor) is never batched, the rest take every choice
    op = _opinfo("nn.functional.instance_norm")
    s = _sample("nn.functional.instance_norm", 0)
    c = C.vmapvjp(op.op, s, torch.Generator().manual_seed(0), name=op.name)
    n = sum(_is_tensor(c))
    choices = c.in_dims()
    _check_choices(choices, _is_tensor(c), 2 ** (n - 1))
    assert all(ch[0] is None for ch in choices)
    # one tensor and training: no choice at all
    assert C.exhaustive_in_dims([torch.ones(2)], batch_norm_and_training=True) == []


def test_vmapjvpvjp_keeps_upstreams_opinfo_quirk():
    # test_vmapjvpvjp passes the OpInfo, not its name, to is_batch_norm_training: never special
    op = _opinfo("nn.functional.batch_norm")
    c = C.vmapjvpvjp(op.op, _bn_training_sample(True), torch.Generator().manual_seed(0), name=op.name)
    assert not c.batch_norm_and_training


def test_a_capped_generator_is_caught():
    # Mutation: the sweep's old cap of 8 choices must fail the count check.
    c, _ = _build("vmapvjpvjp", "nn.functional.layer_norm", 0)
    n = sum(_is_tensor(c))
    assert len(c.in_dims()) == 2 ** n > 8
    with pytest.raises(AssertionError, match="choices, expected"):
        _check_choices(c.in_dims()[:8], _is_tensor(c), 2 ** n)


def test_two_bools_are_refused():
    with pytest.raises(BadInputError, match="more than one bool"):
        C.is_batch_norm_training("nn.functional.batch_norm", {"training": True, "x": False})


# ------------------------------------------------------------------------------ unbatched value
def _by_role(c, role):
    return [a for a, r in zip(c.args, c.roles) if r == role]


def _forward(name, s):
    """The sample's op as a function of its differentiable args, written out per op."""
    if name == "sin":
        return lambda x: torch.sin(x)
    if name == "index_select":
        return lambda x: torch.index_select(x, s.args[0], s.args[1].detach())
    if name == "nn.functional.layer_norm":
        return lambda x, w, b: F.layer_norm(x, s.args[0], w, b, **s.kwargs)
    raise KeyError(name)


def _direct(comp, fwd, c):
    """The composition for one sample, straight from torch.func."""
    p = _by_role(c, "primal")
    if comp == "vmapvjp":
        return vjp(fwd, *p)[1](*_by_role(c, "cotangent"))
    if comp == "vmapvjpvjp":
        (ct,), ct2 = _by_role(c, "cotangent"), _by_role(c, "cotangent2")
        k = len(p)
        inner = lambda *a: vjp(fwd, *a[:k])[1](a[k])  # noqa: E731
        return (*inner(*p, ct), *vjp(inner, *p, ct)[1](tuple(ct2)))
    if comp == "vmapjvpvjp":
        (ct,), pt, (ctt,) = (_by_role(c, r) for r in ("cotangent", "primal_tangent",
                                                     "cotangent_tangent"))
        out, tan = jvp(lambda pp, cc: vjp(fwd, *pp)[1](cc), (tuple(p), ct), (tuple(pt), ctt))
        return (*out, *tan)
    if comp == "vmapjvpall":
        return jvp(fwd, tuple(p), tuple(_by_role(c, "tangent")))
    raise KeyError(comp)


CASES = [("sin", 0), ("index_select", 2), ("nn.functional.layer_norm", 0)]
VMAP_OUTSIDE = ["vmapvjp", "vmapvjpvjp", "vmapjvpvjp", "vmapjvpall"]


@pytest.mark.parametrize("comp", VMAP_OUTSIDE)
@pytest.mark.parametrize("name,i", CASES)
def test_function_equals_torch_func_composition(comp, name, i):
    c, s = _build(comp, name, i)
    check_close(c.function()(*c.args), _direct(comp, _forward(name, s), c))


def test_a_builder_that_forgets_a_cotangent_is_caught():
    # Mutation: vmapvjp whose function uses ones instead of its cotangent.
    c, s = _build("vmapvjp", "nn.functional.layer_norm", 0)
    honest = c.make

    def forgetful(vjp_, jvp_):
        f = honest(vjp_, jvp_)
        return lambda *xs: f(*xs[:-1], torch.ones_like(xs[-1]))

    bad = dataclasses.replace(c, make=forgetful)
    fwd = _forward("nn.functional.layer_norm", s)
    check_close(c.function()(*c.args), _direct("vmapvjp", fwd, c))
    with pytest.raises(Mismatch):
        check_close(bad.function()(*bad.args), _direct("vmapvjp", fwd, c))


def test_roles_and_random_draws_follow_upstream():
    c, _ = _build("vmapjvpvjp", "nn.functional.layer_norm", 0)
    assert c.roles == ("primal",) * 3 + ("cotangent",) + ("primal_tangent",) * 3 + ("cotangent_tangent",)
    # the same seed gives the same draws; another seed other draws
    again, _ = _build("vmapjvpvjp", "nn.functional.layer_norm", 0)
    other, _ = _build("vmapjvpvjp", "nn.functional.layer_norm", 0, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(c.args, again.args))
    assert not torch.equal(c.args[3], other.args[3])
    # vmapvjp batches the index of index_select; vmapvjpvjp keeps it a constant
    assert "input" in _build("vmapvjp", "index_select", 2)[0].roles
    assert set(_build("vmapvjpvjp", "index_select", 2)[0].roles) == {"primal", "cotangent",
                                                                      "cotangent2"}


# ------------------------------------------------------------------------------ batched
@pytest.mark.parametrize("comp", list(C.BUILDERS))
@pytest.mark.parametrize("name,i", CASES[:2])
def test_vmap_equals_the_loop_and_the_nested_vmap(comp, name, i):
    c, _ = _build(comp, name, i)
    entries = distinct_entries(c.tensors(), 3, seed=0)
    for in_dims in c.in_dims():
        check_close(*c.run(in_dims, entries), str(in_dims))
        nested = c.nested(in_dims, entries)
        if comp == "vjpvmap":
            assert nested is None
        else:
            check_close(*nested, f"nested {in_dims}")


def test_vjpvmap_by_hand():
    c, s = _build("vjpvmap", "sin", 0)
    entries = distinct_entries(c.tensors(), 3, seed=0)
    (grad,), _ = c.run((0,), entries)
    x = torch.stack(entries[0])
    ct = c._cotangents(torch.sin(x))
    check_close((grad,), (torch.cos(x) * ct,))


def _manual_twice(wrong_without_bdim: bool):
    """An op ``x * 2`` with a hand-written FuncTorchBatched kernel (manual plumbing: it is called
    at a vmap level even when its input has no batch dim there), optionally wrong in that case."""
    lib = torch.library.Library("funcbwd_test_manual", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")

    def batched(x):
        interp = internals.current_interpreter()
        level = interp.level()
        (xu,), (d,) = internals.unwrap_batched_at((x,), level)
        with interp.lower():
            out = torch.ops.funcbwd_test_manual.twice(xu)
        if d is None:
            return out * 1.5 if wrong_without_bdim else out
        return internals.add_batch_dim(out, d, level)

    lib.impl("twice", batched, "FuncTorchBatched")
    return lib


@pytest.mark.parametrize("wrong", [False, True])
def test_nested_vmap_catches_a_rule_wrong_without_an_inner_batch_dim(wrong):
    # Mutation (wrong=True): the kernel is right when its input is batched at the current level,
    # wrong when it is not. The single vmap passes; the vmap-of-vmap check must not.
    lib = _manual_twice(wrong)
    try:
        f = torch.ops.funcbwd_test_manual.twice
        x = torch.randn(3, 4)
        check_close((vmap(f)(x),), (x * 2,))
        nested, expected = C.vmap_of_vmap(f, (0,), (x,), 3)
        assert nested.shape == expected.shape == (3, 1, 4)
        if wrong:
            with pytest.raises(Mismatch):
                check_close((nested,), (expected,))
        else:
            check_close((nested,), (expected,))
    finally:
        internals.destroy_library(lib)


def test_copies_are_upstreams_entries():
    t = torch.randn(2, 3)
    (entries,) = C.copies([t], 2)
    assert len(entries) == 2 and all(torch.equal(e, t) for e in entries)
    assert entries[0].data_ptr() != t.data_ptr()


def test_no_call_sees_another_calls_mutation():
    # batch norm in training updates its running stats in place: each run starts from the sample's
    op = _opinfo("nn.functional.batch_norm")
    c = C.vmapvjp(op.op, _bn_training_sample(True), torch.Generator().manual_seed(0), name=op.name)
    before = [a.clone() for a in c.tensors()]
    entries = C.copies(c.tensors(), 2)
    c.run(c.in_dims()[0], entries)
    assert all(torch.equal(a, b) for a, b in zip(c.tensors(), before))


def test_the_trial_counts_what_the_builders_raise():
    # The study's trial on two tiny cases: sin passes every choice; binary_cross_entropy's double
    # backward multiplies in place into an unbatched tensor when only the cotangent is batched
    # (torch 2.13's binary_cross_entropy_double_backward), in 2 of its 32 choices.
    import io

    from funcbwd_lab.studies.coverage import trial

    rows = trial.trial([("sin", "", "vmapvjpvjp"), ("nn.functional.binary_cross_entropy", "",
                                                    "vmapvjpvjp")], samples=1, log=io.StringIO())
    by = {(r.op, r.entries): r for r in rows}
    assert by["sin", "distinct"].failed == 0 and by["sin", "distinct"].choices == 8
    bce = by["nn.functional.binary_cross_entropy", "copies"]
    assert (bce.failed, bce.choices) == (2, 32)
    assert set(bce.errors) == {"vmap inplace arithmetic"}
    assert bce.upstream.startswith("xfail: vmap: inplace into a regular tensor")
    assert "vmap inplace arithmetic" in trial.table(rows)


def test_vjpvmap_function_is_the_op_on_the_flat_args():
    c, s = _build("vjpvmap", "index_select", 2)
    check_close((c.function()(*c.args),), (torch.index_select(s.input, *s.args),))


def test_vmapvjp_calls_share_one_function_so_traced_backward_traces_once():
    """The fallback-speedup study times repeated calls of one composition: a fresh closure per
    call (the cache key of traced_backward) re-traced every timed call (0.06x instead of 2x)."""
    import warnings

    from funcbwd_lab import batching
    from funcbwd_lab.studies.coverage import fallback_speedup, opinfo
    from funcbwd_lab.strategies.traced_backward import TracedBackward

    op = opinfo.op_by_id("cummax")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = fallback_speedup.prepare(op, opinfo.samples(op)[0], 4)
        traced = TracedBackward()
        with batching.scoped_rules():
            first = p.call(traced, p.choices[0])
            for _ in range(3):
                again = p.call(traced, p.choices[0])
    assert traced.trace_count == 1
    assert all(torch.equal(a, b) for a, b in zip(first, again))
