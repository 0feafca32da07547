"""entmax (deep-spin/entmax, entmax/activations.py at c2bec6d, 2024-05-21): the sparsemax and
1.5-entmax custom Functions, old style (``forward(cls, ctx, X, dim, k)`` classmethods), whose
forward divides the threshold in place (``tau /= support_size``) and whose backward writes into
its gradient in place (``grad_input[output == 0] = 0``; ``dX -= q * gppr``); called through the
library's ``sparsemax``/``entmax15`` functions.

Re-created from the upstream module and trimmed (docstrings, the top-k partial-sort path, the
Module wrappers); the in-place lines are upstream's as written.
"""

from __future__ import annotations

import torch
from torch.autograd import Function

from funcbwd_lab.studies.yourcode.case import Case, randn


# deep-spin/entmax entmax/activations.py (c2bec6d): _make_ix_like
def _make_ix_like(X, dim):
    d = X.size(dim)
    rho = torch.arange(1, d + 1, device=X.device, dtype=X.dtype)
    view = [1] * X.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


# same file, _sparsemax_threshold_and_support (k=None: the full sort; the top-k retry trimmed)
def _sparsemax_threshold_and_support(X, dim=-1, k=None):
    topk, _ = torch.sort(X, dim=dim, descending=True)

    topk_cumsum = topk.cumsum(dim) - 1
    rhos = _make_ix_like(topk, dim)
    support = rhos * topk > topk_cumsum

    support_size = support.sum(dim=dim).unsqueeze(dim)
    tau = topk_cumsum.gather(dim, support_size - 1)
    tau /= support_size.to(X.dtype)

    return tau, support_size


# same file, _entmax_threshold_and_support (k=None: the full sort; the top-k retry trimmed)
def _entmax_threshold_and_support(X, dim=-1, k=None):
    Xsrt, _ = torch.sort(X, dim=dim, descending=True)

    rho = _make_ix_like(Xsrt, dim)
    mean = Xsrt.cumsum(dim) / rho
    mean_sq = (Xsrt ** 2).cumsum(dim) / rho
    ss = rho * (mean_sq - mean ** 2)
    delta = (1 - ss) / rho

    # NOTE this is not exactly the same as in reference algo
    # Fortunately it seems the clamped values never wrongly
    # get selected by tau <= sorted_z. Prove this!
    delta_nz = torch.clamp(delta, 0)
    tau = mean - torch.sqrt(delta_nz)

    support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
    tau_star = tau.gather(dim, support_size - 1)

    return tau_star, support_size


# same file, class SparsemaxFunction
class SparsemaxFunction(Function):
    @classmethod
    def forward(cls, ctx, X, dim=-1, k=None):
        ctx.dim = dim
        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X - max_val  # same numerical stability trick as softmax
        tau, supp_size = _sparsemax_threshold_and_support(X, dim=dim, k=k)
        output = torch.clamp(X - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output, supp_size

    @classmethod
    def backward(cls, ctx, grad_output, supp):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0

        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze(dim)
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None, None, None


# same file, class Entmax15Function
class Entmax15Function(Function):
    @classmethod
    def forward(cls, ctx, X, dim=0, k=None):
        ctx.dim = dim

        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X - max_val  # same numerical stability trick as for softmax
        X = X / 2  # divide by 2 to solve actual Entmax

        tau_star, supp_size = _entmax_threshold_and_support(X, dim=dim, k=k)

        Y = torch.clamp(X - tau_star, min=0) ** 2
        ctx.save_for_backward(Y)
        return Y, supp_size

    @classmethod
    def backward(cls, ctx, dY, supp):
        Y, = ctx.saved_tensors
        gppr = Y.sqrt()  # = 1 / g'' (Y)
        dX = dY * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None, None, None


def _sparsemax_build(decorate):
    SparsemaxFunction_ = decorate(SparsemaxFunction)

    # same file, sparsemax (docstring trimmed): the Function called inside the library's function
    def sparsemax(X, dim=-1, k=None, return_support_size=False):
        P, support = SparsemaxFunction_.apply(X, dim, k)
        if return_support_size:
            return P, support
        return P

    return sparsemax


def _entmax15_build(decorate):
    Entmax15Function_ = decorate(Entmax15Function)

    # same file, entmax15 (docstring trimmed)
    def entmax15(X, dim=-1, k=None, return_support_size=False):
        P, support = Entmax15Function_.apply(X, dim, k)
        if return_support_size:
            return P, support
        return P

    return entmax15


def sparsemax_rewrite(X, dim=-1):
    # the same threshold, out of place, differentiated by autograd (the sparsemax Jacobian)
    X = X - X.max(dim=dim, keepdim=True)[0]
    srt = torch.sort(X, dim=dim, descending=True)[0]
    cumsum = srt.cumsum(dim) - 1
    support_size = (_make_ix_like(srt, dim) * srt > cumsum).sum(dim=dim).unsqueeze(dim)
    tau = cumsum.gather(dim, support_size - 1) / support_size.to(X.dtype)
    return torch.clamp(X - tau, min=0)


def entmax15_rewrite(X, dim=-1):
    # the closed-form threshold for the support, out of place, differentiated by autograd
    X = (X - X.max(dim=dim, keepdim=True)[0]) / 2
    tau_star, _ = _entmax_threshold_and_support(X, dim=dim)
    return torch.clamp(X - tau_star, min=0) ** 2


_NO_JVP = ("the Function defines no jvp: forward AD refuses it as written, eagerly too "
           "(the rewrite, without the Function, has one)")

CASES = [
    Case("entmax:SparsemaxFunction", "entmax",
         "deep-spin/entmax entmax/activations.py: SparsemaxFunction, sparsemax, "
         "_sparsemax_threshold_and_support (c2bec6d)",
         "old-style Function inside sparsemax(): forward tau /= support_size; backward "
         "grad_input = grad_output.clone(); grad_input[output == 0] = 0",
         ("fn_old", "fn_inside", "fn_fwd_inplace", "fn_bwd_inplace", "mask", "like", "arith"),
         _sparsemax_build, sparsemax_rewrite, lambda g: (2 * randn(g, 2, 5),),
         undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
    Case("entmax:Entmax15Function", "entmax",
         "deep-spin/entmax entmax/activations.py: Entmax15Function, entmax15, "
         "_entmax_threshold_and_support (c2bec6d)",
         "old-style Function inside entmax15(): backward dX = dY * gppr; dX -= q * gppr",
         ("fn_old", "fn_inside", "fn_bwd_inplace", "arith"),
         _entmax15_build, entmax15_rewrite, lambda g: (2 * randn(g, 2, 5),),
         undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
]
