"""Live backward site of ``take_backward#1`` (pytorch#81094): ``zeros_like(self).put_`` or ``put``.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample


def take_backward(grad, self, indices, *, fast=()):
    """take_backward(grad, self, indices)."""
    grad_self = torch.zeros_like(self)
    # site 1: areAnyTensorSubclassLike({grad, indices})
    if 1 not in fast:
        return grad_self.put(indices, grad, True)
    return grad_self.put_(indices, grad, True)


# ------------------------------------------------------------------ take (pytorch#81094)
register_site(take_backward, 1, "backward", torch_op=torch.take,
              formula_args=lambda a, o, g: (g[0], a[0], a[1]), grad_positions=(0,),
              schema="(Tensor grad, Tensor self, Tensor indices) -> Tensor",
              samples=lambda: [Sample("3x4, repeated flat index", (randn(3, 4, seed=641),
                                                                   torch.tensor([[0, 5], [5, 11]])), (0,))],
              fast_calls=("put_",), fast="zeros_like(self).put_(indices, grad, true)",
              slow="zeros_like(self).put(indices, grad, true)", fixed_by="pytorch#81094")
