"""GPyTorch (cornellius-gp/gpytorch): the natural-gradient Function of
``NaturalVariationalDistribution``.

Re-creates ``_NaturalToMuVarSqrt`` (an old-style ``torch.autograd.Function``, ``forward(ctx, ...)``)
with its helpers ``_triangular_inverse``, ``_phi_for_cholesky_`` and ``_cholesky_backward`` from
``gpytorch/variational/natural_variational_distribution.py`` at HEAD
7c4ec80f0f05cf530348a8a8972d67a11dd26ed2 (2026-06-08; the file last changed in c72d9f58,
2026-02-05). Trimmed: linear_operator's ``psd_safe_cholesky`` is ``torch.linalg.cholesky``
(its jitter-and-retry path never runs on the positive-definite inputs used here). The backward's
in-place lines (``A.tril_().diagonal(...).mul_(0.5)``, ``.mul_(0.5)`` of a fresh sum) are as
upstream. The backward returns the NATURAL gradient, not the forward's derivative, so the
rewrite keeps the Function and rewrites only its backward.
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn


def psd_safe_cholesky(A, upper=False):
    """linear_operator.utils.cholesky.psd_safe_cholesky, trimmed to its first attempt."""
    return torch.linalg.cholesky(A, upper=upper)


# cornellius-gp/gpytorch gpytorch/variational/natural_variational_distribution.py
# _triangular_inverse, _phi_for_cholesky_, _cholesky_backward (7c4ec80f)
def _triangular_inverse(A, upper=False):
    eye = torch.eye(A.size(-1), dtype=A.dtype, device=A.device)
    return torch.linalg.solve_triangular(A, eye, upper=upper)


def _phi_for_cholesky_(A):
    "Modifies A to be the phi function used in differentiating through Cholesky"
    A.tril_().diagonal(offset=0, dim1=-2, dim2=-1).mul_(0.5)
    return A


def _cholesky_backward(dout_dL, L, L_inverse):
    # c.f. https://github.com/pytorch/pytorch/blob/25ba802ce4cbdeaebcad4a03cec8502f0de9b7b3/
    #      tools/autograd/templates/Functions.cpp
    A = L.transpose(-1, -2) @ dout_dL
    phi = _phi_for_cholesky_(A)
    grad_input = (L_inverse.transpose(-1, -2) @ phi) @ L_inverse
    # Symmetrize gradient
    return grad_input.add(grad_input.transpose(-1, -2)).mul_(0.5)


# cornellius-gp/gpytorch gpytorch/variational/natural_variational_distribution.py
# _NaturalToMuVarSqrt (7c4ec80f)
class _NaturalToMuVarSqrt(torch.autograd.Function):
    @staticmethod
    def _forward(nat_mean, nat_covar):
        try:
            L_inv = psd_safe_cholesky(-2.0 * nat_covar, upper=False)
        except RuntimeError as e:
            if str(e).startswith("cholesky"):
                raise RuntimeError(
                    "Non-negative-definite natural covariance. You probably "
                    "updated it using an optimizer other than gpytorch.optim.NGD (such as Adam). "
                    "This is not supported."
                )
            else:
                raise e
        L = _triangular_inverse(L_inv, upper=False)
        S = L.transpose(-1, -2) @ L
        mu = (S @ nat_mean.unsqueeze(-1)).squeeze(-1)
        # Two choleskys are annoying, but we don't have good support for a
        # LinearOperator of form L.T @ L
        return mu, psd_safe_cholesky(S, upper=False)

    @staticmethod
    def forward(ctx, nat_mean, nat_covar):
        mu, L = _NaturalToMuVarSqrt._forward(nat_mean, nat_covar)
        ctx.save_for_backward(mu, L)
        return mu, L

    @staticmethod
    def _backward(dout_dmu, dout_dL, mu, L, C):
        """Calculate dout/d(eta1, eta2), which are:
        eta1 = mu
        eta2 = mu*mu^T + LL^T = mu*mu^T + Sigma

        Thus:
        dout/deta1 = dout/dmu + dout/dL dL/deta1
        dout/deta2 = dout/dL dL/deta1

        For L = chol(eta2 - eta1*eta1^T).
        dout/dSigma = _cholesky_backward(dout/dL, L)
        dout/deta2 = dout/dSigma
        dSigma/deta1 = -2* (dout/dSigma) mu
        """
        dout_dSigma = _cholesky_backward(dout_dL, L, C)
        dout_deta1 = dout_dmu - 2 * (dout_dSigma @ mu.unsqueeze(-1)).squeeze(-1)
        return dout_deta1, dout_dSigma

    @staticmethod
    def backward(ctx, dout_dmu, dout_dL):
        "Calculates the natural gradient with respect to nat_mean, nat_covar"
        mu, L = ctx.saved_tensors
        C = _triangular_inverse(L, upper=False)
        return _NaturalToMuVarSqrt._backward(dout_dmu, dout_dL, mu, L, C)


def _cholesky_backward_rewrite(dout_dL, L, L_inverse):
    A = L.transpose(-1, -2) @ dout_dL
    phi = A.tril() - 0.5 * torch.diag_embed(A.diagonal(dim1=-2, dim2=-1))
    grad_input = (L_inverse.transpose(-1, -2) @ phi) @ L_inverse
    return (grad_input + grad_input.transpose(-1, -2)) * 0.5


class _NaturalToMuVarSqrtRewrite(_NaturalToMuVarSqrt):
    @staticmethod
    def backward(ctx, dout_dmu, dout_dL):
        mu, L = ctx.saved_tensors
        C = _triangular_inverse(L, upper=False)
        dout_dSigma = _cholesky_backward_rewrite(dout_dL, L, C)
        return dout_dmu - 2 * (dout_dSigma @ mu.unsqueeze(-1)).squeeze(-1), dout_dSigma


def _flat(mu, L):
    return torch.cat([mu, L.flatten()])


def _build(decorate):
    fn = decorate(_NaturalToMuVarSqrt)
    # NaturalVariationalDistribution.forward: mean, chol_covar = _NaturalToMuVarSqrt.apply(...)
    return lambda nat_mean, nat_covar: _flat(*fn.apply(nat_mean, nat_covar))


def _rewrite(nat_mean, nat_covar):
    return _flat(*_NaturalToMuVarSqrtRewrite.apply(nat_mean, nat_covar))


def _args(gen, n=3):
    a = randn(gen, n, n)
    precision = a @ a.T + n * torch.eye(n)
    return (randn(gen, n), -0.5 * precision)  # natural parameters: -2 * nat_covar is PD


_NO_JVP = ("the Function defines no jvp and its backward is a natural gradient, not the "
           "forward's derivative: forward AD has no formula, as written and rewritten")

CASES = [
    Case("gpytorch:_NaturalToMuVarSqrt", "gpytorch",
         "cornellius-gp/gpytorch gpytorch/variational/natural_variational_distribution.py "
         "_NaturalToMuVarSqrt, _cholesky_backward, _phi_for_cholesky_ (7c4ec80f)",
         "old-style Function whose backward runs A.tril_().diagonal(dim1=-2, dim2=-1).mul_(0.5) "
         "on a fresh L^T @ dout_dL and .mul_(0.5) on a fresh sum",
         ("fn_old", "fn_bwd_inplace", "views", "arith"), _build, _rewrite, _args,
         batched=(0, 1), diff=1, undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
]
