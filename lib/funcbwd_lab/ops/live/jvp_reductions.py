"""Live forward-mode sites of the reduction helpers: ``norm_jvp#1`` (p = 1) and ``#2`` (p = inf),
``logcumsumexp_jvp#1`` and ``logsumexp_jvp#1``; each ``*_fast`` function is core's in-place
branch, each ``*_out_of_place`` its subclass branch, registered right below.

Conventions (fast and out-of-place entry points, registration): :mod:`funcbwd_lab.ops.live.jvp`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from funcbwd.errors import BadInputError
from funcbwd_lab.ops.live.common import SRC, randn, register_jvp_site
from funcbwd_lab.ops.live.common import tangent as _t
from funcbwd_lab.ops.registry import Sample


def _unsqueeze_multiple(t: torch.Tensor, dims: Sequence[int], ndim: int) -> torch.Tensor:
    for d in sorted(d % ndim for d in dims):
        t = t.unsqueeze(d)
    return t


# ================================================================== norm_jvp (p == 1, p == inf)
def _check_norm_order(p: float) -> float:
    p = float(p)
    if p != 1.0 and not math.isinf(p):
        raise BadInputError(f"live norm_jvp re-creates the p=1 and p=inf branches only "
                            f"(where the guarded sites are); got p={p}")
    return p


def norm_jvp_fast(self_p, self_t, p, norm, dim, keepdim):
    """norm_jvp @ 002ca6715ba1, in-place branches (site #1: p == 1; site #2: p == inf)."""
    ndim = self_p.dim()
    p = _check_norm_order(p)
    if p == 1.0:
        result = self_p.sgn()
        result = result.mul_(self_t.conj())                        # site #1 fast path
        result = torch.real(result)
        return result.sum(dim, keepdim)
    if not keepdim and self_p.dim() != 0:
        norm = _unsqueeze_multiple(norm, dim, ndim)
    self_isnan = self_p.isnan()
    norm_isnan = norm.isnan()
    self_and_norm_isnan = self_isnan.logical_and_(norm_isnan)      # site #2 fast path
    is_eq_max = (self_p.abs() == norm).logical_or_(self_and_norm_isnan).type_as(norm)
    nb_max = is_eq_max.count_nonzero(dim)
    if self_p.dim() != 0:
        nb_max = _unsqueeze_multiple(nb_max, dim, ndim)
    return (torch.real(self_p.sgn() * self_t.conj()) * is_eq_max / nb_max).sum(dim, keepdim)


def norm_jvp_out_of_place(self_p, self_t, p, norm, dim, keepdim):
    """norm_jvp @ 002ca6715ba1, subclass branches (p == 1, p == inf)."""
    ndim = self_p.dim()
    p = _check_norm_order(p)
    if p == 1.0:
        result = self_p.sgn().mul(self_t.conj())
        return torch.real(result).sum(dim, keepdim)
    if not keepdim and self_p.dim() != 0:
        norm = _unsqueeze_multiple(norm, dim, ndim)
    self_and_norm_isnan = self_p.isnan().logical_and(norm.isnan())
    # core: .logical_or_(...) on both branches (a fresh primal-only mask)
    is_eq_max = (self_p.abs() == norm).logical_or(self_and_norm_isnan).type_as(norm)
    nb_max = is_eq_max.count_nonzero(dim)
    if self_p.dim() != 0:
        nb_max = _unsqueeze_multiple(nb_max, dim, ndim)
    return (torch.real(self_p.sgn() * self_t.conj()) * is_eq_max / nb_max).sum(dim, keepdim)


# ================================================================== logcumsumexp_jvp, logsumexp_jvp
def _logcumsumexp_self_p_exp(self_p, dim):
    if not self_p.is_complex():
        return (self_p - torch.max(self_p, dim, True)[0]).exp()  # exp-normalize trick
    return self_p.exp()


def logcumsumexp_jvp_fast(self_p, self_t, dim):
    """logcumsumexp_jvp @ 002ca6715ba1, in-place branch."""
    self_p_exp = _logcumsumexp_self_p_exp(self_p, dim)
    cumsumexp_p = self_p_exp.cumsum(dim)
    eps = 1e-13
    self_p_exp *= self_t                                           # site #1 fast path
    cumsumexp_t = self_p_exp.cumsum(dim)
    cumsumexp_t /= cumsumexp_p.add_(eps)
    return cumsumexp_t


def logcumsumexp_jvp_out_of_place(self_p, self_t, dim):
    """logcumsumexp_jvp @ 002ca6715ba1, subclass branch."""
    self_p_exp = _logcumsumexp_self_p_exp(self_p, dim)
    cumsumexp_p = self_p_exp.cumsum(dim)
    eps = 1e-13
    result = (self_p_exp * self_t).cumsum(dim)
    return result / (cumsumexp_p + eps)  # core: result /= cumsumexp_p.add_(eps)


def _logsumexp_self_p_exp(self_p, dim):
    if self_p.numel() > 0:
        return (self_p - torch.amax(torch.real(self_p), dim, True)).exp()
    return self_p.exp()


def logsumexp_jvp_fast(self_p, self_t, dim, keepdim):
    """logsumexp_jvp @ 002ca6715ba1, in-place branch (also reached from log_softmax's jvp)."""
    self_p_exp = _logsumexp_self_p_exp(self_p, dim)
    sumexp_p = self_p_exp.sum(dim, keepdim)
    self_p_exp *= self_t                                           # site #1 fast path
    sumexp_t = self_p_exp.sum(dim, keepdim)
    sumexp_t /= sumexp_p
    return sumexp_t


def logsumexp_jvp_out_of_place(self_p, self_t, dim, keepdim):
    """logsumexp_jvp @ 002ca6715ba1, subclass branch."""
    self_p_exp = _logsumexp_self_p_exp(self_p, dim)
    sumexp_p = self_p_exp.sum(dim, keepdim)
    result = (self_p_exp * self_t).sum(dim, keepdim)
    return result / sumexp_p  # core: result /= sumexp_p


# ================================================================== registration
def _dims(dim: Any, x: torch.Tensor) -> list[int]:
    """``dim`` as a list; None (all dims) made explicit, which is what an empty list means in C++."""
    if dim is None:
        return list(range(x.dim()))
    return [dim] if isinstance(dim, int) else list(dim)


def _vector_norm_args(a, o, t):
    return (a[0], _t(t, 0, a[0]), a[1], o[0], _dims(a[2], a[0]), a[3])


def _ties(seed: int) -> torch.Tensor:
    """4x5 with two entries of maximal |x| per row (opposite signs), so amax ties are exercised."""
    x = randn(4, 5, seed=seed)
    m = x.abs().amax(1) + 0.5
    x[:, 0], x[:, 3] = m, -m
    return x


_NORM_SCHEMA = "(Tensor self_p, Tensor self_t, Scalar? p, Tensor norm, int[] dim, bool keepdim) -> Tensor"
register_jvp_site(
    "norm_jvp#1", torch_op=torch.linalg.vector_norm, formula=norm_jvp_fast,
    handfixed=norm_jvp_out_of_place, formula_args=_vector_norm_args, grad_positions=(0,),
    source=f"{SRC} norm_jvp, p == 1: areAnyTensorSubclassLike({{self_t}}) ? result.mul(self_t.conj()) "
           ": result.mul_(self_t.conj())",
    schema=_NORM_SCHEMA,
    make_samples=lambda: [
        Sample("3x4 ord=1 dim=1", (randn(3, 4, seed=9101), 1.0, 1, False)),
        Sample("2x3x4 ord=1 dim=(0,2) keepdim", (randn(2, 3, 4, seed=9102), 1.0, (0, 2), True)),
    ],
    notes="Reached through linalg_vector_norm_jvp (also norm.*, dist and renorm_jvp). The in-place "
          "target sgn(self_p) is primal-only while the operand is the tangent.",
    hazard=("tangents",), inplace_ops=("mul_",))

register_jvp_site(
    "norm_jvp#2", torch_op=torch.linalg.vector_norm, formula=norm_jvp_fast,
    handfixed=norm_jvp_out_of_place, formula_args=_vector_norm_args, grad_positions=(0,),
    source=f"{SRC} norm_jvp, p == inf: areAnyTensorSubclassLike({{norm}}) ? "
           "self_isnan.logical_and(norm_isnan) : self_isnan.logical_and_(norm_isnan)",
    schema=_NORM_SCHEMA,
    make_samples=lambda: [
        Sample("4x5 ord=inf dim=1 ties", (_ties(9111), math.inf, 1, False)),
        Sample("3x4 ord=inf dim=0 keepdim", (randn(3, 4, seed=9112), math.inf, 0, True)),
    ],
    notes="The guarded write mixes two masks of primal values only (self_p, norm): no tangent "
          "reaches it, so it is not a vmap hazard when self_p and norm are batched alike.",
    hazard=(), inplace_ops=("logical_and_",))

register_jvp_site(
    "logcumsumexp_jvp#1", torch_op=torch.logcumsumexp, formula=logcumsumexp_jvp_fast,
    handfixed=logcumsumexp_jvp_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0]), a[1]), grad_positions=(0,),
    source=f"{SRC} logcumsumexp_jvp: areAnyTensorSubclassLike({{self_p, self_t}}) ? "
           "(self_p_exp * self_t).cumsum(dim) : self_p_exp *= self_t",
    schema="(Tensor self_p, Tensor self_t, int dim) -> Tensor",
    make_samples=lambda: [
        Sample("3x5 dim=1", (randn(3, 5, seed=9121), 1)),
        Sample("4x3 dim=0 wide range", (3 * randn(4, 3, seed=9122), 0)),
    ],
    hazard=("tangents",), inplace_ops=("mul_",))

register_jvp_site(
    "logsumexp_jvp#1", torch_op=torch.logsumexp, formula=logsumexp_jvp_fast,
    handfixed=logsumexp_jvp_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0]), _dims(a[1], a[0]), a[2]), grad_positions=(0,),
    source=f"{SRC} logsumexp_jvp: areAnyTensorSubclassLike({{self_p, self_t}}) ? "
           "(self_p_exp * self_t).sum(dim, keepdim) : self_p_exp *= self_t",
    schema="(Tensor self_p, Tensor self_t, int[]? dim, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("3x5 dim=1", (randn(3, 5, seed=9131), 1, False)),
        Sample("2x3x4 dim=(0,2) keepdim", (randn(2, 3, 4, seed=9132), (0, 2), True)),
    ],
    notes="Also reached from _log_softmax's forward formula (self_t - logsumexp_jvp(...)).",
    hazard=("tangents",), inplace_ops=("mul_",))
