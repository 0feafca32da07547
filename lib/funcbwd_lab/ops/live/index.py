"""Live backward site of advanced indexing (pytorch#71779): ``index_backward#1``,
``_index_put_impl_`` into ``zeros_like_self`` or the out-of-place ``index_put``.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample

# Module-level so a test can swap it for a broken variant (it is not a Tensor method).
_index_put_impl_ = torch.ops.aten._index_put_impl_


def index_backward(zeros_like_self, grad, *indices, fast=()):
    """index_backward(zeros_like_self, indices, grad); Python needs the indices last."""
    # site 1: areAnyTensorSubclassLike({zeros_like_self, grad}) || areAnyOptionalTensorSubclassLike(indices)
    if 1 in fast:
        return _index_put_impl_(zeros_like_self, list(indices), grad, True, True)
    return zeros_like_self.index_put(indices, grad, True)


def _index(x, *indices):
    return x[indices]


# ------------------------------------------------------------------ advanced indexing (pytorch#71779)
register_site(index_backward, 1, "backward", torch_op=_index,
              formula_args=lambda a, o, g: (g[0].new_zeros(a[0].shape), g[0], *a[1:]), grad_positions=(0,),
              schema="(Tensor zeros_like_self, Tensor grad, Tensor[] indices) -> Tensor",
              samples=lambda: [
                  Sample("x[i], repeated rows", (randn(4, 3, seed=621), torch.tensor([1, 3, 1])), (0,)),
                  Sample("x[i, j], repeated pairs", (randn(4, 3, seed=622), torch.tensor([0, 2, 2]),
                                                     torch.tensor([1, 0, 0])), (0,))],
              fast_calls=("_index_put_impl_",), fast="at::_index_put_impl_(zeros_like_self, indices, grad, true, true)",
              slow="zeros_like_self.index_put(indices, grad, true)", fixed_by="pytorch#71779",
              notes="derivatives.yaml passes grad.new_zeros(self.sizes()) as zeros_like_self (formula_args "
              "does the same), so the in-place target is batched whenever grad is.")
