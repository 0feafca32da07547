"""Live backward site of matrix_exp (pytorch#81225): ``differential_analytic_matrix_function#1``,
reached through ``linalg_matrix_exp_differential(self, grad, adjoint=true)``: zeros(2n, 2n) filled
by three ``narrow(...).copy_``, or one ``cat``. (Its forward-mode use is registered by
:mod:`funcbwd_lab.ops.live.jvp_linalg`.)

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample


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


# ------------------------------------------------------------------ matrix_exp (pytorch#81225)
register_site(linalg_matrix_exp_differential, 1, "backward", site_fn="differential_analytic_matrix_function",
              torch_op=torch.linalg.matrix_exp, formula_args=lambda a, o, g: (a[0], g[0], True),
              grad_positions=(0,), schema="(Tensor self, Tensor grad, bool adjoint) -> Tensor",
              samples=lambda: [Sample("3x3", (0.5 * randn(3, 3, seed=611),), (0,)),
                               Sample("batch 2x3x3", (0.5 * randn(2, 3, 3, seed=612),), (0,))],
              fast_calls=("copy_",), fast="zeros(2n, 2n) then three narrow(...).copy_(A / A / grad)",
              slow="cat([[A, grad], [zeros_like(A), A]])", fixed_by="pytorch#81225",
              notes="Reached through linalg_matrix_exp_differential(self, grad, adjoint=true).")
