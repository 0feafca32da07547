"""Live backward site of ``householder_product_backward#1`` (pytorch#84180): per-column
``select(-1, i).copy_`` into zeros, or collect the columns and ``cat``.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

from typing import Any

import torch

from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample


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


def _householder_inputs(k: int, seed: int) -> tuple:
    a, tau = torch.geqrf(randn(4, 3, seed=seed, dtype=torch.float64))
    return a, tau[:k].contiguous()


# ------------------------------------------------------------------ householder_product (pytorch#84180)
register_site(householder_product_backward, 1, "backward", torch_op=torch.linalg.householder_product,
              formula_args=lambda a, o, g: (g[0], o[0], a[0], a[1], False), grad_positions=(0, 1),
              schema="(Tensor grad, Tensor result, Tensor input, Tensor tau, bool flip_order) -> (Tensor, Tensor)",
              samples=lambda: [Sample("geqrf 4x3, k=3", _householder_inputs(3, 631), (0, 1)),
                               Sample("geqrf 4x3, k=2", _householder_inputs(2, 632), (0, 1))],
              fast_calls=("copy_",), fast="zeros_like(input/tau), then select(-1, i).copy_(...) per column",
              slow="collect columns, then cat", fixed_by="pytorch#84180",
              notes="K itself is updated in place (sub_) whenever GradMode is off: core's grad-mode "
              "gate, not a subclass site, kept as core has it.")
