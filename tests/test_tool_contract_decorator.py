"""funcbwd.functionalized keeps the contract (docs/generated.md) on the classes the seeded subset
of generated programs found outside it: each test is a program of its own, checked against the
per-sample loop (:func:`funcbwd.harness.check`) or torch's own answer."""

from __future__ import annotations

import threading

import pytest
import torch

import funcbwd
from funcbwd import harness, internals


def batch(seed: int = 0, n: int = 4) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))


def check(f, transform, calls=None, **kw) -> harness.Result:
    calls = calls or [harness.Call((batch(0),)), harness.Call((batch(1),))]
    return harness.check(f, calls, transform, "functionalized", timeout=60, **kw)


# ------------------------------------------------------------------ routing across threads
def test_two_threads_routing_vmap_leave_torch_as_it_was():
    """Two threads' routing blocks interleaved (A enters, B enters, A leaves, B leaves) leave
    torch's vmap_impl and Function.apply torch's own, and each thread sees its own routing
    only. (A global swap per block leaked A's replacement: B saved it as "the original"; every
    later call went through one more wrapper, until RecursionError.)"""
    import torch._functorch.apis as apis

    vmap_impl, apply = apis.vmap_impl, torch.autograd.Function.__dict__["apply"]
    entered = [threading.Event(), threading.Event()]
    left_a = threading.Event()
    seen: dict[str, list] = {"a": [], "b": []}

    def routed(name):
        def make(original):
            def impl(*args, **kwargs):
                seen[name].append(1)
                return original(*args, **kwargs)
            return impl
        return make

    def a():
        with internals.vmap_impl_replaced(routed("a")), \
                internals.function_apply_replaced(lambda original: original):
            entered[0].set()
            entered[1].wait(10)
        left_a.set()

    def b():
        entered[0].wait(10)
        with internals.vmap_impl_replaced(routed("b")), \
                internals.function_apply_replaced(lambda original: original):
            entered[1].set()
            left_a.wait(10)
            torch.func.vmap(torch.sin)(torch.ones(2, 3))

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"a": [], "b": [1]}
    assert apis.vmap_impl is vmap_impl
    assert torch.autograd.Function.__dict__["apply"] is apply


def test_a_closure_after_a_two_thread_program_under_hessian():
    """The generated programs' order: a program called from two threads under vmap(vmap), then a
    closure under hessian in the same process (was RecursionError)."""

    def writes(x):
        t = torch.empty_like(x).zero_()
        t.mul_(x.cumsum(0))
        t.index_add_(0, torch.tensor([1, 3]), t[2:] * x[:2])
        return t * 1.0

    for entry in ("allow_inplace", "functionalized"):
        r = harness.check(writes, [harness.Call((batch(0),))], "vmap_vmap", entry, threads=2,
                          timeout=60)
        assert r.ok, r

    def make(c):
        def f(x):
            return x * 2.0 * c
        return f

    r = check(make(2.0), "hessian", [harness.Call((batch(0),)),
                                     harness.Call((batch(1),), fn=make(-1.5))])
    assert r.verdict == "pass", r


# ------------------------------------------------------------------ boolean masks: the audit sees
def reads_requires_grad_beside_a_mask(x):
    t = x.clone()
    t[x > 0] = (t + x.cos())[x > 0]
    if t.requires_grad:  # True in the per-sample loop of a differentiated call
        t[2:4] = x[1::2]
    return t * 1.0


def writes_under_no_grad_beside_a_mask(x):
    t = x.clone()
    t[x > 0] = 0.5
    with torch.no_grad():
        t.mul_(3.0)  # not recorded: the gradient flows as if it had not happened
    return t * x


@pytest.mark.parametrize("f", [reads_requires_grad_beside_a_mask,
                               writes_under_no_grad_beside_a_mask])
@pytest.mark.parametrize("transform", ["vmap_grad", "jacrev", "hessian"])
def test_a_function_with_a_mask_is_audited(f, transform):
    """A function with a boolean mask is traced again with masks as ``where`` under the mask
    rules' mode; the audit (requires_grad read, write under no_grad) ran outside that mode and
    saw nothing: the graph fixed ``requires_grad`` at trace time (False) and differentiated the
    no_grad write."""
    r = check(f, transform)
    assert r.verdict == "pass", r


# ------------------------------------------------------------------ as written: a clear refusal
def draws_then_reads_a_value(x):
    noise = torch.rand(4)  # drawn before the refusal: the random state must be put back
    t = torch.zeros(4)
    t.add_(x * x.sum().item())  # a per-sample value read: no graph, no vmap can run it
    return t + noise


@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "vmap_vmap"])
def test_code_no_transform_can_run_is_refused_naming_the_line(transform):
    """A data-dependent function runs as written under the transform; torch's error (vmap's
    ``.item()``) leaked naming no line of the user's file, and the random state stayed advanced.
    Now: torch's error with a note naming what ran and the user's file:line, nothing drawn."""
    r = check(draws_then_reads_a_value, transform)
    assert r.verdict == "refused", r


# ------------------------------------------------------------------ a cached graph's constants
def writes_through_a_constant_mask(x):
    t = x.new_empty(4).fill_(0.25)
    t[torch.tensor([True, False, True, False])] = (x * x).sum()
    return t * 1.0


@pytest.mark.parametrize("transform", ["jacrev", "hessian", "vmap_jacrev"])
def test_a_graph_built_under_a_grad_transform_runs_on_the_next_call(transform):
    """The graph's copy (and a pass's buffers) were made under the first call's grad transform:
    its constant (the mask) was wrapped at that level, dead at the second call (torch's INTERNAL
    ASSERT ``level.has_value()``)."""
    r = check(writes_through_a_constant_mask, transform)
    assert r.verdict == "pass", r


# ------------------------------------------------------------------ tensors from Python data
def writes_into_new_tensor(x):
    t = x.new_tensor([1.0, 2.0, 3.0, 4.0])
    t.sub_(x * 3.0)  # t now carries x's gradient (eager: a fresh leaf written)
    t.sin_()
    return t[:]


def writes_into_torch_tensor(x):
    t = torch.tensor([1.0, -2.0, 0.5, 4.0])
    t[1:3] = x[:2] * x[2:]
    return t * 2.0


@pytest.mark.parametrize("f", [writes_into_new_tensor, writes_into_torch_tensor])
@pytest.mark.parametrize("transform", ["vmap_grad", "jacrev", "jacfwd", "hessian"])
def test_a_write_into_a_tensor_from_data_keeps_its_gradient(f, transform):
    """torch.tensor / new_tensor is detach(lift_fresh(data)) under functionalization, which
    regenerated the detach after the write: the graph's gradient was zero."""
    r = check(f, transform)
    assert r.verdict == "pass", r


# ------------------------------------------------------------------ no_grad under forward mode
def scales_by_a_no_grad_sum(x):
    t = torch.zeros(4)
    with torch.no_grad():
        s = x.sum()  # reverse mode: a constant; forward mode ignores no_grad: a tangent
    t.add_(x * s)
    return t * 1.0


def writes_a_fresh_tensor(x):
    t = torch.zeros(4)
    view = t[:]
    t.add_(x * 2.0)
    return view


@pytest.mark.parametrize("f,around", [(scales_by_a_no_grad_sum, None),
                                      (writes_a_fresh_tensor, lambda: torch.no_grad())])
@pytest.mark.parametrize("transform", ["jacfwd", "hessian", "jacrev"])
def test_no_grad_under_forward_mode(f, around, transform):
    """The trace detaches what runs under no_grad (reverse mode's answer); forward-mode AD
    ignores no_grad (eager and torch.func alike): the graph's answer was wrong under jacfwd and
    hessian, also for a whole call made under no_grad."""
    r = check(f, transform, around=around)
    assert r.verdict == "pass", r


# ------------------------------------------------------------------ .data of a tensor the call made
def scales_a_fresh_tensor_through_data(x):
    t = x.new_tensor([1.0, 2.0, 3.0, 4.0])
    t.data.mul_(2.0)  # no gradient anywhere: plain torch.func runs it
    t.sub_(x)
    return t * 1.0


def doubles_through_data_after_a_gradient(x):
    t = torch.zeros(4)
    d = t.data
    t.add_(x)
    d.mul_(2.0)  # eager: the values doubled, the gradient not
    return t * 1.0


@pytest.mark.parametrize("f", [scales_a_fresh_tensor_through_data,
                               doubles_through_data_after_a_gradient])
@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "jacrev", "hessian"])
def test_data_of_a_tensor_the_call_made(f, transform):
    """``.data`` of a fresh tensor could not be traced: the call ran as written, where the
    in-place mode took the alias for the caller's tensor and refused under vmap
    (StateWriteError: a regression, plain torch.func runs it). It is traced as ``.detach()`` now;
    a write through it into a tensor that carries gradient by then is refused (as written)."""
    r = check(f, transform)
    assert r.verdict == "pass", r


def writes_a_gradient_through_detach_of_a_fresh_tensor(x):
    t = x.new_ones(4)
    t.detach()[2] = x.norm()  # eager: t's value changes, its gradient does not
    t.index_put_((torch.tensor([0, 3]),), x[1::2])
    return t * 1.0


@pytest.mark.parametrize("transform", ["vmap_grad", "jacrev", "jacfwd", "hessian"])
def test_a_gradient_written_through_detach_is_not_differentiated(transform):
    """A value carrying gradient written through ``.detach()`` of a tensor that carries none:
    functionalization propagates it to the tensor with its gradient, eager does not (the
    gradient stays in the alias). Refused in the trace: the function runs as written."""
    r = check(writes_a_gradient_through_detach_of_a_fresh_tensor, transform)
    assert r.verdict == "pass", r


# ------------------------------------------------------------------ Python stores of the caller's
CACHE = {"last": torch.zeros(4)}


def keeps_the_last_value(x):
    t = torch.ones_like(x)
    CACHE["last"] = (x * x).detach()
    t.add_(x * 2)
    return t * 1.0


@pytest.mark.parametrize("transform,verdict", [("vmap", "refused"), ("vmap_grad", "refused"),
                                               ("jacrev", "pass"), ("jacfwd", "pass")])
def test_a_tensor_stored_in_the_callers_dict(transform, verdict):
    """The trace stored its own (fake, functional) tensor in the caller's dict, and the cached
    graph never stored again; under vmap the call as written stores a batched tensor that escapes
    the transform. Now: the trace's store is undone and the function runs as written; under vmap
    the store is undone and refused, naming the path and the function's file:line."""
    CACHE["last"] = torch.zeros(4)
    r = check(keeps_the_last_value, transform, state={"CACHE": CACHE})
    assert r.verdict == verdict, r


def detaches_a_fresh_tensor_in_place(x):
    t = torch.empty_like(x).zero_()
    t.detach_()  # a no-op in eager (t carries no gradient yet)
    view = t[:]
    t.add_((x * x.cos()).sum())
    return view


@pytest.mark.parametrize("transform", ["vmap_grad", "jacrev"])
def test_detach_in_place_of_a_fresh_tensor(transform):
    """``detach_()`` of a tensor carrying no gradient, then a write carrying gradient: the graph
    lost the gradient of the view (functionalization follows detach_ as a view op)."""
    r = check(detaches_a_fresh_tensor_in_place, transform)
    assert r.verdict == "pass", r


def stores_then_reads_a_value(x):
    CACHE["last"] = (x * x).detach()
    t = torch.zeros(4)
    t.add_(x * x.sum().item())  # no trace, and vmap cannot run it either: refused
    return t


@pytest.mark.parametrize("transform", ["vmap", "vmap_grad", "vmap_vmap"])
def test_a_refused_call_stores_nothing(transform):
    """A call that stored into the caller's dict and then raised left the store behind (the
    trace's, then the batched one): everything reachable is put back when it raises."""
    CACHE["last"] = torch.zeros(4)
    r = check(stores_then_reads_a_value, transform, state={"CACHE": CACHE})
    assert r.verdict == "refused", r


# ------------------------------------------------------------------ random fills
WEIGHTS = torch.tensor([1.0, -1.0, 0.5, 2.0])


def fills_at_random(x):
    t = x * x * WEIGHTS
    t.bernoulli_(0.5)  # functionalized: aten::bernoulli.p, which has no derivative in torch
    u = x * 2.0
    u.normal_()  # aten::normal_functional: none either
    return t + u * x


@pytest.mark.parametrize("transform", ["jacrev", "vmap_grad", "hessian"])
def test_a_random_fill_under_reverse_mode(transform):
    """The in-place fill's derivative is zero; its functional form's is not implemented: the
    graph raised torch's 'derivative for aten::bernoulli is not implemented' (after drawing)
    where plain torch.func passes."""
    r = check(fills_at_random, transform, randomness="same")
    assert r.verdict == "pass", r


BUF = torch.zeros(4)


def writes_a_buffer_and_stores(x):
    BUF.add_(1.0)  # the caller's tensor: not traced (a captured write), runs as written
    CACHE["last"] = x * 2.0  # batched over jacfwd's basis vectors: escapes
    return x * x


def test_a_refused_store_leaves_the_callers_tensors_as_they_were():
    """The store is refused after the call ran: its writes into the caller's tensors (committed
    by then) stayed. They are held in a journal of the decorator's until the check passes."""
    CACHE["last"], BUF[:] = torch.zeros(4), 0.0
    r = check(writes_a_buffer_and_stores, "jacfwd", state={"CACHE": CACHE, "BUF": BUF})
    assert r.verdict == "refused", r
