"""Backward helpers of today's core with an in-place fast path, re-created from C++ (part 2:
linear algebra: eig, matrix_exp, householder_product, det). Same conventions as
:mod:`funcbwd.ops.live_backward_formulas` (``fast`` lists the sites taking the in-place branch);
registered by :mod:`funcbwd.ops.live_backward`.
"""

from __future__ import annotations

from typing import Any

import torch

from funcbwd.errors import BadInputError
from funcbwd.ops.live_backward_formulas import prod_safe_zeros_backward


def linalg_eig_backward(gL, gV, L, V, is_hermitian, real_input, *, fast=()):
    """handle_r_to_c(self, linalg_eig_backward(gL, gV, L, V, is_hermitian)), gL and gV defined.

    ``real_input`` applies derivatives.yaml's handle_r_to_c (real part for a real input)."""
    VhgV = V.mH.matmul(gV)
    diag_VhgV = VhgV.diagonal(0, -2, -1)
    # site 1: V.is_complex() && !isTensorSubclassLike(diag_VhgV): a data-dependent check
    if V.is_complex() and 1 in fast:
        imdiag_VhgV = diag_VhgV.imag
        if not torch.allclose(imdiag_VhgV, torch.zeros_like(imdiag_VhgV), rtol=1e-2, atol=1e-2):
            raise RuntimeError(
                f"{'linalg_eigh_backward' if is_hermitian else 'linalg_eig_backward'}: The "
                "eigenvectors in the complex case are specified up to multiplication by e^{i phi}. "
                "The specified loss function depends on this quantity, so it is ill-defined.")
    if is_hermitian:
        VhgV = 0.5 * (VhgV - VhgV.mH)
    else:
        VhgV = VhgV - V.mH.matmul(V * diag_VhgV.real.unsqueeze(-2))
    Lconj = L.conj()
    Econj = Lconj.unsqueeze(-2) - Lconj.unsqueeze(-1)
    Econj.diagonal(0, -2, -1).fill_(1.0)
    ret = VhgV.div_(Econj)
    # site 2: isTensorSubclassLike(gL)
    if 2 in fast:
        ret.diagonal(0, -2, -1).copy_(gL)
    else:
        ret = ret.diagonal_scatter(gL, 0, -2, -1)
    if is_hermitian:
        gA = V.matmul(ret.matmul(V.mH))
    else:
        gA = torch.linalg.solve(V.mH, ret.matmul(V.mH))
    return gA.real if real_input and gA.is_complex() else gA


def eig_gauge_fix(V: torch.Tensor, gV: torch.Tensor) -> torch.Tensor:
    """Project an eigenvector cotangent onto the gauge-invariant ones (Im diag(V^H gV) = 0).

    Eigenvectors are defined up to a phase, so torch (and site 1 of linalg_eig_backward) reject
    a cotangent whose loss would depend on it; a random complex cotangent must be projected."""
    if not (isinstance(V, torch.Tensor) and isinstance(gV, torch.Tensor)) or V.shape != gV.shape:
        raise BadInputError(f"eig_gauge_fix needs eigenvectors V and a cotangent gV of the same shape, got "
                            f"{getattr(V, 'shape', type(V).__name__)} and {getattr(gV, 'shape', type(gV).__name__)}")
    if not V.is_complex():
        raise BadInputError(f"eig_gauge_fix needs complex eigenvectors (torch.linalg.eig's), got {V.dtype}")
    theta = (V.mH.matmul(gV)).diagonal(0, -2, -1).imag
    return gV - V * (1j * theta).unsqueeze(-2)


def eig_real_views(A):
    """The registered torch_op of the eig sites: torch.linalg.eig with real views of its complex
    outputs, (L, V) as (..., 2) float tensors, so real cotangents and jacrev apply."""
    return tuple(torch.view_as_real(t) for t in torch.linalg.eig(A))


def _complex(t):
    return torch.complex(t[..., 0], t[..., 1])  # any layout (view_as_complex needs stride 1)


def eig_formula_args(a, o, g):
    """linalg_eig_backward's args from the real views; the eigenvector cotangent is projected onto
    the gauge-invariant ones (eig_gauge_fix: linear, idempotent for unit eigenvectors)."""
    V = _complex(o[1])
    return (_complex(g[0]), eig_gauge_fix(V, _complex(g[1])), _complex(o[0]), V, False,
            not a[0].is_complex())


def linalg_matrix_exp_differential(self, grad, adjoint, *, fast=()):
    """linalg_matrix_exp_differential -> differential_analytic_matrix_function(self, grad, matrix_exp, adjoint)."""
    A = self.transpose(-2, -1).conj() if adjoint else self
    n = A.size(-1)
    # site 1: areAnyTensorSubclassLike({A, grad})
    if 1 in fast:
        sizes = list(A.shape)
        sizes[-2] *= 2
        sizes[-1] *= 2
        meta_grad = torch.zeros(sizes, dtype=grad.dtype, device=grad.device)
        meta_grad.narrow(-2, 0, n).narrow(-1, 0, n).copy_(A)
        meta_grad.narrow(-2, n, n).narrow(-1, n, n).copy_(A)
        meta_grad.narrow(-2, 0, n).narrow(-1, n, n).copy_(grad)
    else:
        meta_grad = torch.cat([torch.cat([A, grad], -1), torch.cat([torch.zeros_like(A), A], -1)], -2)
    return torch.linalg.matrix_exp(meta_grad).narrow(-2, 0, n).narrow(-1, n, n)



def _apply_simple_transformation(m, k, u_full, v_full, t, K, modify_K_in_place=True,
                                 condition_with_I=True, left=True):
    """apply_simple_transformation: (I - t u v^H) K (or -t u v^H K), or K (I - t u v^H)."""
    if left:
        if modify_K_in_place:
            v = u_full.narrow(-2, k, m - k)
            u = v_full.narrow(-2, k, m - k).mH.matmul(K.narrow(-2, k, m - k))
            K.narrow(-2, k, m - k).sub_((t.unsqueeze(-1) * v) * u)
            return K
        transformation = (t.unsqueeze(-1) * u_full) * v_full.mH.matmul(K)
        return K - transformation if condition_with_I else -transformation
    if modify_K_in_place:
        v = u_full.narrow(-2, k, m - k)
        u = K.narrow(-1, k, m - k).matmul(t.unsqueeze(-1) * v_full.narrow(-2, k, m - k))
        K.narrow(-1, k, m - k).sub_(u * v.mH)
        return K
    transformation = K.matmul(t.unsqueeze(-1) * u_full) * v_full.mH
    return K - transformation if condition_with_I else -transformation


def householder_product_backward(grad, result, input_, tau, flip_order, *, fast=()):
    """householder_product_backward(grad, result, input, tau, flip_order) -> (input_grad, tau_grad).

    ``modify_K_in_place = !GradMode::is_enabled()`` is core's own (grad-mode, not subclass) gate."""
    m = input_.size(-2)
    k = tau.size(-1)
    input = input_.tril(-1)
    input.diagonal(0, -2, -1).fill_(1.0)
    input_first_k_cols = input.narrow(-1, 0, k)
    input_first_k_cols_norm_squared = (input_first_k_cols * input_first_k_cols.conj()).sum(-2)
    sigma = tau / (tau * input_first_k_cols_norm_squared - 1.0)
    K = result.matmul(grad.mH)
    modify_K_in_place = not torch.is_grad_enabled()

    def update_grad(k, v_full, t, K):
        v = v_full.narrow(-2, k, m - k)
        vHK = v.mH.matmul(K.narrow(-2, k, m - k))
        Kv = K.narrow(-1, k, m - k).matmul(v)
        t_unsqueezed = t.unsqueeze(-1)
        v_grad = (-t_unsqueezed * vHK).conj().squeeze(-2) - (t_unsqueezed * Kv).squeeze(-1)
        tau_grad = -(vHK.narrow(-1, k, m - k).matmul(v)).conj()
        return v_grad.unsqueeze(-1), tau_grad.squeeze(-1)

    def apply_householder_reflector(k, v_full, t, K, left=True):
        return _apply_simple_transformation(m, k, v_full, v_full, t, K, modify_K_in_place, True, left)

    def flip_i(i):
        return i if not flip_order else k - i - 1

    def next_i(i):
        return i + 1 if not flip_order else i - 1

    apply_left = not flip_order
    zero_idx = flip_i(0)
    K = apply_householder_reflector(zero_idx, input.narrow(-1, zero_idx, 1),
                                    sigma.narrow(-1, zero_idx, 1), K, apply_left)

    def advance(i, v_i, t_i, K):  # K <- H_{i + 1}^{-1} @ K @ H_i
        if i != flip_i(k - 1):
            i_next = next_i(i)
            K = apply_householder_reflector(i_next, input.narrow(-1, i_next, 1),
                                            sigma.narrow(-1, i_next, 1), K, apply_left)
            K = apply_householder_reflector(i, v_i, t_i, K, not apply_left)
        return K

    # site 1: areAnyTensorSubclassLike({input, tau, K})
    if 1 not in fast:
        input_grads: list[Any] = [None] * (k + 1 if k < input.size(-1) else k)
        tau_grads: list[Any] = [None] * k
        for i_idx in range(k):
            i = flip_i(i_idx)
            v_i, t_i = input.narrow(-1, i, 1), tau.narrow(-1, i, 1)
            input_grads[i], tau_grads[i] = update_grad(i, v_i, t_i, K)
            K = advance(i, v_i, t_i, K)
        if k < input.size(-1):
            zero_grad_shape = list(input_.shape[:-1]) + [input.size(-1) - k]
            input_grads[k] = torch.zeros(zero_grad_shape, dtype=input_.dtype, device=input_.device)
        input_grad = torch.cat(input_grads, -1)
        tau_grad = torch.cat(tau_grads, -1)
    else:
        input_grad = torch.zeros_like(input_)
        tau_grad = torch.zeros_like(tau)
        for i_idx in range(k):
            i = flip_i(i_idx)
            v_i, t_i = input.narrow(-1, i, 1), tau.narrow(-1, i, 1)
            v_i_grad, tau_i_grad = update_grad(i, v_i, t_i, K)
            input_grad.select(-1, i).copy_(v_i_grad.squeeze(-1))
            tau_grad.select(-1, i).copy_(tau_i_grad.squeeze(-1))
            K = advance(i, v_i, t_i, K)
    input_grad.tril_(-1)
    return input_grad, tau_grad



def _masked_fmap(mask, f1, f2, t, *ts):
    """masked_fmap(mask, f1, f2, t, ts...): f1 where mask, f2 elsewhere, via boolean indexing."""
    t_masked = t[mask]
    n = t_masked.numel()
    if n == t.numel():
        return f1(t, *ts)
    elif n == 0:
        return f2(t, *ts)
    not_mask = mask.logical_not()
    return (torch.empty_like(t)
            .index_put_((mask,), f1(t_masked, *(x[mask] for x in ts)))
            .index_put_((not_mask,), f2(t[not_mask], *(x[not_mask] for x in ts))))


def linalg_det_backward(grad, det, A, *, fast=()):
    """linalg_det_backward(grad, det, A, LU, pivots), branch taken when GradMode is enabled
    (the only branch with the site; the LU-based branch does not need LU here)."""
    d_diag = grad * det.conj()
    d = torch.diag_embed(d_diag.unsqueeze(-1).expand(A.shape[:-1])).mT
    eps = torch.finfo(A.real.dtype if A.is_complex() else A.dtype).eps

    def non_singular(A, d, grad):
        return torch.linalg.solve(A.mH, d)

    def singular(A, d, grad):
        U, S, Vh = torch.linalg.svd(A)
        alpha = (torch.linalg.det(U) * torch.linalg.det(Vh)).conj() * grad
        D = prod_safe_zeros_backward(alpha.unsqueeze(-1), S, S.dim() - 1)
        return (U * D.unsqueeze(-2)).matmul(Vh)

    # site 1: areAnyTensorSubclassLike({A, d, grad}); masked_fmap indexes with a boolean mask
    if 1 not in fast:
        return singular(A, d, grad)
    return _masked_fmap(det.abs() < 100.0 * eps, singular, non_singular, A, d, grad)
