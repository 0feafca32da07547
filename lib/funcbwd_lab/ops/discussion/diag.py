"""diag: its legacy backward, the modern one right below it, and its registration.

* **Legacy** (PyTorch ~1.10/1.11): ``aten/src/ATen/native/TensorShape.cpp`` ``diag_backward(grad,
  input_sizes, diagonal)``. 1-D and square inputs return ``grad.diag(diagonal)`` (no mutation); a
  non-square matrix takes ``zeros(input_sizes).diagonal(diagonal).copy_(grad)``: the batched grad
  copied in place into an unbatched zeros.
* **Fixed** by functorch's ``diagonal_backward`` batch rule; core pytorch#87180 made diag
  composite (``diag_embed`` for a vector, ``diagonal_copy`` for a matrix).
* **Modern**: the gradient of those ops, out of place as ``torch/_decomp/decompositions.py``
  writes ``diagonal_backward``: ``diagonal_scatter(grad.new_zeros(sizes), grad, ...)``.

The lesson on one screen: the legacy ``diag.copy_(grad)`` into a view of zeros is, out of place,
one ``diagonal_scatter``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import randn, shape, zero_if_none, zeros_like_grad
from funcbwd_lab.ops.registry import OpSpec, Sample, register


# TensorShape.cpp diag_backward(grad, input_sizes, diagonal).
# Fixed by functorch's diagonal_backward batch rule; core pytorch#87180 made diag composite.
def diag_backward(grad: torch.Tensor, input_sizes: Sequence[int], diagonal: int) -> torch.Tensor:
    if len(input_sizes) == 1 or input_sizes[0] == input_sizes[1]:
        return grad.diag(diagonal)
    # Input was a matrix but was not square
    grad_input = zeros_like_grad(input_sizes, grad)
    diag = grad_input.diagonal(diagonal)
    diag.copy_(grad)
    return grad_input


# aten/src/ATen/native/TensorShape.cpp diag: since pytorch#87180 diag is composite,
# diag_embed(self, offset) for a vector and diagonal_copy(self, offset) for a matrix, so its
# gradient is that of those ops: derivatives.yaml diag_embed "grad.diagonal(offset, dim1, dim2)"
# and diagonal "diagonal_backward_symint(grad, sizes, offset, dim1, dim2)". diagonal_backward's
# C++ kernel still copies into a zeros diagonal (functorch batches the op as a whole); its
# out-of-place form is torch/_decomp/decompositions.py diagonal_backward:
# diagonal_scatter(grad.new_zeros(sizes), grad, offset, dim1, dim2).
def diag_backward_modern(grad: torch.Tensor, input_sizes: Sequence[int], diagonal: int) -> torch.Tensor:
    if len(input_sizes) == 1:
        return grad.diagonal(diagonal, -2, -1)
    return torch.diagonal_scatter(grad.new_zeros(tuple(input_sizes)), grad, diagonal, 0, 1)


register(OpSpec(
    name="diag",
    torch_op=torch.diag,
    formula=diag_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1]),
    grad_positions=(0,),
    source="TensorShape.cpp diag_backward: zeros(input_sizes).diagonal(diagonal).copy_(grad)",
    fixed_by="functorch diagonal_backward batch rule; core pytorch#87180",
    schema="(Tensor grad, SymInt[] input_sizes, int diagonal) -> Tensor",
    make_samples=lambda: [
        Sample("3x5 k=0", (randn(3, 5, seed=1), 0)),
        Sample("3x5 k=1", (randn(3, 5, seed=2), 1)),
        Sample("5x3 k=-1", (randn(5, 3, seed=3), -1)),
        Sample("vector k=0", (randn(4, seed=4), 0)),
        Sample("vector k=1", (randn(3, seed=5), 1)),
        Sample("square 3x3 k=0", (randn(3, 3, seed=6), 0)),
    ],
    jvp=lambda a, o, t: (torch.diag(zero_if_none(t[0], a[0]), a[1]),),
    notes="Only the non-square matrix branch writes in place; 1-D and square inputs use grad.diag().",
    handfixed=diag_backward_modern,
))
