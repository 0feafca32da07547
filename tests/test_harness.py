"""funcbwd.harness: every verdict can be reached, and each check can fail (a mutation beside it).

The mutations are functions that behave differently under a transform than as written (through
:func:`funcbwd.internals.stack_depth`, the functorch stack's depth): plain torch.func then runs
"a tool that is wrong" in exactly one respect, and the harness must name it.
"""

from __future__ import annotations

import threading

import pytest
import torch

import funcbwd
from funcbwd import harness as H
from funcbwd.harness import state as S
from funcbwd.internals import stack_depth

X = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
X2 = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
CALLS = [H.Call((X.clone(),)), H.Call((X2.clone(),))]


def pure(x):
    return (x.sin() * x).cumsum(0) + x.sum()


def in_place(x):
    y = torch.zeros(3)
    y[0] = (x * 2).sum()
    y[1:] = x[1:].exp()
    return y


# ------------------------------------------------------------------------------ pass
@pytest.mark.parametrize("transform", H.TRANSFORMS)
def test_plain_torch_passes_on_a_pure_function_under_every_transform(transform):
    assert H.check(pure, CALLS, transform, "torch").verdict == "pass"


@pytest.mark.parametrize("transform", H.TRANSFORMS)
def test_random_ops_with_same_randomness_match_the_loop(transform):
    def f(x):
        return x * torch.rand(3) + torch.randn(()) * x.sum()
    assert H.check(f, CALLS, transform, "torch", randomness="same").verdict == "pass"


@pytest.mark.parametrize("around", [torch.no_grad, torch.inference_mode, torch.enable_grad])
@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "jacrev", "jacfwd", "hessian"])
def test_a_context_around_the_call(around, transform):
    assert H.check(pure, CALLS, transform, "torch", around=around).verdict == "pass"


@pytest.mark.parametrize("entry", ["vmap", "allow_inplace", "functionalized"])
def test_the_tool_passes_on_in_place_code(entry):
    assert H.check(in_place, CALLS, "vmap_jacrev", entry).verdict == "pass"


def test_forward_mode_references_ignore_no_grad_as_torch_func_does():
    def f(x):
        with torch.no_grad():
            s = x.sum()
        return x * s
    for transform in ("jacfwd", "hessian", "vmap_grad", "jacrev"):
        assert H.check(f, CALLS, transform, "torch").verdict == "pass", transform


def test_threads_each_compared():
    r = H.check(pure, CALLS, "vmap_grad", "torch", threads=2)
    assert r.verdict == "pass"


# ------------------------------------------------------------------------------ wrong
def test_wrong_output_is_caught():
    def f(x):
        return x * 2 + (1.0 if stack_depth() else 0.0)
    r = H.check(f, CALLS, "vmap", "torch")
    assert (r.verdict, r.call) == ("wrong", 1) and r.detail.startswith("output 0")


def test_wrong_gradient_is_caught():
    def f(x):
        return x * x.detach() if stack_depth() else x * x
    assert H.check(f, CALLS, "vmap_grad", "torch").verdict == "wrong"


def test_only_the_second_call_wrong_is_caught():
    seen = []

    def f(x):
        if stack_depth():
            seen.append(1)
        return x * (2.0 if len(seen) > 1 else 1.0)
    r = H.check(f, CALLS, "vmap", "torch")
    assert (r.verdict, r.call) == ("wrong", 2)


def test_caller_state_written_once_where_the_loop_writes_per_entry_is_wrong():
    buf = torch.ones(3)

    def f(x):
        buf.mul_(0.5)  # plain vmap runs this once for the batch; the loop once per entry
        return x + buf
    r = H.check(f, CALLS, "vmap", "torch", state={"buf": buf})
    assert r.verdict == "wrong" and ("buf" in r.detail or "output" in r.detail)


def test_a_module_buffer_and_a_plain_attribute_are_compared():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
            self.steps = 0

        def forward(self, x):
            if stack_depth():
                self.steps += 1  # the loop would count every entry
            return x * 2
    m = M()
    r = H.check(m, CALLS, "vmap", "torch", state={"model": m})
    assert r.verdict == "wrong" and "model.steps" in r.detail


def test_a_dict_entry_rebound_is_compared_and_restored():
    d = {"k": torch.zeros(3)}
    original = d["k"]

    def f(x):
        if stack_depth():
            d["k"] = torch.ones(3)
        return x * 1.0
    r = H.check(f, CALLS, "vmap", "torch", state={"d": d})
    assert r.verdict == "wrong" and "d['k']" in r.detail
    snap = H.Snapshot({"d": d})
    d["k"] = torch.full((3,), 7.0)
    d["new"] = 1
    snap.restore()
    assert set(d) == {"k"} and d["k"] is not original  # the snapshot's objects come back


def test_a_tensor_that_escaped_the_transform_into_caller_state_is_wrong():
    cache = {"last": torch.zeros(3)}

    def f(x):
        cache["last"] = x.detach()  # under vmap: a batched tensor kept past the call
        return x * 1.0
    r = H.check(f, CALLS, "vmap", "torch", state={"cache": cache})
    assert r.verdict == "wrong" and "holds an escaped tensor" in r.detail


def test_random_state_changed_only_by_the_transform_is_wrong():
    def f(x):
        if stack_depth():
            torch.rand(1)
        return x * 1.0
    r = H.check(f, CALLS, "vmap", "torch", randomness="same")
    assert r.verdict == "wrong" and r.detail == "random state of cpu"


def test_every_registered_random_source_is_covered(monkeypatch):
    # a device of our own: a call that changes its state under a transform only is wrong
    device = {"state": [torch.zeros(1)]}
    fake = S.RandomSource("fakedev", lambda: True, lambda: [t.clone() for t in device["state"]],
                          lambda v: device.__setitem__("state", [t.clone() for t in v]))
    monkeypatch.setattr(S, "RANDOM_SOURCES", [*S.RANDOM_SOURCES, fake])

    def f(x):
        if stack_depth():
            device["state"][0] += 1
        return x * 1.0
    r = H.check(f, CALLS, "vmap", "torch")
    assert r.verdict == "wrong" and r.detail == "random state of fakedev"
    assert "fakedev" in H.random_state()


def test_raising_after_a_write_is_wrong_not_refused():
    buf = torch.zeros(3)

    def f(x):
        if stack_depth():
            buf.add_(1)
            raise RuntimeError("refused at test_harness.py:1")
        return x * 1.0
    r = H.check(f, CALLS, "vmap", "torch", state={"buf": buf})
    assert r.verdict == "wrong" and r.detail.startswith("raised and changed buf")


# ------------------------------------------------------------------------------ errors
def test_refused_names_the_users_line_unclear_does_not():
    def f(x, *, text):
        if stack_depth():
            raise RuntimeError(text)
        return x * 1.0
    here = f"{__file__.rsplit('/', 1)[-1]}:12"
    r = H.check(lambda x: f(x, text=f"cannot do this ({here})"), CALLS, "vmap", "torch")
    assert r.verdict == "refused"
    r = H.check(lambda x: f(x, text="cannot do this"), CALLS, "vmap", "torch")
    assert r.verdict == "unclear_error"


def test_a_note_naming_the_line_counts():
    def f(x):
        if stack_depth():
            e = RuntimeError("no")
            e.add_note(f"at {__file__}:3")
            raise e
        return x
    assert H.check(f, CALLS, "vmap", "torch").verdict == "refused"


def test_raising_where_plain_passes_is_a_regression(monkeypatch):
    def broken(fn):
        def wrapper(*a):
            raise RuntimeError("broken")
        return wrapper
    monkeypatch.setattr(funcbwd, "functionalized", broken)  # the public name is what is run
    r = H.check(pure, CALLS, "vmap", "functionalized")
    assert (r.verdict, r.plain) == ("regression", "pass")


def test_no_reference_when_the_loop_raises():
    def f(x):
        if not stack_depth():
            raise ValueError("eager refuses")
        return x
    r = H.check(f, CALLS, "vmap", "torch")
    assert r.verdict == "no_reference" and "eager refuses" in r.detail


def test_a_hang_is_a_verdict_and_poisons_the_process():
    release = threading.Event()

    def f(x):
        if stack_depth():
            release.wait()
        return x
    try:
        r = H.check(f, CALLS, "vmap", "torch", timeout=0.5)
        assert r.verdict == "hang" and "vmap" in H.hung()
        with pytest.raises(H.Poisoned):
            H.check(pure, CALLS, "vmap", "torch")
    finally:
        release.set()
        H._HUNG.clear()


# ------------------------------------------------------------------------------ loop semantics
def test_caller_state_is_carried_from_entry_to_entry():
    buf = torch.zeros(3)

    def f(x):
        buf.mul_(0.5).add_(x)
        return buf * 1.0
    want, after = [], torch.zeros(3)
    for i in range(4):
        after = after * 0.5 + X[i]
        want.append(after.clone())
    from funcbwd.harness.transforms import dims_of, loop
    got = loop("vmap", f, (X,), dims_of(0, (X,)), 0, None, "error", {"buf": buf}, False)
    assert torch.allclose(got, torch.stack(want)) and torch.allclose(buf, after)


def test_discard_starts_each_entry_from_the_state_before_the_call():
    buf = torch.ones(3)

    def f(x):
        buf.add_(x)
        return buf * 1.0
    from funcbwd.harness.transforms import dims_of, loop
    got = loop("vmap", f, (X,), dims_of(0, (X,)), 0, None, "error", {"buf": buf}, True)
    assert torch.allclose(got, X + 1) and torch.equal(buf, torch.ones(3))


def test_bad_input_names_the_choices():
    with pytest.raises(funcbwd.UnknownNameError, match="vmap_grad"):
        H.check(pure, CALLS, "vmapgrad", "torch")
    with pytest.raises(funcbwd.BadInputError, match="no vmap to replace"):
        H.check(pure, CALLS, "jacrev", "vmap")
    with pytest.raises(funcbwd.BadInputError, match="different"):
        H.check(pure, CALLS, "vmap", "torch", randomness="different")
    with pytest.raises(funcbwd.BadInputError, match="state_writes"):
        H.check(pure, CALLS, "vmap", "functionalized", state_writes="discard")


def test_the_discard_opt_in_is_passed_to_the_tool(monkeypatch):
    seen = []

    def vmap(func, *args, state_writes=None, **kwargs):
        seen.append(state_writes)
        return torch.func.vmap(func, *args, **kwargs)
    monkeypatch.setattr(funcbwd, "vmap", vmap)
    buf = torch.ones(3)

    def f(x):
        return x + buf  # reads only: the loop with discard equals the loop without
    r = H.check(f, CALLS, "vmap", "vmap", state={"buf": buf}, state_writes="discard")
    assert r.verdict == "pass" and seen == ["discard", "discard"]
