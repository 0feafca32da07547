"""Live backward sites of the binary_cross_entropy helpers (pytorch#70198): the target grad, the
double backward (target, input, grad_output) and binary_cross_entropy_with_logits (input and
target grads), each a chain of in-place ``mul_`` / ``sub_`` / ``div_`` or its out-of-place form.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from funcbwd_lab.ops.live.common import prob, rand, randn, register_site
from funcbwd_lab.ops.registry import Sample

MEAN = 1  # at::Reduction::Mean (None=0, Mean=1, Sum=2)
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def binary_cross_entropy_target_backward(grad, self, target, weight, reduction, *, fast=()):
    """binary_cross_entropy_target_backward(grad, self, target, weight, reduction)."""
    grad_target = torch.logit(self).neg_()
    # site 1: !areAnyTensorSubclassLike({grad})
    grad_target = grad_target.mul_(grad) if 1 in fast else grad_target * grad
    if weight is not None:
        # site 2: !isTensorSubclassLike(weight)
        grad_target = grad_target.mul_(weight) if 2 in fast else grad_target * weight
    if reduction == MEAN:
        grad_target.div_(target.numel())
    return grad_target


def binary_cross_entropy_double_backward_target(grad, grad_output, self, target, weight, reduction,
                                                *, fast=()):
    """binary_cross_entropy_double_backward_target(grad, grad_output, self, target, weight, reduction)."""
    res = -grad * grad_output
    if weight is not None:
        # site 1: isTensorSubclassLike(weight)
        res = res.mul_(weight) if 1 in fast else res.mul(weight)
    neg_self = 1 - self
    # site 2: isTensorSubclassLike(self)
    denom = neg_self.mul_(self) if 2 in fast else neg_self.mul(self)
    with torch.no_grad():  # at::NoGradGuard; default eps of binary_cross_entropy for all dtypes
        denom.clamp_min_(1e-12)
    # site 3: isTensorSubclassLike(denom)
    res = res.div_(denom) if 3 in fast else res.div(denom)
    if reduction == MEAN:
        res.div_(target.numel())
    return res


def binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight, reduction,
                                              *, fast=()):
    """binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight, reduction).

    Core also takes the out-of-place branch whenever GradMode is enabled (as under
    ``torch.func.vjp``, which differentiates with create_graph=True); ``fast`` ignores that."""
    if pos_weight is not None:
        t = pos_weight.mul(target)
        # site 1: areAnyTensorSubclassLike({input, target}) || GradMode::is_enabled()
        if 1 in fast:
            grad_input = t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t)
        else:
            grad_input = t.add(1).sub(target).mul(input.sigmoid()).sub(t)
    else:
        # site 2: areAnyTensorSubclassLike({input, target}) || GradMode::is_enabled()
        grad_input = input.sigmoid().sub_(target) if 2 in fast else input.sigmoid().sub(target)
    # site 3: isTensorSubclassLike(grad) || GradMode::is_enabled()
    grad_input = grad_input.mul_(grad) if 3 in fast else grad_input.mul(grad)
    if weight is not None:
        # site 4: isTensorSubclassLike(weight) || GradMode::is_enabled()
        grad_input = grad_input.mul_(weight) if 4 in fast else grad_input.mul(weight)
    if reduction == MEAN:
        grad_input.div_(input.numel())
    return grad_input


def binary_cross_entropy_with_logits_target_backward(grad_output, self, target, weight, pos_weight,
                                                     reduction, *, fast=()):
    """binary_cross_entropy_with_logits_target_backward(grad_output, self, target, weight, pos_weight, reduction)."""
    if pos_weight is not None:
        # site 1: areAnyTensorSubclassLike({pos_weight, grad_output})
        if 1 in fast:
            grad_target = (F.logsigmoid(-self).sub_(F.logsigmoid(self).mul_(pos_weight))
                           .mul_(grad_output))
        else:
            grad_target = F.logsigmoid(-self).sub(F.logsigmoid(self).mul(pos_weight)).mul(grad_output)
    else:
        grad_target = -self * grad_output
    if weight is not None:
        # site 2: isTensorSubclassLike(weight)
        grad_target = grad_target.mul_(weight) if 2 in fast else grad_target.mul(weight)
    if reduction == MEAN:
        grad_target.div_(target.numel())
    return grad_target


def binary_cross_entropy_double_backward(grad_output, grad, input, target, weight, reduction,
                                         *, fast=()):
    """binary_cross_entropy_double_backward(grad_output, grad, input, target, weight, reduction)."""
    eps = 1e-12
    inp_pl_eps = input + eps
    one_m_inp_pl_eps = 1 - input + eps
    gI = (input * input - 2 * input * target + target) / (inp_pl_eps.pow(2) * one_m_inp_pl_eps.pow(2))
    # site 1: !areAnyTensorSubclassLike({gI, grad}) -> gI *= grad * grad_output
    gI = gI.mul_(grad * grad_output) if 1 in fast else gI * (grad * grad_output)
    if weight is not None:
        # site 2: !isTensorSubclassLike(weight) -> gI *= weight
        gI = gI.mul_(weight) if 2 in fast else gI.mul(weight)
    if reduction == MEAN:
        return gI / input.numel()
    return gI


def binary_cross_entropy_double_backward_grad_output(grad, input, target, weight, reduction, *, fast=()):
    """binary_cross_entropy_double_backward_grad_output(grad, input, target, weight, reduction)."""
    eps = 1e-12
    ggO = (input - target) / ((input + eps) * (1 - input + eps))
    # site 1: !areAnyTensorSubclassLike({ggO, grad}) -> ggO *= grad
    ggO = ggO.mul_(grad) if 1 in fast else ggO * grad
    if weight is not None:
        # site 2: !isTensorSubclassLike(weight) -> ggO *= weight
        ggO = ggO.mul_(weight) if 2 in fast else ggO.mul(weight)
    if reduction == MEAN:
        return ggO / input.numel()
    return ggO


def _bce(x, target, weight, reduction):
    return F.binary_cross_entropy(x, target, weight, reduction=reduction)


def _bce_backward(grad_output, self, target, weight, reduction):
    return torch.ops.aten.binary_cross_entropy_backward(grad_output, self, target, weight,
                                                        REDUCTIONS[reduction])


def _bce_logits(x, target, weight, pos_weight, reduction):
    return F.binary_cross_entropy_with_logits(x, target, weight, reduction=reduction, pos_weight=pos_weight)


def _expanded(weight, like):
    # F.binary_cross_entropy expands weight to the target's shape before calling aten.
    return None if weight is None else weight.expand(like.shape)


# ------------------------------------------------------------------ binary_cross_entropy (pytorch#70198)
def _probabilities(*positions: int) -> Callable:
    """``OpSpec.batch_entry`` for args binary_cross_entropy requires in [0, 1] (input, target):
    a batch entry ``e`` (a rearranged, rescaled copy, positive) becomes ``e / (1 + e)``: still
    distinct from the sample's value, and in (0, 1) whatever the rescaling."""
    def entry(position: int, e: torch.Tensor, b: int) -> torch.Tensor:
        return e / (1 + e) if position in positions else e
    return entry


def _bce_samples(seed: int, weighted_only: bool) -> Callable[[], list]:
    def make():
        p, t = prob(3, 4, seed=seed), rand(3, 4, seed=seed + 1)
        out = [Sample("weight (4,), mean", (p, t, rand(4, seed=seed + 2) + 0.5, "mean"), (1,)),
               Sample("weight (3,4), none", (p, t, rand(3, 4, seed=seed + 3) + 0.5, "none"), (1,))]
        return out if weighted_only else out + [Sample("no weight, sum", (p, t, None, "sum"), (1,))]
    return make


for _k, _w in ((1, False), (2, True)):
    register_site(binary_cross_entropy_target_backward, _k, "backward", torch_op=_bce,
                  formula_args=lambda a, o, g: (g[0], a[0], a[1], _expanded(a[2], a[1]), REDUCTIONS[a[3]]),
                  grad_positions=(1,), fixed_by="pytorch#70198",
                  schema="(Tensor grad, Tensor self, Tensor target, Tensor? weight, int reduction) -> Tensor",
                  samples=_bce_samples(331 + 10 * _k, _w), fast_calls=("mul_",),
                  fast=f"grad_target.mul_({'weight' if _w else 'grad'})", slow="grad_target * ...",
                  notes="Target grad of binary_cross_entropy.", batch_entry=_probabilities(0, 1))


def _bce_backward_samples(seed: int, weighted_only: bool, diff: int) -> Callable[[], list]:
    def make():
        p, t = prob(3, 4, seed=seed), rand(3, 4, seed=seed + 1)
        w = rand(3, 4, seed=seed + 2) + 0.5
        out = [Sample("weight, none", (randn(3, 4, seed=seed + 3), p, t, w, "none"), (diff,)),
               Sample("weight, mean", (randn(seed=seed + 4), p, t, w, "mean"), (diff,))]
        unweighted = Sample("no weight, none", (randn(3, 4, seed=seed + 5), p, t, None, "none"), (diff,))
        return out if weighted_only else out + [unweighted]
    return make


_BCE_BW = dict(torch_op=_bce_backward, fixed_by="pytorch#70198", batch_entry=_probabilities(1, 2),
               notes="Double backward of binary_cross_entropy: torch_op is aten.binary_cross_entropy_backward.")
for _k, (_w, _call) in enumerate(((True, "res.mul_(weight)"), (False, "neg_self.mul_(self)"),
                                  (False, "res.div_(denom)")), start=1):
    register_site(binary_cross_entropy_double_backward_target, _k, "backward",
                  formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2], a[3], REDUCTIONS[a[4]]),
                  grad_positions=(2,),
                  schema="(Tensor grad, Tensor grad_output, Tensor self, Tensor target, Tensor? weight, "
                  "int reduction) -> Tensor",
                  samples=_bce_backward_samples(361 + 10 * _k, _w, 2),
                  fast_calls=(_call.split(".")[1].split("(")[0],), fast=_call,
                  slow=_call.replace("_(", "("), **_BCE_BW)
for _k, _w in ((1, False), (2, True)):
    register_site(binary_cross_entropy_double_backward, _k, "backward",
                  formula_args=lambda a, o, g: (a[0], g[0], a[1], a[2], a[3], REDUCTIONS[a[4]]),
                  grad_positions=(1,),
                  schema="(Tensor grad_output, Tensor grad, Tensor input, Tensor target, Tensor? weight, "
                  "int reduction) -> Tensor",
                  samples=_bce_backward_samples(401 + 10 * _k, _w, 1), fast_calls=("mul_",),
                  fast="gI *= weight" if _w else "gI *= grad * grad_output", slow="gI * ...", **_BCE_BW)
    register_site(binary_cross_entropy_double_backward_grad_output, _k, "backward",
                  formula_args=lambda a, o, g: (g[0], a[1], a[2], a[3], REDUCTIONS[a[4]]),
                  grad_positions=(0,),
                  schema="(Tensor grad, Tensor input, Tensor target, Tensor? weight, int reduction) -> Tensor",
                  samples=_bce_backward_samples(431 + 10 * _k, _w, 0), fast_calls=("mul_",),
                  fast="ggO *= weight" if _w else "ggO *= grad", slow="ggO * ...", **_BCE_BW)


# ------------------------------------------------------------------ binary_cross_entropy_with_logits
def _logits_samples(seed: int, diff: int, keep: str) -> Callable[[], list]:
    """Samples with ("P") or without ("N") pos_weight, and with ("W") a weight, as ``keep`` says."""
    def make():
        x, t = randn(3, 4, seed=seed), rand(3, 4, seed=seed + 1)
        w, pw = rand(4, seed=seed + 2) + 0.5, rand(4, seed=seed + 3) + 0.5
        every = {"PW": Sample("weight, pos_weight, mean", (x, t, w, pw, "mean"), (diff,)),
                 "P": Sample("pos_weight, none", (x, t, None, pw, "none"), (diff,)),
                 "NW": Sample("weight, no pos_weight, none", (x, t, w, None, "none"), (diff,)),
                 "N": Sample("no weight, no pos_weight, sum", (x, t, None, None, "sum"), (diff,))}
        return [every[k] for k in keep.split()]
    return make


_LOGITS = dict(torch_op=_bce_logits, formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2], a[3], REDUCTIONS[a[4]]),
               schema="(Tensor grad, Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, "
               "int reduction) -> Tensor")
_GRADMODE = ("Core's gate also says `|| GradMode::is_enabled()`: under torch.func.vjp "
             "(create_graph=True) core never takes this fast path; the formula takes it regardless.")
for _k, _keep, _calls, _fast in ((1, "PW P", ("sub_", "mul_"), "t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t)"),
                                 (2, "NW N", ("sub_",), "input.sigmoid().sub_(target)"),
                                 (3, "PW NW N", ("mul_",), "grad_input.mul_(grad)"),
                                 (4, "PW NW", ("mul_",), "grad_input.mul_(weight)")):
    register_site(binary_cross_entropy_with_logits_backward, _k, "backward", grad_positions=(0,),
                  samples=_logits_samples(501 + 10 * _k, 0, _keep), fast_calls=_calls, fast=_fast,
                  slow="the same chain out of place", fixed_by="pytorch#70198", notes=_GRADMODE, **_LOGITS)
for _k, _keep, _calls, _fast in ((1, "PW P", ("mul_", "sub_"),
                                  "log_sigmoid(-self).sub_(log_sigmoid(self).mul_(pos_weight)).mul_(grad_output)"),
                                 (2, "PW NW", ("mul_",), "grad_target.mul_(weight)")):
    register_site(binary_cross_entropy_with_logits_target_backward, _k, "backward", grad_positions=(1,),
                  samples=_logits_samples(551 + 10 * _k, 1, _keep), fast_calls=_calls, fast=_fast,
                  slow="the same chain out of place",
                  fixed_by="tracking pytorch#69991 (PR not identified; the pattern of pytorch#70198)",
                  notes="Target grad of binary_cross_entropy_with_logits.", **_LOGITS)
