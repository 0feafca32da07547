"""prod: its legacy backward (a negative control), the modern one right below it, and its
registration.

* **Legacy** (PyTorch ~1.10/1.11): ``torch/csrc/autograd/FunctionsManual.cpp`` ``prod_backward``
  (the full reduction and the ``dim`` overload) and ``prod_safe_zeros_backward``. No in-place op:
  ``(input == 0).nonzero()`` and ``.item()`` pick a path (no zero: ``grad * result / input``; one
  zero: ``prod_safe_zeros_backward``, exclusive cumprods from both ends; more: zeros). A
  **negative control**: functionalization cannot remove data-dependent control flow.
* **Fixed** by core pytorch#81969 (always the safe path for a subclass-like input).
* **Modern**: that safe path, made unconditional: one graph for every input of its shapes, no
  data read into Python. ``prod_safe_zeros_backward`` as core has it today (with the size-1
  shortcut) is the live corpus's copy, :mod:`funcbwd_lab.ops.live.controls`, which re-creates today's
  ``FunctionsManual.cpp`` (its ``prod_backward`` sites run it too).

The lesson on one screen: the modern formula drops the branches on ``nonzero()`` / ``.item()``,
not an in-place op; that is why functionalization cannot help here and a rewrite can.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import randn, zero_if_none
from funcbwd_lab.ops.live.controls import prod_safe_zeros_backward as prod_safe_zeros_backward_modern
from funcbwd_lab.ops.registry import Args, OpSpec, Sample, register


# FunctionsManual.cpp prod_safe_zeros_backward(grad, inp, dim): exclusive cumprods from both
# ends; safe with zeros in the input.
def prod_safe_zeros_backward(grad: torch.Tensor, inp: torch.Tensor, dim: int) -> torch.Tensor:
    if inp.numel() == 0:
        return grad.expand_as(inp)
    ones_size = list(inp.shape)
    ones_size[dim] = 1
    ones = torch.ones(ones_size, dtype=grad.dtype, device=grad.device)
    exclusive_normal_nocp = torch.cat([ones, inp.narrow(dim, 0, inp.size(dim) - 1)], dim)
    exclusive_normal = exclusive_normal_nocp.cumprod(dim)
    narrow_reverse = inp.narrow(dim, 1, inp.size(dim) - 1).flip(dim)
    exclusive_reverse_nocp = torch.cat([ones, narrow_reverse], dim)
    exclusive_reverse = exclusive_reverse_nocp.cumprod(dim).flip(dim)
    return grad * (exclusive_normal * exclusive_reverse).conj()


# FunctionsManual.cpp prod_backward(grad, input, result) (full reduction). No in-place op:
# (input == 0).nonzero() and .item() drive control flow, so it is a *negative control* that
# functionalization cannot fix. Fixed by core pytorch#81969 (always the safe path for
# subclass-like input).
def prod_backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if input.dim() == 0:
        return grad
    zero_idx = (input == 0).nonzero()
    if zero_idx.numel() == 0:
        return grad * (result / input).conj()
    elif zero_idx.size(0) > 1:
        return torch.zeros_like(input)
    else:
        return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)


# FunctionsManual.cpp prod_backward(grad, input, result, dim, keepdim) (reduction over a dim).
def prod_dim_backward(
    grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int, keepdim: bool
) -> torch.Tensor:
    if input.dim() == 0:
        return grad
    dim = dim % input.dim()
    if not keepdim and input.dim() != 1:
        grad = grad.unsqueeze(dim)
        result = result.unsqueeze(dim)
    zero_mask = input == 0
    slice_zero_count = zero_mask.sum(dim, True)
    total_zeros = slice_zero_count.sum().item()
    if total_zeros == 0:
        return grad * (result / input).conj()
    else:
        return prod_safe_zeros_backward(grad, input, dim)


# One entry point for both prod overloads (the registry wants one formula per op).
def prod_legacy_backward(
    grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int | None, keepdim: bool
) -> torch.Tensor:
    if dim is None:
        return prod_backward(grad, input, result)
    return prod_dim_backward(grad, input, result, dim, keepdim)


# torch/csrc/autograd/FunctionsManual.cpp prod_backward (both overloads): the branch core takes
# when ``input.is_meta() || isTensorSubclassLike(input)`` ("for Composite Compliance, always take
# the safer (and slower) path", pytorch#81969), made unconditional. Core is STILL data dependent
# for plain inputs: the full reduction branches on (input == 0).nonzero() and its row count, the
# dim reduction on (input == 0).sum(dim, true).sum().item(). That works under vmap over cotangents
# only because the saved input is then a plain tensor; this version never reads data, so it is
# one graph for every input, at the price of two cumprods even when there are no zeros. (Core
# returns zeros_like(input) for more than one zero only with grad mode off; the legacy formula
# always does, so its second derivative there is zero, which is wrong.)
def prod_modern_backward(
    grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int | None, keepdim: bool
) -> torch.Tensor:
    if input.dim() == 0:
        return grad
    if dim is None:
        return prod_safe_zeros_backward_modern(grad, input.contiguous().view(-1), 0).view_as(input)
    dim = dim % input.dim()
    if not keepdim:
        grad = grad.unsqueeze(dim)
    return prod_safe_zeros_backward_modern(grad, input, dim)


def _prod_op(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    return torch.prod(x) if dim is None else torch.prod(x, dim, keepdim)


def _prod_input(zeros: Sequence[int], seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    for i in zeros:
        x.view(-1)[i] = 0.0
    return x


def _prod_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    # The directional derivative through the legacy formula: as data-dependent as the formula.
    x, dim = a[0], (a[1] if len(a) > 1 else None)
    keepdim = a[2] if len(a) > 2 else False
    g = prod_legacy_backward(torch.ones_like(o[0]), x, o[0], dim, keepdim)
    tx = zero_if_none(t[0], x)
    return ((g * tx).sum() if dim is None else (g * tx).sum(dim, keepdim),)


def _prod_entry(position: int, entry: torch.Tensor, b: int) -> torch.Tensor:
    """Batch entry ``b`` of prod's input with ``(zeros + b) % 3`` zeros (``zeros``: the entry's
    own count), so a batch of 3 holds a no-zero, a one-zero and a two-zeros entry: each takes a
    different branch of the legacy formula. The zeros go where ``|x|`` is smallest."""
    if position != 0:
        return entry
    flat = entry.reshape(-1).clone()
    want = (int((flat == 0).sum()) + b) % 3
    flat[flat == 0] = 0.5 * (1.0 + b / 4.0)
    flat[torch.argsort(flat.abs(), stable=True)[:want]] = 0.0
    return flat.reshape(entry.shape)


register(OpSpec(
    name="prod",
    torch_op=_prod_op,
    formula=prod_legacy_backward,
    formula_args=lambda a, o, g: (g[0], a[0], o[0], a[1] if len(a) > 1 else None, a[2] if len(a) > 2 else False),
    grad_positions=(0,),
    source="FunctionsManual.cpp prod_backward / prod_safe_zeros_backward: (input == 0).nonzero(), .item() drive control flow",
    fixed_by="core pytorch#81969",
    schema="(Tensor grad, Tensor input, Tensor result, int? dim, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("full, no zeros", (_prod_input([], 71),)),
        Sample("full, one zero", (_prod_input([5], 72),)),
        Sample("full, two zeros", (_prod_input([1, 6], 73),)),
        Sample("dim=1, no zeros", (_prod_input([], 74), 1, False)),
        Sample("dim=1, one zero", (_prod_input([5], 75), 1, False)),
        Sample("dim=1, two zeros", (_prod_input([4, 5], 76), 1, True)),
    ],
    jvp=_prod_jvp,
    batch_entry=_prod_entry,
    group="test",
    notes="A negative control: no in-place op, but data-dependent control flow (.item(), nonzero) "
    "that functionalization cannot remove.",
    handfixed=prod_modern_backward,
))
