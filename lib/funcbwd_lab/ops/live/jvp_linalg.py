"""Live forward-mode sites of the linear-algebra helpers: ``householder_product_jvp#1``
(``dprod.add_``) and the forward use of ``differential_analytic_matrix_function#1`` (registered
as ``live_linalg_matrix_exp_differential_jvp_1``, not counted again: the site is counted once,
as the backward site of :mod:`funcbwd_lab.ops.live.matrix_exp`).

Conventions (fast and out-of-place entry points, registration): :mod:`funcbwd_lab.ops.live.jvp`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import SRC, randn, register_jvp_site
from funcbwd_lab.ops.live.common import tangent as _t
from funcbwd_lab.ops.registry import Sample


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


# ================================================================== registration
def _geqrf_sample(m: int, n: int, k: int, seed: int) -> tuple:
    a, tau = torch.geqrf(randn(m, n, seed=seed, dtype=torch.float64))
    return a, tau[:k].clone()


register_jvp_site(
    "householder_product_jvp#1", torch_op=torch.linalg.householder_product,
    formula=householder_product_jvp_fast, handfixed=householder_product_jvp_out_of_place,
    formula_args=lambda a, o, t: (_t(t, 0, a[0]), _t(t, 1, a[1]), o[0], a[0], a[1]),
    grad_positions=(0, 1),
    source=f"{SRC} householder_product_jvp: isTensorSubclassLike(H_minus_dH_i_H_plus) ? "
           "dprod = dprod.add(...) : dprod.add_(...)",
    schema="(Tensor dV, Tensor dtau, Tensor prod, Tensor V, Tensor tau) -> Tensor",
    make_samples=lambda: [
        Sample("geqrf 5x3 k=3 float64", _geqrf_sample(5, 3, 3, 9141), diff=(0, 1)),
        Sample("geqrf 4x3 k=2 float64", _geqrf_sample(4, 3, 2, 9142), diff=(0, 1)),
    ],
    notes="dprod starts as zeros_like(prod), a primal-shaped buffer the tangent terms are added to.",
    hazard=("tangents",), inplace_ops=("add_",))

register_jvp_site(
    "differential_analytic_matrix_function#1", name="live_linalg_matrix_exp_differential_jvp_1",
    counted=False, torch_op=torch.linalg.matrix_exp,
    formula=linalg_matrix_exp_differential_fast,
    handfixed=linalg_matrix_exp_differential_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0])), grad_positions=(0,),
    source=f"{SRC} differential_analytic_matrix_function (adjoint=false): areAnyTensorSubclassLike"
           "({A, grad}) ? cat(...) : zeros(...) then three narrow(...).copy_(...)",
    schema="(Tensor self, Tensor grad) -> Tensor",
    make_samples=lambda: [
        Sample("3x3 float64", (0.5 * randn(3, 3, seed=9151, dtype=torch.float64),)),
        Sample("batch 2x2x2 float64", (0.5 * randn(2, 2, 2, seed=9152, dtype=torch.float64),)),
    ],
    notes="The same helper is linalg_matrix_exp's backward with adjoint=true (a backward site); "
          "this entry is its forward use. zeros(...) is unbatched whatever the inputs are.",
    hazard=("tangents", "primals"), inplace_ops=("copy_",))
