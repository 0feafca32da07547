"""@funcbwd.functionalized on torch.autograd.Function subclasses (functorch#207's ReLUAlpha,
re-created in setup_context style): backward/jvp functionalized under transforms, saved tensors
as graph inputs, ctx attributes in the key, generate_vmap_rule, the old-style refusal."""

from __future__ import annotations

import pytest
import torch
from torch.func import jacfwd, jacrev, vjp, vmap

import funcbwd
from funcbwd import internals, scope
from funcbwd.errors import FuncbwdError
from funcbwd import functions as oldstyle


class ReLUAlpha(torch.autograd.Function):
    """functorch#207 (comment of 2022-12-23): backward masks a copy of the cotangent in place.
    setup_context style with generate_vmap_rule, as torch.func requires: the fair plain case."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, alpha):
        return x.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, alpha = inputs
        ctx.save_for_backward(x)
        ctx.alpha = alpha

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        grad_input[x == 0] = ctx.alpha
        return grad_input, None


def torch_grad(x, alpha):
    """The derivative torch's own ops give (ReLU, with alpha at 0)."""
    return torch.where(x > 0, 1.0, torch.where(x == 0, alpha, 0.0)).to(x.dtype)


def torch_vjp(x, g, alpha):
    """What the backward computes, out of place (alpha where x == 0, whatever the cotangent)."""
    return torch.where(x == 0, torch.full_like(g, alpha), torch.where(x > 0, g, torch.zeros_like(g)))


@pytest.fixture
def x():
    x = torch.randn(4, 5, dtype=torch.float64)
    x[0, 0] = x[1, 2] = 0.0  # the alpha branch
    return x


def test_plain_fails_under_vmap_of_reverse_mode(x):
    """torch 2.13 and 2.14 refuse the masked write; 2.15 batches it (make test-newest, 2026-12-06):
    there the plain answer must be the per-sample loop's, or the premise changed in a new way."""
    plain = lambda: vmap(jacrev(lambda v: ReLUAlpha.apply(v, 10.0)))(x)  # noqa: E731
    if torch.__version__ < (2, 15):
        with pytest.raises(RuntimeError, match="dynamic shape|nonzero"):
            plain()
    else:
        torch.testing.assert_close(torch.diagonal(plain(), dim1=1, dim2=2), torch_grad(x, 10.0))


def test_wrapped_matches_loop_and_torch(x):
    F = funcbwd.functionalized(ReLUAlpha)
    jac = vmap(jacrev(lambda v: F.apply(v, 10.0)))(x)
    loop = torch.stack([torch.autograd.functional.jacobian(lambda v: ReLUAlpha.apply(v, 10.0), s)
                        for s in x])
    torch.testing.assert_close(jac, loop)
    torch.testing.assert_close(torch.diagonal(jac, dim1=1, dim2=2), torch_grad(x, 10.0))
    # vmap(vjp) with batched primals and cotangents
    g = torch.randn_like(x)
    got = vmap(lambda v, c: vjp(lambda u: F.apply(u, 10.0), v)[1](c)[0])(x, g)
    torch.testing.assert_close(got, torch_vjp(x, g, 10.0))
    # forward mode over the generated vmap rule (no jvp staticmethod: torch's own)
    with pytest.raises(RuntimeError):
        jacfwd(lambda v: F.apply(v, 10.0))(x[0])  # no jvp defined: forward AD refuses, as plain


def test_saved_tensors_are_inputs_and_attributes_are_keys(x):
    F = funcbwd.functionalized(ReLUAlpha)
    for alpha in (10.0, 5.0, 10.0):
        g = torch.randn_like(x)
        got = vmap(lambda v, c: vjp(lambda u: F.apply(u, alpha), v)[1](c)[0])(x, g)
        torch.testing.assert_close(got, torch_vjp(x, g, alpha))
        y = -x  # another saved tensor, same signature: not baked into the graph
        got = vmap(lambda v, c: vjp(lambda u: F.apply(u, alpha), v)[1](c)[0])(y, g)
        torch.testing.assert_close(got, torch_vjp(y, g, alpha))
    info = F.cache_info()
    assert info.misses == 2 and info.hits == 4  # one graph per alpha


def test_outside_transforms_backward_runs_as_written(x):
    F = funcbwd.functionalized(ReLUAlpha)
    v = x.clone().requires_grad_()
    F.apply(v, 10.0).sum().backward()
    torch.testing.assert_close(v.grad, torch_grad(x, 10.0))
    assert F.cache_info().misses == 0
    assert issubclass(F, ReLUAlpha) and F.generate_vmap_rule and F.__name__ == "ReLUAlpha"
    assert F.apply is not None and F.forward is ReLUAlpha.forward


class WithJvp(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        out = torch.zeros(g.shape, dtype=g.dtype)
        out.copy_(g * 2)
        return out

    @staticmethod
    def jvp(ctx, t):
        out = torch.zeros(t.shape, dtype=t.dtype)
        out[...] = t * 2
        return out

    @staticmethod
    def vmap(info, in_dims, x):
        return x * 2, in_dims[0]


def test_jvp_is_functionalized_and_a_vmap_rule_is_kept():
    F = funcbwd.functionalized(WithJvp)
    assert F.generate_vmap_rule is False  # the class has its own vmap staticmethod
    x = torch.randn(3, 4)
    torch.testing.assert_close(vmap(jacfwd(F.apply))(x), 2 * torch.eye(4).expand(3, 4, 4))
    torch.testing.assert_close(vmap(jacrev(F.apply))(x), 2 * torch.eye(4).expand(3, 4, 4))
    with pytest.raises(RuntimeError, match="inplace"):
        vmap(jacfwd(WithJvp.apply))(x)  # plain: the jvp writes a batched tangent into zeros


class OldStyle(torch.autograd.Function):  # entmax/torchdiffeq style: forward(ctx, ...)
    @staticmethod
    def forward(ctx, x, index):
        ctx.index = index  # an index tuple rebuilt by the caller on every call
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        out = torch.zeros_like(g)
        out[ctx.index] = g[ctx.index] * 3  # in place in a fresh tensor
        return out, None


def test_old_style_function_is_converted_and_its_index_ctx_value_hits_the_cache():
    F = funcbwd.functionalized(OldStyle)
    xs = torch.randn(4, 5)
    for _ in range(3):
        got = vmap(jacrev(lambda x: F.apply(x, (Ellipsis, slice(1, 4)))))(xs)
    want = torch.zeros(5, 5)
    want[1:4, 1:4] = 3 * torch.eye(3)
    torch.testing.assert_close(got, want.expand(4, 5, 5))
    info = F.cache_info()
    assert info.misses == 1 and info.hits == 2, info  # the slice/Ellipsis tuple keyed by value
    with pytest.raises(RuntimeError, match="setup_context"):
        vmap(jacrev(lambda x: OldStyle.apply(x, (Ellipsis, slice(1, 4)))))(xs)  # plain


def test_the_in_place_mode_converts_an_old_style_function_on_this_torch():
    # torch 2.14 made Function.apply a C++ classmethod_descriptor (no __func__): routing it
    # through funcbwd raised AttributeError, so funcbwd.vmap's in-place mode stage failed on
    # every call. run_inplace is that stage alone: no later stage can hide a failure here.
    xs = torch.randn(4, 5)
    torchs_own = torch.autograd.Function.__dict__["apply"]
    got = oldstyle.run_inplace(
        lambda: vmap(jacrev(lambda x: OldStyle.apply(x, (Ellipsis, slice(1, 4)))))(xs))
    want = torch.zeros(5, 5)
    want[1:4, 1:4] = 3 * torch.eye(3)
    torch.testing.assert_close(got, want.expand(4, 5, 5))
    assert torch.autograd.Function.__dict__["apply"] is torchs_own
    assert scope.current() == scope.Scope()  # every field back at rest


def test_a_failed_apply_patch_leaves_no_mode_flag_behind(monkeypatch):
    # the flag left set, every later funcbwd.vmap took itself for a vmap inside a retry and
    # raised torch's error without trying anything (what 2.14's AttributeError did)
    def broken(make):
        raise AttributeError("'classmethod_descriptor' object has no attribute '__func__'")

    monkeypatch.setattr(internals, "function_apply_replaced", broken)
    with pytest.raises(AttributeError):
        oldstyle.run_inplace(lambda: None)
    assert scope.current() == scope.Scope()


class _Cube(torch.autograd.Function):  # old style; its backward reads needs_input_grad
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return scale * x ** 3

    @staticmethod
    def backward(ctx, g):
        x, scale = ctx.saved_tensors
        gx = g * 3 * scale * x ** 2 if ctx.needs_input_grad[0] else None
        gs = (g * x ** 3).sum() if ctx.needs_input_grad[1] else None
        return gx, gs


class _CubeOnce(_Cube):
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        return _Cube.backward(ctx, g)


def test_forward_mode_from_a_backward_that_reads_needs_input_grad():
    """Forward mode leaves ``needs_input_grad`` all False: read as is, the backward returns no
    gradient and the rule built from it a zero Jacobian (zuko's SOSPF under jacfwd, 1.26 off)."""
    x, s = torch.rand(3, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    want = torch.autograd.functional.jacobian(lambda v: _Cube.apply(v, s), x)
    torch.testing.assert_close(funcbwd.jacfwd(lambda v: _Cube.apply(v, s))(x), want)
    xs = torch.rand(4, 3, dtype=torch.float64)
    got = funcbwd.vmap(funcbwd.jacfwd(lambda v: _Cube.apply(v, s)))(xs)
    torch.testing.assert_close(got, torch.stack([torch.diag(6 * v ** 2) for v in xs]))


def test_forward_mode_from_a_once_differentiable_backward_is_refused_never_zero():
    x, s = torch.rand(3, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    want = torch.autograd.functional.jacobian(lambda v: _CubeOnce.apply(v, s), x)
    # no forward mode can run it: the eager stage (funcbwd.eager) computes J v by reverse mode,
    # one Jacobian row at a time (the backward cannot be differentiated): eager's answer, never 0
    torch.testing.assert_close(funcbwd.jacfwd(lambda v: _CubeOnce.apply(v, s))(x), want)
    # reverse mode is fine
    torch.testing.assert_close(funcbwd.jacrev(lambda v: _CubeOnce.apply(v, s))(x), want)
