"""The five public reports the tool was first built on: PyTorch and functorch issues quoting
vmap's in-place error (each re-created minimally from the issue's own code)."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn, simple


# pytorch/pytorch#103329 (open, 2023-06-09): "vmap(jacrev(functionalize(f)))" fails; the user's f
def zeros_then_item_assignment(x, y):
    mat = torch.zeros(x.shape)
    mat[0, 0] = mat[0, 1] + x[0, 0]
    return mat


def zeros_then_item_assignment_rewrite(x, y):
    first = torch.cat([x[0, :1], torch.zeros_like(x[0, 1:])])  # mat[0, 1] is still 0
    return torch.cat([first[None], torch.zeros_like(x[1:])])


# pytorch/pytorch#97248 (open; zou3519, 2022-11-15): torch.empty then copy_ from two arguments
def empty_then_copy(x, y):
    z = torch.empty(x.shape)
    z.copy_(x)
    z.copy_(y)
    return z


def empty_then_copy_rewrite(x, y):
    return y.expand(x.shape) + 0 * x  # z ends up holding y; x only sets the shape


# pytorch/functorch#105 (closed, 2021-08-28): per-sample gradients of a model writing features
# into a fresh tensor by slice assignment
def features_into_fresh_tensor(w, x):
    h = torch.zeros(6)
    h[::2] = (w @ x)[:3]
    h[1::2] = (w @ x)[3:].tanh()
    return (h ** 2).sum(-1, keepdim=True)


def features_into_fresh_tensor_rewrite(w, x):
    z = w @ x
    h = torch.stack([z[:3], z[3:].tanh()], dim=1).reshape(6)
    return (h ** 2).sum(-1, keepdim=True)


# pytorch/functorch#207 (closed; ReLUAlpha from its comment of 2022-12-23), in setup_context style
class ReLUAlpha(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, alpha):
        return x.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        grad_input[x == 0] = ctx.alpha
        return grad_input, None


class ReLUAlphaRewrite(ReLUAlpha):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = torch.where(x < 0, torch.zeros_like(grad_output), grad_output)
        return torch.where(x == 0, torch.full_like(grad_output, ctx.alpha), grad_input), None


def _relu_build(decorate):
    cls = decorate(ReLUAlpha)
    return lambda x, alpha: cls.apply(x, alpha)


def _relu_args(gen):
    x = randn(gen, 5)
    x[1] = 0.0  # the alpha branch
    return (x, 10.0)


_NO_JVP = "the Function defines no jvp: forward AD refuses it, as written and rewritten"

CASES = [
    Case("pytorch#103329", "pytorch", "pytorch/pytorch#103329 (open)",
         "torch.zeros(x.shape) then mat[0, 0] = mat[0, 1] + x[0, 0]; vmap over x and y",
         ("factory",), simple(zeros_then_item_assignment), zeros_then_item_assignment_rewrite,
         lambda g: (randn(g, 5, 6), randn(g, 5, 6)), batched=(0, 1), diff=0),
    Case("pytorch#97248-x", "pytorch", "pytorch/pytorch#97248 (open), case 1: vmap(f, (0, None))",
         "torch.empty(x.shape), copy_(x), copy_(y); x batched",
         ("factory",), simple(empty_then_copy), empty_then_copy_rewrite,
         lambda g: (randn(g, 3), randn(g, 3)), batched=(0,), diff=0),
    Case("pytorch#97248-y", "pytorch", "pytorch/pytorch#97248 (open), case 2: vmap(f, (None, 0))",
         "torch.empty(x.shape), copy_(x), copy_(y); y batched",
         ("factory",), simple(empty_then_copy), empty_then_copy_rewrite,
         lambda g: (randn(g, 3), randn(g, 3)), batched=(1,), diff=1),
    Case("functorch#105", "functorch", "pytorch/functorch#105 (closed)",
         "slice assignment into torch.zeros inside per-sample gradients (vmap over the data)",
         ("factory",), simple(features_into_fresh_tensor), features_into_fresh_tensor_rewrite,
         lambda g: (randn(g, 6, 6), randn(g, 6)), batched=(1,), diff=0),
    Case("functorch#207", "functorch",
         "pytorch/functorch#207 (closed; ReLUAlpha from its comment of 2022-12-23)",
         "custom Function (setup_context), backward writes grad_input[input < 0] = 0 in a clone",
         ("fn_new", "fn_bwd_inplace", "mask"), _relu_build,
         lambda x, alpha: ReLUAlphaRewrite.apply(x, alpha), _relu_args,
         undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
]
