"""funcbwd.functionalized on functions: every transform, as written outside them, the bounded
thread-safe cache, eager semantics (input mutation, randomness), the untraceable fallback, and
mutations proving the checks can fail."""

from __future__ import annotations

import inspect
import threading
import warnings

import pytest
import torch
from torch.func import hessian, jacfwd, jacrev, vjp, vmap

import funcbwd
from funcbwd.errors import BadInputError
from funcbwd.fx import formula_graphs as FG
from funcbwd.fx.elide import count_targets
from funcbwd import decorator as tool


def writes_rows(x):
    """pytorch#103329's pattern: a fresh torch.zeros(x.shape) written row by row."""
    y = torch.zeros(x.shape, dtype=x.dtype)
    y[0] = x[0] * 2
    y[1] = x[1].sin()
    return y


def out_of_place(x):
    return torch.cat([(x[0] * 2)[None], x[1].sin()[None], torch.zeros_like(x[2:])])


TRANSFORMS = {
    "vmap": lambda f, x: vmap(f)(x),
    "vmap_vjp": lambda f, x: vmap(lambda v: vjp(f, v)[1](torch.ones_like(v))[0])(x),
    "vmap_jacrev": lambda f, x: vmap(jacrev(f))(x),
    "jacfwd": lambda f, x: jacfwd(f)(x[0]),
    "hessian": lambda f, x: hessian(lambda v: f(v).pow(2).sum())(x[0]),
    "vmap_jacfwd": lambda f, x: vmap(jacfwd(f))(x),
    "jacrev_jacrev": lambda f, x: jacrev(jacrev(f))(x[0]),
}


def problems(wrapped, x) -> list[str]:
    """Every transform of ``wrapped`` against the same transform of the out-of-place rewrite."""
    out = []
    for name, tr in TRANSFORMS.items():
        try:
            got, want = tr(wrapped, x), tr(out_of_place, x)
        except Exception as e:  # noqa: BLE001 - a failure is a problem to report
            out.append(f"{name}: {type(e).__name__}: {str(e)[:80]}")
            continue
        if got.dtype != want.dtype or not torch.allclose(got, want, atol=1e-6):
            out.append(f"{name}: differs")
    return out


@pytest.fixture
def x():
    return torch.randn(3, 4, 2, dtype=torch.float64)


def test_plain_fails_under_vmap_as_upstream_says(x):
    with pytest.raises(RuntimeError, match="vmap: inplace arithmetic"):
        vmap(writes_rows)(x)
    with pytest.raises(RuntimeError, match="derivative for aten::copy is not implemented"):
        vmap(jacrev(torch.func.functionalize(writes_rows)))(x)


def test_wrapped_works_under_every_transform(x):
    assert problems(funcbwd.functionalized(writes_rows), x) == []


def test_per_sample_loop_agrees(x):
    f = funcbwd.functionalized(writes_rows)
    got = vmap(jacrev(f))(x)
    loop = torch.stack([torch.autograd.functional.jacobian(out_of_place, s) for s in x])
    torch.testing.assert_close(got, loop)


def test_skipping_functionalization_is_caught(monkeypatch, x):
    # Mutation: a wrapper that traced the function as written (no functionalize) fails.
    real = FG.trace_formula
    monkeypatch.setattr(FG, "trace_formula", lambda f, a, **kw: real(f, a, functionalize=False))
    assert any("vmap" in p for p in problems(funcbwd.functionalized(writes_rows), x))


def test_a_cache_key_without_dtype_is_caught(monkeypatch, x):
    # Mutation: keys by shape only; a float32 call then reuses the float64 graph.
    def shapes_only(args):
        return tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))

    monkeypatch.setattr(tool, "signature_key", shapes_only)
    f = funcbwd.functionalized(writes_rows)
    assert problems(f, x) == []
    assert problems(f, x.float())  # dtype float64 results for float32 inputs


def test_outside_transforms_fn_runs_as_written():
    calls = []

    def fn(x, k=2):
        """doc"""
        calls.append(1)
        return x * k

    f = funcbwd.functionalized(fn)
    assert torch.equal(f(torch.ones(2), k=3), torch.full((2,), 3.0))
    assert calls == [1] and f.cache_info().misses == 0  # no trace outside transforms
    assert inspect.signature(f) == inspect.signature(fn)
    assert f.__name__ == "fn" and f.__doc__ == "doc" and f.__wrapped__ is fn


def test_kwargs_and_constants_are_part_of_the_key():
    def fn(x, *, k):
        y = torch.zeros(x.shape)
        y[0] = x[0] * k
        return y

    f = funcbwd.functionalized(fn)
    x = torch.randn(2, 3, 4)
    for k in (2.0, 3.0, 2.0):
        torch.testing.assert_close(vmap(lambda v: f(v, k=k))(x)[:, 0], x[:, 0] * k)
    assert f.cache_info().misses == 2 and f.cache_info().hits == 1


def test_cache_is_bounded_and_cleared():
    f = funcbwd.functionalized(writes_rows, maxsize=3)
    for n in range(2, 9):
        vmap(f)(torch.randn(2, n, 3))
    info = f.cache_info()
    assert (info.misses, info.currsize, info.maxsize) == (7, 3, 3)
    vmap(f)(torch.randn(2, 8, 3))
    assert f.cache_info().hits == 1
    f.cache_clear()
    assert f.cache_info() == (0, 0, 3, 0)
    with pytest.raises(BadInputError, match="maxsize"):
        funcbwd.functionalized(writes_rows, maxsize=0)


def test_cache_is_thread_safe():
    f = funcbwd.functionalized(writes_rows, maxsize=4)
    barrier, errors = threading.Barrier(6), []

    def worker(n):
        try:
            barrier.wait()
            for _ in range(5):
                x = torch.randn(2, 3 + n % 3, 2)
                torch.testing.assert_close(vmap(f)(x), vmap(out_of_place)(x))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    info = f.cache_info()
    assert info.misses == 3 and info.hits == 27 and info.currsize == 3  # one trace per shape
    assert f.functionalizer.cache.building() == 0  # no key left mid-build


def test_input_mutation_is_kept():
    def bump(x, y):
        x.add_(y)  # mutates its input, as written
        return x * 2

    f = funcbwd.functionalized(bump)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    want_x = x + y
    out = vmap(f)(x, y)
    torch.testing.assert_close(x, want_x)  # the caller's tensor was written, as eager does
    torch.testing.assert_close(out, want_x * 2)


def _noisy(x):
    y = torch.zeros(x.shape)
    y[0] = x[0] + torch.randn(())
    return y


@pytest.mark.parametrize("randomness", ["same", "different"])
def test_random_ops_follow_vmap_randomness(randomness):
    f = funcbwd.functionalized(_noisy)
    x = torch.zeros(5, 3)
    a = vmap(f, randomness=randomness)(x)[:, 0]
    b = vmap(f, randomness=randomness)(x)[:, 0]
    assert not torch.equal(a, b)  # fresh draws per call
    same_across_batch = bool((a == a[0]).all())
    assert same_across_batch == (randomness == "same")
    with pytest.raises(RuntimeError, match="randomness"):
        vmap(f)(x)  # the default, randomness='error', refuses as for the function as written


def branchy(x):
    y = torch.zeros(x.shape)
    y[0] = x[0] * (2 if x.sum() > -1e9 else 3)  # a Python branch on a value: untraceable
    return y


def test_untraceable_warns_once_with_the_reason_and_runs_functionalized():
    f = funcbwd.functionalized(branchy)
    x, g = torch.randn(4), torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, fn = vjp(f, x)
        got = vmap(fn)(g)[0]  # vmap over the cotangent: the forward has no vmap level
        jr = jacrev(f)(x)
        jf = jacfwd(f)(x)  # vmap over forward AD: functionalized copy has no jvp; as written works
    mine = [w for w in caught if issubclass(w.category, funcbwd.FunctionalizeFallbackWarning)]
    assert len(mine) == 1 and "data-dependent" in str(mine[0].message)
    ref = torch.zeros(4, 4)
    ref[0, 0] = 2
    torch.testing.assert_close(jr, ref)
    torch.testing.assert_close(jf, ref)
    torch.testing.assert_close(got, g @ ref)


def gated(x, w):
    y = torch.zeros(x.shape)
    y[0] = x[0] * (2 if w.sum() > 0 else 3)  # a branch on an unbatched value: untraceable
    return y


def test_untraceable_under_vmap_of_reverse_mode_runs_as_written_under_the_mode():
    f = funcbwd.functionalized(gated, warn=False)
    x, w = torch.randn(2, 4), torch.ones(3)
    torch.testing.assert_close(vmap(f, in_dims=(0, None))(x, w),
                               torch.cat([2 * x[:, :1], torch.zeros(2, 3)], 1))
    # functionalized at call time this is "derivative for aten::copy is not implemented"; as
    # written under funcbwd.vmap's in-place mode it works (checked against the per-sample loop)
    got = vmap(jacrev(f), in_dims=(0, None))(x, w)
    want = torch.stack([torch.autograd.functional.jacobian(lambda v: gated(v, w), xi) for xi in x])
    torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match="derivative for aten::copy is not implemented"):
        vmap(jacrev(torch.func.functionalize(gated)), in_dims=(0, None))(x, w)  # what it was


def test_observer_is_told_what_ran():
    seen = []
    f = funcbwd.functionalized(writes_rows, observer=lambda kind, e: seen.append((kind, type(e).__name__)))
    vmap(f)(torch.randn(2, 3, 2))
    vmap(f)(torch.randn(2, 3, 2))
    assert seen == [("traced", "FormulaGraph"), ("called", "FormulaGraph"), ("called", "FormulaGraph")]


def test_bad_input():
    with pytest.raises(BadInputError, match="function"):
        funcbwd.functionalized(3)


def test_evicted_graphs_leave_no_source_in_torch_fx(monkeypatch):
    # torch.fx keeps every compiled GraphModule's source for the process's life; build() drops
    # the ones it made, so memory stays flat past the cache bound. Mutation: without the drop,
    # the loader grows with every trace.
    from torch.fx.graph_module import _loader

    from funcbwd import internals

    def grows(n0: int) -> int:
        f = funcbwd.functionalized(writes_rows, maxsize=2)
        before = len(_loader.eval_cache)
        for n in range(n0, n0 + 4):
            vmap(f)(torch.randn(2, n, 2))
        return len(_loader.eval_cache) - before

    assert grows(3) == 0
    import contextlib

    monkeypatch.setattr(internals, "fx_sources_dropped", contextlib.nullcontext)
    assert grows(20) >= 4


# ------------------------------------------------------------------------------ boolean masks
def sqrt_positive(x):  # pytorch3d's _sqrt_positive_part: a read and a write through one mask
    ret = torch.zeros_like(x)
    positive = x > 0
    ret[positive] = torch.sqrt(x[positive])
    return ret


def _sqrt_positive_loop(xs):
    return torch.stack([jacrev(sqrt_positive)(x) for x in xs])


def _untraceable_reasons(wrapper):
    return [e.reason for e in wrapper.functionalizer.cache.values()
            if isinstance(e, tool.Untraceable)]


def test_a_boolean_mask_traces_with_the_mask_as_where():
    # x[mask] has a data-dependent shape: untraceable as written; traced again with every mask
    # index as where (the in-place mode's mask rules), checked against the code as written
    xs = torch.randn(4, 6)
    with pytest.raises(Exception, match=tool._MASK_SHAPES):
        FG.build(sqrt_positive, (xs[0],))
    w = funcbwd.functionalized(sqrt_positive, warn=False)
    torch.testing.assert_close(vmap(jacrev(w))(xs), _sqrt_positive_loop(xs))
    (entry,) = funcbwd.decorator.entries(w)
    assert "masks as where" in entry.label and not _untraceable_reasons(w)
    assert count_targets(entry.graph, (torch.ops.aten.where.self,)) >= 1


def test_mutation_a_wrong_mask_rewrite_in_the_trace_is_refused(monkeypatch):
    from funcbwd import masks

    real = masks.setitem

    def swapped(mode, t, index, value):  # the trace's where with its branches swapped
        if not mode.dense_masks:
            return real(mode, t, index, value)
        view, m = masks._region(t, *masks._bool_mask(index))
        view.copy_(torch.where(m, view, value))
        return True

    monkeypatch.setattr(masks, "setitem", swapped)
    xs = torch.randn(4, 6)
    w = funcbwd.functionalized(sqrt_positive, warn=False)
    torch.testing.assert_close(vmap(jacrev(w))(xs), _sqrt_positive_loop(xs))  # as written
    (reason,) = _untraceable_reasons(w)
    assert "with masks as where" in reason and "values differ" in reason
    # the mutation is live: unchecked, the swapped graph computes something else
    from funcbwd.inplace import InplaceMode

    def dense(x):
        with InplaceMode(dense_masks=True):
            return sqrt_positive(x)
    graph = FG.build(dense, (xs[0],))
    assert not torch.equal(graph.run((xs[0],)), sqrt_positive(xs[0]))
