"""The grad transforms' eager stage (funcbwd.eager): functions torch.func cannot run at all but
eager autograd can (torch.autograd.grad inside, an old-style autograd.Function, an op with no
forward-mode formula), under funcbwd.jacrev/jacfwd/hessian/grad, funcbwd.vmap(jacrev(f)) and
vmap(vjp_fn) after funcbwd.vjp: each equals eager autograd per sample
(torch.autograd.functional.jacobian / hessian)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.functional import hessian as af_hessian
from torch.autograd.functional import jacobian as af_jacobian

import funcbwd
from funcbwd import eager, ladder
from funcbwd.internals.messages import forward_ad_missing

D = torch.float64  # the comparisons are made in double precision


# ------------------------------------------------------------------------------ the programs
def autograd_inside(x):
    """zuko's MonotonicTransform.call_and_ladj: a clone made to require grad, torch.autograd.grad
    of it inside the function (create_graph when the caller differentiates)."""
    create_graph = torch.is_grad_enabled() and x.requires_grad
    with torch.enable_grad():
        y = x.clone().requires_grad_()
        z = torch.sinh(y) * y
    (dz,) = torch.autograd.grad(z, y, torch.ones_like(z), create_graph=create_graph)
    return z * (dz * dz).log1p() + x.cos()


class OldSquare(torch.autograd.Function):
    """Old style: forward(ctx, x), ctx.save_for_backward, no setup_context, no jvp."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.exp()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1 + x) * x.exp()


def old_style(x):
    return OldSquare.apply(x.sin()) * x


class OldOnce(torch.autograd.Function):
    """Old style with a backward that cannot be differentiated (once_differentiable): the eager
    jvp falls back to Jacobian rows."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sinh()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cosh()


def old_once(x):
    return OldOnce.apply(x) * 2 + x[:1]


_IMG = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(1), dtype=D)


def grid_sampled(x):
    """grid_sample: no forward-mode formula (torch: "Trying to use forward AD with
    grid_sampler_2d"). x = (angle, tx, ty)."""
    c, s = x[0].cos(), x[0].sin()
    theta = torch.stack([torch.stack([c, -s, x[1]]), torch.stack([s, c, x[2]])]).unsqueeze(0)
    grid = F.affine_grid(theta, (1, 2, 5, 5), align_corners=False)
    return F.grid_sample(_IMG, grid, align_corners=False).flatten()[:7]


PROGRAMS = {"autograd inside": autograd_inside, "old-style Function": old_style,
            "once-differentiable Function": old_once, "grid_sample": grid_sampled}
#: eager autograd's hessian needs a double backward: grid_sampler_2d_backward has none in torch
HESSIAN = ("autograd inside", "old-style Function")


def xs(n=3, size=3, seed=0):
    return torch.randn(n, size, generator=torch.Generator().manual_seed(seed), dtype=D) * 0.5


def scalar(f):
    return lambda x: f(x).sum()


def loop(fn, batch):
    return torch.stack([fn(x) for x in batch])


@pytest.fixture(autouse=True)
def fresh():
    ladder.WORKED.clear()
    yield
    ladder.WORKED.clear()


# ------------------------------------------------------------------------------ the transforms
@pytest.mark.parametrize("name", PROGRAMS)
def test_jacrev(name):
    f = PROGRAMS[name]
    for x in xs():
        torch.testing.assert_close(funcbwd.jacrev(f)(x), af_jacobian(f, x))


@pytest.mark.parametrize("name", PROGRAMS)
def test_jacfwd(name):
    f = PROGRAMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in xs():
            torch.testing.assert_close(funcbwd.jacfwd(f)(x), af_jacobian(f, x))


@pytest.mark.parametrize("name", HESSIAN)
def test_hessian(name):
    f = scalar(PROGRAMS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x in xs(2):
            torch.testing.assert_close(funcbwd.hessian(f)(x), af_hessian(f, x))


@pytest.mark.parametrize("name", PROGRAMS)
def test_grad(name):
    f = scalar(PROGRAMS[name])
    for x in xs():
        torch.testing.assert_close(funcbwd.grad(f)(x), af_jacobian(f, x))


@pytest.mark.parametrize("name", PROGRAMS)
def test_vmap_jacrev_per_sample(name):
    """The vmap's batched run fails (no grad transform can run f under it); its per-sample loop
    stage runs jacrev(f) once per sample, outermost, where the eager stage applies."""
    f = PROGRAMS[name]
    batch = xs(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = funcbwd.vmap(torch.func.jacrev(f))(batch)
    torch.testing.assert_close(got, loop(lambda x: af_jacobian(f, x), batch))


@pytest.mark.parametrize("name", PROGRAMS)
def test_vmap_vjp_fn(name):
    """funcbwd.vjp's vjp_fn (the eager stage's, built on torch.autograd.grad) under vmap."""
    f = PROGRAMS[name]
    x = xs(1)[0]
    out, vjp_fn = funcbwd.vjp(f, x)
    torch.testing.assert_close(out, f(x))
    cts = torch.randn(5, *out.shape, generator=torch.Generator().manual_seed(2), dtype=D)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (got,) = funcbwd.vmap(vjp_fn)(cts)
    J = af_jacobian(f, x)
    torch.testing.assert_close(got, cts @ J)


def test_jvp_and_value():
    f = grid_sampled
    x, v = xs(1)[0], torch.tensor([0.3, -1.0, 0.5], dtype=D)
    out, jv = funcbwd.jvp(f, (x,), (v,))
    torch.testing.assert_close(out, f(x))
    torch.testing.assert_close(jv, af_jacobian(f, x) @ v)


def test_the_stage_is_what_ran():
    """The answers above come from the eager stage (torch's own transform cannot run these)."""
    x = xs(1)[0]
    for f in (autograd_inside, grid_sampled):
        with pytest.raises(RuntimeError if f is autograd_inside else NotImplementedError):
            torch.func.jacfwd(f)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        funcbwd.jacfwd(grid_sampled)(x)
    assert eager.NAME in {w.how for w in ladder.WORKED._entries.values()}


def test_result_carries_no_graph_of_its_own():
    """Outside every transform and with inputs that need no grad, the results are plain tensors
    (torch.func's are): the stage's private leaves do not leak."""
    x = xs(1)[0]
    assert not funcbwd.jacrev(autograd_inside)(x).requires_grad
    assert not funcbwd.grad(scalar(old_once))(x).requires_grad


def test_differentiable_through_the_caller():
    """An input that requires grad: the eager answer is differentiable as torch.func's is."""
    x = xs(1)[0].requires_grad_()
    g = funcbwd.grad(scalar(autograd_inside))(x)
    (h,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(h, af_hessian(scalar(autograd_inside), x.detach()).sum(0))


def test_caller_state_written_once():
    """A write into the caller's tensor in a function torch.func cannot run: the failed attempts'
    writes are put back (the journal), the eager run writes it once, as eager autograd does."""
    count = torch.zeros((), dtype=D)

    def f(x):
        count.add_(1)
        return autograd_inside(x)

    x = xs(1)[0]
    torch.testing.assert_close(funcbwd.jacrev(f)(x), af_jacobian(autograd_inside, x))
    assert count.item() == 1.0


def test_caller_state_written_per_basis_vector_is_not_repeated():
    """jacfwd runs the function once per basis vector (the per-sample loop over the basis): its
    write would repeat 3 times where eager autograd writes once. The eager stage steps aside
    (torch's error, with what funcbwd tried), nothing is left written; under state_writes="discard" the answer, the tensor
    given back as it was."""
    count = torch.zeros((), dtype=D)

    def f(x):
        count.add_(1)
        return autograd_inside(x)

    x = xs(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as info:
            funcbwd.jacfwd(f)(x)
        assert "funcbwd could not run it either" in " ".join(getattr(info.value, "__notes__", []))
        assert count.item() == 0.0
        got = funcbwd.jacfwd(f, state_writes="discard")(x)
    torch.testing.assert_close(got, af_jacobian(autograd_inside, x))
    assert count.item() == 0.0


def test_not_outermost_is_one_clear_error():
    """Under a grad level funcbwd does not route (torch.func's own jacrev around the drop-in),
    the eager stage cannot apply: torch's error, and a note naming what funcbwd tried."""
    x = xs(1)[0]
    with pytest.raises(RuntimeError) as info:
        torch.func.jacrev(funcbwd.jacrev(autograd_inside))(x)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "requires_grad_()" in str(info.value).splitlines()[0]
    assert eager.NAME in notes and "outermost" in notes


def test_forward_ad_message_still_recognized():
    """The one text-only signal (funcbwd.internals.messages): torch's current wording."""
    x = xs(1)[0]
    with pytest.raises(NotImplementedError) as info:
        torch.func.jacfwd(grid_sampled)(x)
    assert forward_ad_missing(info.value)
    assert not forward_ad_missing(RuntimeError("shape mismatch"))


def test_no_eager_answer_under_inference_mode():
    """Found by the generated programs (a captured buffer written under jacrev, called inside
    torch.inference_mode()): the eager stage answered with what autograd records there, nothing,
    a wrong Jacobian. Now it does not apply there and the other stages decide (plain torch.func
    raises too). Mutation: without the check, the Jacobian is returned and differs."""
    buf = torch.zeros(4)

    def f(x):
        buf.mul_(0.5).add_(x.sin())
        return x * 2.0

    x = torch.randn(4)
    with torch.inference_mode():
        try:
            got = funcbwd.jacrev(f)(x)
        except Exception:  # noqa: BLE001 - a refusal keeps the contract
            return
    torch.testing.assert_close(got, torch.eye(4) * 2.0)
