"""Live backward sites of clamp's helpers (pytorch#69534, which introduced isTensorSubclassLike):
``clamp_backward#1`` and ``clamp_backward_min_max#1-2``: the in-place ``logical_and_`` /
``logical_or_`` of the masks, or their out-of-place forms.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample


def clamp_backward(grad, self, min, max, *, fast=()):
    """clamp_backward(grad, self, Tensor min, Tensor max), branch with both bounds defined."""
    zero = torch.scalar_tensor(0.0, dtype=grad.dtype, device=grad.device)
    self_ge_min = self >= min
    self_le_max = self <= max
    # site 1: areAnyTensorSubclassLike({self, min, max})
    pred = self_ge_min.logical_and_(self_le_max) if 1 in fast else self_ge_min.logical_and(self_le_max)
    return torch.where(pred, grad, zero)


def clamp_backward_min_max(grad, self, min, max, *, fast=()):
    """clamp_backward_min_max(grad, self, min, max, grad_input_mask={true, true})."""
    zero = torch.scalar_tensor(0.0, dtype=grad.dtype, device=grad.device)
    self_lt_min = self < min
    min_lt_max = min < max
    # site 1: areAnyTensorSubclassLike({self, min, max})
    pred = self_lt_min.logical_and_(min_lt_max) if 1 in fast else self_lt_min.logical_and(min_lt_max)
    grad_min = torch.where(pred, grad, zero)
    self_gt_max = self > max
    max_lt_min = max < min
    # site 2: areAnyTensorSubclassLike({self, min, max})
    pred = self_gt_max.logical_or_(max_lt_min) if 2 in fast else self_gt_max.logical_or(max_lt_min)
    grad_max = torch.where(pred, grad, zero)
    return grad_min, grad_max


def _clamp_inputs(seed: int) -> tuple:
    """Ties with both bounds, and min > max at one position (max broadcast from (4,))."""
    x, lo, hi = randn(3, 4, seed=seed), randn(3, 4, seed=seed + 1) - 0.5, randn(4, seed=seed + 2) + 0.5
    x[0, 0] = lo[0, 0]
    x[1, 1] = hi[1]
    lo[2, 2] = hi[2] + 0.3
    return x, lo, hi


# ------------------------------------------------------------------ clamp (pytorch#69534)
_CLAMP = dict(torch_op=torch.clamp, formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2]),
              fixed_by="pytorch#69534 (introduced isTensorSubclassLike; tracking pytorch#69991)")
register_site(clamp_backward, 1, "backward", grad_positions=(0,),
              schema="(Tensor grad, Tensor self, Tensor min, Tensor max) -> Tensor",
              samples=lambda: [Sample("ties, min>max once, max (4,)", _clamp_inputs(301), (0,))],
              fast_calls=("logical_and_",), fast="(self >= min).logical_and_(self <= max)",
              slow="logical_and", **_CLAMP)
for _k, _call in ((1, "logical_and_"), (2, "logical_or_")):
    register_site(clamp_backward_min_max, _k, "backward", grad_positions=(1, 2),
                  schema="(Tensor grad, Tensor self, Tensor min, Tensor max) -> (Tensor, Tensor)",
                  samples=lambda: [Sample("ties, min>max once, max (4,)", _clamp_inputs(311), (1, 2))],
                  fast_calls=(_call,), fast=f"pred = ... .{_call}(...)", slow=_call[:-1], **_CLAMP,
                  notes="Grads of min and max (Tensor bounds).")
