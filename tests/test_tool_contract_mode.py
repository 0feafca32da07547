"""The mode's contract on small programs of its own, one per class of bug the generated programs
found (lib/funcbwd_lab/studies/generated): each checked against the per-sample loop by
:func:`funcbwd.harness.check` (the answer, the gradients, the caller's state, the random state)."""

from __future__ import annotations

import pytest
import torch

from funcbwd import harness
from funcbwd.errors import FuncbwdError

B = 4


def _calls(seed: int = 0) -> list[harness.Call]:
    g = torch.Generator().manual_seed(seed)
    return [harness.Call((torch.randn(B, 4, generator=g),)),
            harness.Call((torch.randn(B, 4, generator=g),))]


def view_returned_after_its_base_is_promoted(x):
    buf = torch.zeros(4)
    whole = buf[:]  # taken before the batched write, returned without another use
    buf.add_(x * 2.0)
    return whole


@pytest.mark.parametrize("transform", ["vmap", "vmap_vjp", "vmap_vmap", "vmap_grad",
                                       "vmap_jacrev"])
@pytest.mark.parametrize("entry", ["vmap", "allow_inplace"])
def test_a_returned_view_of_a_promoted_tensor_has_the_write(transform, entry):
    if not harness.applies(transform, entry):
        pytest.skip("no vmap to replace")
    r = harness.check(view_returned_after_its_base_is_promoted, _calls(), transform, entry)
    assert r.ok, r


def _writes_in_place(x):
    y = torch.zeros(4)
    y.add_(x)
    return y


def test_two_threads_interleaving_allow_inplace_leave_torch_as_it_was():
    """A enters, B enters, A leaves, B leaves: torch's transforms are torch's again (a
    save-and-restore per block left A's routing installed for good: every later block wrapped
    it once more, RecursionError under hessian, a hang), and B's block kept its routing after A
    left."""
    import threading

    import funcbwd

    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    got = {}

    def a():
        with funcbwd.allow_inplace():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():
        a_in.wait(10)
        with funcbwd.allow_inplace():
            b_in.set()
            a_out.wait(10)
            got["b"] = torch.func.vmap(_writes_in_place)(torch.ones(B, 4))

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert torch.equal(got["b"], torch.ones(B, 4))
    with pytest.raises(RuntimeError, match="broadcast shape"):
        torch.func.vmap(_writes_in_place)(torch.ones(B, 4))  # torch's own vmap again


def inference_mode_inside(x):
    y = x.sin() * 1.0
    with torch.inference_mode():
        y.add_(x[0:2].sum())  # torch.func: "Cannot set version_counter for inference tensor"
    return y


@pytest.mark.parametrize("transform", ["vmap_grad", "vmap_vjp", "vmap_jacrev", "jacrev"])
@pytest.mark.parametrize("entry", ["vmap", "allow_inplace"])
def test_inference_mode_inside_a_grad_transform_is_refused_naming_the_line(transform, entry):
    if not harness.applies(transform, entry):
        pytest.skip("no vmap to replace")
    r = harness.check(inference_mode_inside, _calls(), transform, entry)
    assert r.verdict == "refused" and "inference_mode" in r.detail, r


def detached_in_place(x):
    t = x.new_empty(4).fill_(0.25)
    v = t.view(2, 2)[1]
    t.sub_(t + x.cos())
    t.detach_()  # torch's vmap: "Can't detach views in-place" (its fallback slices the batch)
    u = x * 2.0
    u.detach_()
    return t * x + v.repeat(2) + u


def detaches_its_argument(x):
    x.detach_()
    return x * 2.0


@pytest.mark.parametrize("transform", ["vmap", "vmap_vmap", "vmap_grad", "vmap_jacrev"])
@pytest.mark.parametrize("entry", ["vmap", "allow_inplace"])
def test_detach_in_place_of_a_fresh_batched_tensor(transform, entry):
    r = harness.check(detached_in_place, _calls(), transform, entry)
    assert r.verdict == "pass", r


def test_detach_in_place_of_an_argument_is_refused_naming_the_line():
    with pytest.raises(Exception) as e:
        import funcbwd
        funcbwd.vmap(detaches_its_argument)(torch.randn(B, 4))
    assert "detach_" in str(e.value) and "test_tool_contract_mode.py:" in str(e.value)


def written_then_sined(x):
    t = x.new_tensor([1.0, 2.0, 3.0, 4.0])
    t.sub_(x * 3.0)
    t.sin_()
    return t[:]


def test_a_graph_is_never_kept_unchecked_inside_another_transform():
    """vmap(jacrev(f)) in allow_inplace: jacrev's call (inside the vmap) needed the mode; on its
    second call a traced graph of f was kept without comparing answers (wrapped tensors) and
    the third and later calls were wrong. Four calls against the per-sample Jacobians."""
    import funcbwd

    g = torch.Generator().manual_seed(189)
    for _ in range(4):
        xs = torch.randn(B, 4, generator=g)
        want = torch.stack([torch.autograd.functional.jacobian(written_then_sined, x)
                            for x in xs])
        with funcbwd.allow_inplace():
            got = torch.func.vmap(torch.func.jacrev(written_then_sined))(xs)
        torch.testing.assert_close(got, want)


shared = torch.zeros(4)


def draws_then_writes_shared_state(x):
    t = torch.nn.functional.dropout(x * 2.0, 0.5, training=True)
    shared.copy_(x)  # refused (state_writes="refuse"): every batch entry would share it
    return t


@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "vmap_vmap"])
@pytest.mark.parametrize("entry", ["vmap", "allow_inplace"])
def test_a_refused_call_leaves_the_random_state_as_it_was(transform, entry):
    r = harness.check(draws_then_writes_shared_state, _calls(), transform, entry,
                      state={"shared": shared}, randomness="same")
    assert r.verdict == "refused", r


class Ring(torch.nn.Module):
    """Keys written at a pointer read as an int (MoCo's queue): only a loop can run it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(3, 4))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    def forward(self, v):
        i = int(self.ptr)
        self.keys[i] = v.detach()
        self.ptr.fill_((i + 1) % 3)
        return v + self.keys.mean(0)


ring = Ring()


def through_the_ring(x):
    return ring(x.sin()) + ring(x * 2.0)


@pytest.mark.parametrize("transform", ["jacfwd", "hessian", "jacrev"])
def test_a_loop_over_basis_vectors_runs_each_from_the_same_state(transform):
    """jacfwd's vmap over basis vectors, run as a loop, ran each basis vector from the state the
    one before left (keys[2] written, the pointer advanced 4 times): they are one call."""
    r = harness.check(through_the_ring, _calls(), transform, "allow_inplace",
                      state={"ring": ring})
    assert r.verdict in ("pass", "refused"), r


def fails_in_every_stage(x):
    y = x * 2.0
    raise RuntimeError("vmap: It looks like you're calling .item() on a Tensor")  # as torch


def test_an_error_no_stage_fixes_names_the_line_torch_raised_at():
    import funcbwd

    with pytest.raises(RuntimeError) as e:
        with funcbwd.allow_inplace():
            torch.func.jacrev(fails_in_every_stage)(torch.randn(4))
    line = fails_in_every_stage.__code__.co_firstlineno + 2
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert f"test_tool_contract_mode.py:{line})" in notes, notes


_ONE_SOURCE = '''
import torch
scale = torch.tensor(SCALE)

def f(x):
    t = x.exp() * scale
    t[x > 0] = (x * 2.0)[x > 0]
    u = x.new_empty(4).fill_(0.25)
    u.sub_(u * x * scale)
    return torch.stack([t, u])
'''


def test_two_modules_of_one_source_do_not_share_what_worked():
    """Code objects of one source compare equal across modules: what worked for one module's
    f (a traced graph, over its globals) was used for the other's (output error 12)."""
    import funcbwd

    def module(scale: float):
        ns: dict = {}
        exec(compile(_ONE_SOURCE.replace("SCALE", str(scale)), "one_source.py", "exec"), ns)
        return ns["f"]

    g = torch.Generator().manual_seed(376)
    a, b = module(5.0), module(2.0)
    assert a.__code__ == b.__code__
    for _ in range(3):
        funcbwd.vmap(a)(torch.randn(B, 4, generator=g))
    xs = torch.randn(B, 4, generator=g)
    torch.testing.assert_close(funcbwd.vmap(b)(xs), torch.stack([b(x) for x in xs]))


memo = {"last": torch.zeros(4)}
appended: list = []


def keeps_a_per_sample_value(x):
    memo["last"] = x.cumsum(0).detach()  # a per-sample value the caller keeps
    return x * 2.0


def appends_a_per_sample_value(x):
    appended.append(x.cumsum(0))
    return x * 2.0


@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "vmap_vjp", "vmap_jacrev",
                                       "vmap_vmap"])
@pytest.mark.parametrize("entry", ["vmap", "allow_inplace"])
def test_a_per_sample_value_the_caller_keeps_is_the_loops(transform, entry):
    """torch's vmap leaves the batched tensor (dead outside the transform) in the dict: funcbwd
    runs the per-sample loop instead, which leaves the last entry's value."""
    r = harness.check(keeps_a_per_sample_value, _calls(), transform, entry, state={"memo": memo})
    assert r.verdict == "pass", r


def test_a_per_sample_value_appended_by_the_function_is_refused_naming_it():
    import funcbwd

    with pytest.raises(FuncbwdError, match="kept by the caller") as e:
        funcbwd.vmap(appends_a_per_sample_value)(torch.randn(B, 4))
    line = appends_a_per_sample_value.__code__.co_firstlineno
    assert f"test_tool_contract_mode.py:{line}" in str(e.value)
    appended.clear()
