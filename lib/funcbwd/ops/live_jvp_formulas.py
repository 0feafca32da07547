"""Forward-mode (JVP) helpers of today's core with an in-place fast path, re-created from C++
(part 1: norm_jvp, logcumsumexp_jvp, logsumexp_jvp, householder_product_jvp and the forward use of
linalg_matrix_exp_differential; the norm family is :mod:`funcbwd.ops.live_jvp_norms`).
Registered by :mod:`funcbwd.ops.live_jvp`; the inventory is docs/live-sites.md.

Each ``*_fast`` function is core's in-place branch line for line (``torch/csrc/autograd/
FunctionsManual.cpp`` at pytorch/pytorch 002ca6715ba1); each ``*_out_of_place`` is its subclass
branch, with the in-place ops core keeps on both branches also written out of place (marked
``# core: ...``), so it contains no in-place op at all.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from funcbwd.errors import BadInputError


def _unsqueeze_multiple(t: torch.Tensor, dims: Sequence[int], ndim: int) -> torch.Tensor:
    for d in sorted(d % ndim for d in dims):
        t = t.unsqueeze(d)
    return t


# ================================================================== norm_jvp (p == 1, p == inf)
def _check_norm_order(p: float) -> float:
    p = float(p)
    if p != 1.0 and not math.isinf(p):
        raise BadInputError(f"live norm_jvp re-creates the p=1 and p=inf branches only "
                            f"(where the guarded sites are); got p={p}")
    return p


def norm_jvp_fast(self_p, self_t, p, norm, dim, keepdim):
    """norm_jvp @ 002ca6715ba1, in-place branches (site #1: p == 1; site #2: p == inf)."""
    ndim = self_p.dim()
    p = _check_norm_order(p)
    if p == 1.0:
        result = self_p.sgn()
        result = result.mul_(self_t.conj())                        # site #1 fast path
        result = torch.real(result)
        return result.sum(dim, keepdim)
    if not keepdim and self_p.dim() != 0:
        norm = _unsqueeze_multiple(norm, dim, ndim)
    self_isnan = self_p.isnan()
    norm_isnan = norm.isnan()
    self_and_norm_isnan = self_isnan.logical_and_(norm_isnan)      # site #2 fast path
    is_eq_max = (self_p.abs() == norm).logical_or_(self_and_norm_isnan).type_as(norm)
    nb_max = is_eq_max.count_nonzero(dim)
    if self_p.dim() != 0:
        nb_max = _unsqueeze_multiple(nb_max, dim, ndim)
    return (torch.real(self_p.sgn() * self_t.conj()) * is_eq_max / nb_max).sum(dim, keepdim)


def norm_jvp_out_of_place(self_p, self_t, p, norm, dim, keepdim):
    """norm_jvp @ 002ca6715ba1, subclass branches (p == 1, p == inf)."""
    ndim = self_p.dim()
    p = _check_norm_order(p)
    if p == 1.0:
        result = self_p.sgn().mul(self_t.conj())
        return torch.real(result).sum(dim, keepdim)
    if not keepdim and self_p.dim() != 0:
        norm = _unsqueeze_multiple(norm, dim, ndim)
    self_and_norm_isnan = self_p.isnan().logical_and(norm.isnan())
    # core: .logical_or_(...) on both branches (a fresh primal-only mask)
    is_eq_max = (self_p.abs() == norm).logical_or(self_and_norm_isnan).type_as(norm)
    nb_max = is_eq_max.count_nonzero(dim)
    if self_p.dim() != 0:
        nb_max = _unsqueeze_multiple(nb_max, dim, ndim)
    return (torch.real(self_p.sgn() * self_t.conj()) * is_eq_max / nb_max).sum(dim, keepdim)


# ================================================================== logcumsumexp_jvp, logsumexp_jvp
def _logcumsumexp_self_p_exp(self_p, dim):
    if not self_p.is_complex():
        return (self_p - torch.max(self_p, dim, True)[0]).exp()  # exp-normalize trick
    return self_p.exp()


def logcumsumexp_jvp_fast(self_p, self_t, dim):
    """logcumsumexp_jvp @ 002ca6715ba1, in-place branch."""
    self_p_exp = _logcumsumexp_self_p_exp(self_p, dim)
    cumsumexp_p = self_p_exp.cumsum(dim)
    eps = 1e-13
    self_p_exp *= self_t                                           # site #1 fast path
    cumsumexp_t = self_p_exp.cumsum(dim)
    cumsumexp_t /= cumsumexp_p.add_(eps)
    return cumsumexp_t


def logcumsumexp_jvp_out_of_place(self_p, self_t, dim):
    """logcumsumexp_jvp @ 002ca6715ba1, subclass branch."""
    self_p_exp = _logcumsumexp_self_p_exp(self_p, dim)
    cumsumexp_p = self_p_exp.cumsum(dim)
    eps = 1e-13
    result = (self_p_exp * self_t).cumsum(dim)
    return result / (cumsumexp_p + eps)  # core: result /= cumsumexp_p.add_(eps)


def _logsumexp_self_p_exp(self_p, dim):
    if self_p.numel() > 0:
        return (self_p - torch.amax(torch.real(self_p), dim, True)).exp()
    return self_p.exp()


def logsumexp_jvp_fast(self_p, self_t, dim, keepdim):
    """logsumexp_jvp @ 002ca6715ba1, in-place branch (also reached from log_softmax's jvp)."""
    self_p_exp = _logsumexp_self_p_exp(self_p, dim)
    sumexp_p = self_p_exp.sum(dim, keepdim)
    self_p_exp *= self_t                                           # site #1 fast path
    sumexp_t = self_p_exp.sum(dim, keepdim)
    sumexp_t /= sumexp_p
    return sumexp_t


def logsumexp_jvp_out_of_place(self_p, self_t, dim, keepdim):
    """logsumexp_jvp @ 002ca6715ba1, subclass branch."""
    self_p_exp = _logsumexp_self_p_exp(self_p, dim)
    sumexp_p = self_p_exp.sum(dim, keepdim)
    result = (self_p_exp * self_t).sum(dim, keepdim)
    return result / sumexp_p  # core: result /= sumexp_p


# ================================================================== householder_product_jvp
def _householder_left(K, t, u_full, v_full, with_identity):
    """apply_simple_transformation(modify_K_in_place=false, left=true): (I - t u v^H) K or -t u v^H K."""
    transformation = (t.unsqueeze(-1) * u_full) * v_full.mH.matmul(K)
    return K - transformation if with_identity else -transformation


def _householder_right(K, t, u_full, v_full):
    """apply_simple_transformation(modify_K_in_place=false, left=false): K (I - t u v^H)."""
    return K - K.matmul(t.unsqueeze(-1) * u_full) * v_full.mH


def _householder_jvp(dV_, dtau, prod, V_, tau, fast):
    k = tau.size(-1)
    if fast:
        V = V_.tril(-1)
        V.diagonal(0, -2, -1).fill_(1.0)
    else:  # core: V.diagonal(0, -2, -1).fill_(1.0) on both branches
        V = V_.tril(-1) + torch.eye(V_.size(-2), V_.size(-1), dtype=V_.dtype, device=V_.device)
    dV = dV_.tril(-1)
    V_first_k_cols = V.narrow(-1, 0, k)
    sigma = tau / (tau * (V_first_k_cols * V_first_k_cols.conj()).sum(-2) - 1.0)
    H_plus = prod.detach().clone()
    H_minus = torch.diag_embed(torch.ones(1, dtype=V.dtype, device=V.device).expand(V.shape[:-1]))
    dprod = torch.zeros_like(prod)
    for i in range(k):
        v_i, dv_i = V.narrow(-1, i, 1), dV.narrow(-1, i, 1)
        tau_i, dtau_i, sigma_i = tau.narrow(-1, i, 1), dtau.narrow(-1, i, 1), sigma.narrow(-1, i, 1)
        H_plus = _householder_left(H_plus, sigma_i, v_i, v_i, True)
        H_minus_dH_i_H_plus = H_minus.matmul(
            _householder_left(H_plus, dtau_i, v_i, v_i, False)
            + _householder_left(H_plus, tau_i, dv_i, v_i, False)
            + _householder_left(H_plus, tau_i, v_i, dv_i, False))
        if fast:
            dprod.add_(H_minus_dH_i_H_plus)                        # site #1 fast path
        else:
            dprod = dprod.add(H_minus_dH_i_H_plus)
        H_minus = _householder_right(H_minus, tau_i, v_i, v_i)
    return dprod


def householder_product_jvp_fast(dV_, dtau, prod, V_, tau):
    """householder_product_jvp @ 002ca6715ba1, in-place branch (``dprod.add_``)."""
    return _householder_jvp(dV_, dtau, prod, V_, tau, fast=True)


def householder_product_jvp_out_of_place(dV_, dtau, prod, V_, tau):
    """householder_product_jvp @ 002ca6715ba1, subclass branch (``dprod = dprod.add(...)``)."""
    return _householder_jvp(dV_, dtau, prod, V_, tau, fast=False)


# ================================================================== linalg_matrix_exp_differential
def linalg_matrix_exp_differential_fast(self, grad):
    """differential_analytic_matrix_function(adjoint=false) @ 002ca6715ba1, in-place branch."""
    A = self
    n = A.size(-1)
    meta_grad_sizes = list(A.shape)
    meta_grad_sizes[-2] *= 2
    meta_grad_sizes[-1] *= 2
    meta_grad = torch.zeros(meta_grad_sizes, dtype=grad.dtype, device=grad.device)  # site #1 fast path
    meta_grad.narrow(-2, 0, n).narrow(-1, 0, n).copy_(A)
    meta_grad.narrow(-2, n, n).narrow(-1, n, n).copy_(A)
    meta_grad.narrow(-2, 0, n).narrow(-1, n, n).copy_(grad)
    return torch.linalg.matrix_exp(meta_grad).narrow(-2, 0, n).narrow(-1, n, n)


def linalg_matrix_exp_differential_out_of_place(self, grad):
    """differential_analytic_matrix_function(adjoint=false) @ 002ca6715ba1, subclass branch."""
    A = self
    n = A.size(-1)
    meta_grad = torch.cat([torch.cat([A, grad], -1), torch.cat([torch.zeros_like(A), A], -1)], -2)
    return torch.linalg.matrix_exp(meta_grad).narrow(-2, 0, n).narrow(-1, n, n)
