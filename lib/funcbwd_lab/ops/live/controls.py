"""Live data-dependent controls: sites whose fast path reads tensor data instead of writing in
place, so functionalization cannot remove them: ``masked_fill_backward#1`` (``masked_select``),
``prod_backward#1-2`` (``nonzero``, ``.item()``) and ``linalg_det_backward#1`` (boolean-mask
indexing in ``masked_fmap``). Also home of ``prod_safe_zeros_backward`` as core has it today,
the out-of-place helper prod's and det's safe paths share (and the modern prod formula of
:mod:`funcbwd_lab.ops.discussion.prod`).

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import rand, randn, register_site
from funcbwd_lab.ops.registry import Sample


# torch/csrc/autograd/FunctionsManual.cpp prod_safe_zeros_backward (current: with the
# size-1 shortcut): exclusive cumprods from both ends, safe with zeros in the input.
def prod_safe_zeros_backward(grad: torch.Tensor, inp: torch.Tensor, dim: int) -> torch.Tensor:
    if inp.numel() == 0:
        return grad.expand_as(inp)
    if inp.size(dim) == 1:
        return grad
    ones_size = list(inp.shape)
    ones_size[dim] = 1
    ones = torch.ones(ones_size, dtype=grad.dtype, device=grad.device)
    exclusive_normal = torch.cat([ones, inp.narrow(dim, 0, inp.size(dim) - 1)], dim).cumprod(dim)
    narrow_reverse = inp.narrow(dim, 1, inp.size(dim) - 1).flip(dim)
    exclusive_reverse = torch.cat([ones, narrow_reverse], dim).cumprod(dim).flip(dim)
    return grad * (exclusive_normal * exclusive_reverse).conj()


def masked_fill_backward(grad, mask, *, fast=()):
    """masked_fill_backward(grad, mask): the grad of masked_fill's Tensor ``value``."""
    # site 1: areAnyTensorSubclassLike({grad, mask}); masked_select's shape is data-dependent
    if 1 in fast:
        return grad.masked_select(mask).sum()
    return torch.where(mask, grad, 0).sum()


def prod_backward(grad, input, result, *, fast=()):
    """prod_backward(grad, input, result): full reduction (site 1: ``nonzero``)."""
    if input.dim() == 0:
        return grad
    # site 1: input.is_meta() || isTensorSubclassLike(input)
    if 1 not in fast:
        return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)
    zero_idx = (input == 0).nonzero()
    if zero_idx.numel() == 0:
        return grad * (result / input).conj()
    elif not torch.is_grad_enabled() and zero_idx.size(0) > 1:
        return torch.zeros_like(input)
    return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)


def prod_backward_dim(grad, input, result, dim, keepdim, *, fast=()):
    """prod_backward(grad, input, result, dim, keepdim): the second overload (site 2: ``.item()``)."""
    if input.dim() == 0:
        return grad
    dim = dim % input.dim()
    if not keepdim:
        grad = grad.unsqueeze(dim)
        result = result.unsqueeze(dim)
    # site 2: input.is_meta() || isTensorSubclassLike(input)
    if 2 not in fast:
        return prod_safe_zeros_backward(grad, input, dim)
    zero_mask = input == 0
    slice_zero_count = zero_mask.sum(dim, True)
    total_zeros = slice_zero_count.sum().item()
    if total_zeros == 0:
        return grad * (result / input).conj()
    return prod_safe_zeros_backward(grad, input, dim)


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


def _prod(x):
    return torch.prod(x)


def _prod_dim(x, dim, keepdim):
    return torch.prod(x, dim, keepdim)


def _with_zeros(flat: list[int], seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    x.view(-1)[flat] = 0.0
    return x


def _mask(*shape: int, seed: int) -> torch.Tensor:
    m = rand(*shape, seed=seed) > 0.5
    m.view(-1)[0], m.view(-1)[-1] = True, False  # never all-true, never all-false
    return m


# ------------------------------------------------------------------ data-dependent controls
register_site(masked_fill_backward, 1, "control", torch_op=torch.masked_fill,
              formula_args=lambda a, o, g: (g[0], a[1]), grad_positions=(2,),
              schema="(Tensor grad, Tensor mask) -> Tensor",
              samples=lambda: [
                  Sample("mask 3x4, value 0-dim", (randn(3, 4, seed=651), _mask(3, 4, seed=652),
                                                   torch.tensor(0.7)), (2,)),
                  Sample("mask (4,) broadcast", (randn(3, 4, seed=653), _mask(4, seed=654),
                                                 torch.tensor(-1.2)), (2,))],
              fast_calls=("masked_select",), fast="grad.masked_select(mask).sum()",
              slow="where(mask, grad, 0).sum()", fixed_by="pytorch#83515",
              notes="Grad of masked_fill's Tensor value.")
register_site(prod_backward, 1, "control", torch_op=_prod, formula_args=lambda a, o, g: (g[0], a[0], o[0]),
              grad_positions=(0,), schema="(Tensor grad, Tensor input, Tensor result) -> Tensor",
              samples=lambda: [Sample("no zeros", (_with_zeros([], 661),), (0,)),
                               Sample("one zero", (_with_zeros([5], 662),), (0,)),
                               Sample("two zeros", (_with_zeros([1, 6], 663),), (0,))],
              fast_calls=("nonzero",), fast="(input == 0).nonzero(), branch on its size",
              slow="prod_safe_zeros_backward always", fixed_by="pytorch#81969")
register_site(prod_backward_dim, 2, "control", site_fn="prod_backward", torch_op=_prod_dim,
              formula_args=lambda a, o, g: (g[0], a[0], o[0], a[1], a[2]), grad_positions=(0,),
              schema="(Tensor grad, Tensor input, Tensor result, int dim, bool keepdim) -> Tensor",
              samples=lambda: [Sample("dim=1, no zeros", (_with_zeros([], 671), 1, False), (0,)),
                               Sample("dim=1, one zero", (_with_zeros([5], 672), 1, False), (0,)),
                               Sample("dim=0, two zeros, keepdim", (_with_zeros([4, 5], 673), 0, True), (0,))],
              fast_calls=("item",), fast="zero count .item<int64_t>(), branch on it",
              slow="prod_safe_zeros_backward always", fixed_by="pytorch#81969",
              notes="The prod(dim) overload; site #2 of the two prod_backward overloads.")


def _det_inputs(seed: int) -> torch.Tensor:
    """A batch of two 3x3 matrices: one invertible, one exactly singular (rank 2)."""
    ok = randn(3, 3, seed=seed, dtype=torch.float64) + 2 * torch.eye(3, dtype=torch.float64)
    singular = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=torch.float64)
    return torch.stack([ok, singular])


register_site(linalg_det_backward, 1, "control", torch_op=torch.linalg.det,
              formula_args=lambda a, o, g: (g[0], o[0], a[0]), grad_positions=(0,),
              schema="(Tensor grad, Tensor det, Tensor A) -> Tensor",
              samples=lambda: [Sample("batch: invertible + singular", (_det_inputs(681),), (0,)),
                               Sample("one invertible 3x3", (_det_inputs(682)[0],), (0,))],
              fast_calls=("index_put_",),
              fast="masked_fmap(|det| < 100 eps, singular, non_singular, ...): boolean-mask index + index_put_",
              slow="the SVD-based singular formula for every matrix",
              fixed_by="tracking pytorch#69991 (masked_fmap from pytorch#80217; guard's PR not identified)",
              notes="Only in core's GradMode-enabled branch (create_graph=True, as under torch.func.vjp); "
              "the formula re-creates that branch only.")
