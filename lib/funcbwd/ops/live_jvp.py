"""The "live" corpus, forward-mode part: in-place fast paths that PyTorch core still takes today.

``torch/csrc/autograd/FunctionsManual.cpp`` (pytorch/pytorch at commit
002ca6715ba1ab4d2369262b487eeb30bf249911) keeps hand-written branches in its forward-mode (JVP)
helpers: ``areAnyTensorSubclassLike(...)`` / ``isTensorSubclassLike(...)`` picks an out-of-place
path for tensor subclasses (functorch's BatchedTensor, CompositeCompliance tensors, ...) and an
in-place *fast path* for plain tensors. Each guarded branch is one **site**, registered here as
one :class:`funcbwd.ops.registry.OpSpec` with ``group="live"`` and ``kind="jvp"``.

Naming: site ``<C++ function>#<k>`` (as in docs/live-sites.md), ``k`` counting the guarded
branches of that function from the top of its body, is registered as op
``live_<C++ function>_<k>`` (``live_norm_jvp_1`` is the ``p == 1`` branch, ``live_norm_jvp_2``
the ``p == inf`` one; an identifier, so the composite strategy can make it a ``torch.library``
op). The forward use of ``differential_analytic_matrix_function#1`` (a site counted once, as a
backward site) is the extra op ``live_linalg_matrix_exp_differential_jvp_1``
(``Site.counted`` False). :data:`SITES` maps op names to :class:`funcbwd.ops.live_common.Site`.

The helpers are re-created in :mod:`funcbwd.ops.live_jvp_formulas` and
:mod:`funcbwd.ops.live_jvp_norms`; this module registers them.

Contract of every entry (``kind="jvp"``):

* ``torch_op`` is the torch op whose forward-mode derivative (derivatives.yaml) calls the helper;
  for the norm family it is the aten-level op (``torch.native_layer_norm`` ...) so that its extra
  outputs are exactly the saved statistics the formula receives; ``diff_outputs`` picks the
  outputs the formula returns tangents for.
* ``formula_args(args, outputs, tangents)`` builds the helper's args from the forward's positional
  args, its outputs and the input tangents (one per differentiable input, in ``Sample.diff``
  order; ``None`` means a zero tangent and is replaced by zeros). The formula returns the output
  tangent (a tuple when ``len(diff_outputs) > 1``).
* ``formula`` is the **fast path as core has it today**: the guarded branch of this site takes the
  in-place route, line for line. Helpers with several sites (the norm family) take the in-place
  route only at the registered site and the out-of-place route at the others, so the evidence for
  a site is its own; core's unconditional in-place ops are kept as core has them.
* ``handfixed`` is the **out-of-place path**: core's subclass branch, with the in-place ops that
  core keeps on both branches also written out of place (each marked ``# core: ...``), so it
  contains no in-place op at all.
* ``grad_positions`` are the differentiable positions; ``jvp`` stays None: the legacy op runs
  ``formula`` as its forward-mode rule, and its backward is torch's own gradient of ``torch_op``.

Not modelled: core's extra ``t._is_zerotensor()`` conditions (a zero tangent is a dense zero
tensor here, so the in-place branch is taken where core would take the out-of-place one).

:data:`VMAP_HAZARD` records, per site, which vmap (over tangents, with primals and saved values
unbatched; or over primals, with one shared tangent) puts a batched operand into an unbatched
in-place target of the site's branch, i.e. where the fast path must fail with vmap's in-place
error. tests/test_live_jvp.py checks every claim.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from funcbwd import internals
from funcbwd.ops.live_common import Site, op_name_for, randn
from funcbwd.ops.live_jvp_formulas import (  # noqa: F401  (re-exported for tests and views)
    householder_product_jvp_fast, householder_product_jvp_out_of_place,
    linalg_matrix_exp_differential_fast, linalg_matrix_exp_differential_out_of_place,
    logcumsumexp_jvp_fast, logcumsumexp_jvp_out_of_place, logsumexp_jvp_fast,
    logsumexp_jvp_out_of_place, norm_jvp_fast, norm_jvp_out_of_place)
from funcbwd.ops.live_jvp_norms import (
    batch_norm_jvp_fast_affine_bias, batch_norm_jvp_fast_norm, batch_norm_jvp_out_of_place,
    layer_norm_jvp_fast_affine_weight, layer_norm_jvp_out_of_place, native_group_norm_jvp_fast_invstd,
    native_group_norm_jvp_out_of_place, rms_norm_jvp_fast_rstd, rms_norm_jvp_fast_result,
    rms_norm_jvp_out_of_place, rms_norm_rstd_jvp_fast, rms_norm_rstd_jvp_out_of_place)
from funcbwd.ops.registry import OpSpec, Sample, register

SRC = "FunctionsManual.cpp @ 002ca6715ba1"
NOT_FIXED = ("nothing yet: core still takes this in-place branch for plain tensors "
             "(pytorch/pytorch FunctionsManual.cpp at 002ca6715ba1)")
#: op names, in registration order
SITE_NAMES: list[str] = []
#: op name -> Site (kind "jvp"; ``fast_calls`` are the site's in-place aten ops)
SITES: dict[str, Site] = {}
#: op name -> the vmap modes ("tangents", "primals") under which its in-place branch meets a
#: batched operand while its target is unbatched (read off the C++; verified by tests/test_live_jvp.py).
VMAP_HAZARD: dict[str, frozenset[str]] = {}
#: op name -> the aten in-place ops its fast branch performs (verified by tracing the fast path).
SITE_INPLACE_OPS: dict[str, frozenset[str]] = {}


def _t(tangents: Sequence, i: int, like: torch.Tensor) -> torch.Tensor:
    """Tangent ``i`` (zeros shaped like its primal when it is None)."""
    return torch.zeros_like(like) if tangents[i] is None else tangents[i]


def _dims(dim: Any, x: torch.Tensor) -> list[int]:
    """``dim`` as a list; None (all dims) made explicit, which is what an empty list means in C++."""
    if dim is None:
        return list(range(x.dim()))
    return [dim] if isinstance(dim, int) else list(dim)


# ================================================================== registration
def _register(site_id: str, *, hazard: Sequence[str], inplace_ops: Sequence[str], name: str = "",
              counted: bool = True, **fields) -> None:
    site = Site(site_id, "jvp", tuple(inplace_ops), name or op_name_for(site_id), counted)
    register(OpSpec(name=site.op_name, group="live", kind="jvp", fixed_by=NOT_FIXED, **fields))
    SITE_NAMES.append(site.op_name)
    SITES[site.op_name] = site
    VMAP_HAZARD[site.op_name] = frozenset(hazard)
    SITE_INPLACE_OPS[site.op_name] = frozenset(inplace_ops)


def _vector_norm_args(a, o, t):
    return (a[0], _t(t, 0, a[0]), a[1], o[0], _dims(a[2], a[0]), a[3])


def _ties(seed: int) -> torch.Tensor:
    """4x5 with two entries of maximal |x| per row (opposite signs), so amax ties are exercised."""
    x = randn(4, 5, seed=seed)
    m = x.abs().amax(1) + 0.5
    x[:, 0], x[:, 3] = m, -m
    return x


_NORM_SCHEMA = "(Tensor self_p, Tensor self_t, Scalar? p, Tensor norm, int[] dim, bool keepdim) -> Tensor"
_register(
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

_register(
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

_register(
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

_register(
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


def _geqrf_sample(m: int, n: int, k: int, seed: int) -> tuple:
    a, tau = torch.geqrf(randn(m, n, seed=seed, dtype=torch.float64))
    return a, tau[:k].clone()


_register(
    "householder_product_jvp#1", torch_op=torch.linalg.householder_product,
    formula=householder_product_jvp_fast, handfixed=householder_product_jvp_out_of_place,
    formula_args=lambda a, o, t: (_t(t, 0, a[0]), _t(t, 1, a[1]), o[0], a[0], a[1]),
    grad_positions=(0, 1),
    source=f"{SRC} householder_product_jvp: isTensorSubclassLike(H_minus_dH_i_H_plus) ? "
           "dprod = dprod.add(...) : dprod.add_(...)",
    schema="(Tensor dV, Tensor dtau, Tensor prod, Tensor V, Tensor tau) -> Tensor",
    make_samples=lambda: [
        Sample("geqrf 5x3 k=3 float64", _geqrf_sample(5, 3, 3, 9141), diff=(0, 1)),
        Sample("geqrf 4x3 k=2 float64", _geqrf_sample(4, 3, 2, 9142), diff=(0, 1)),
    ],
    notes="dprod starts as zeros_like(prod), a primal-shaped buffer the tangent terms are added to.",
    hazard=("tangents",), inplace_ops=("add_",))

_register(
    "differential_analytic_matrix_function#1", name="live_linalg_matrix_exp_differential_jvp_1",
    counted=False, torch_op=torch.linalg.matrix_exp,
    formula=linalg_matrix_exp_differential_fast,
    handfixed=linalg_matrix_exp_differential_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0])), grad_positions=(0,),
    source=f"{SRC} differential_analytic_matrix_function (adjoint=false): areAnyTensorSubclassLike"
           "({A, grad}) ? cat(...) : zeros(...) then three narrow(...).copy_(...)",
    schema="(Tensor self, Tensor grad) -> Tensor",
    make_samples=lambda: [
        Sample("3x3 float64", (0.5 * randn(3, 3, seed=9151, dtype=torch.float64),)),
        Sample("batch 2x2x2 float64", (0.5 * randn(2, 2, 2, seed=9152, dtype=torch.float64),)),
    ],
    notes="The same helper is linalg_matrix_exp's backward with adjoint=true (a backward site); "
          "this entry is its forward use. zeros(...) is unbatched whatever the inputs are.",
    hazard=("tangents", "primals"), inplace_ops=("copy_",))


def _group_norm_op(x, groups, eps):
    n, c = x.size(0), x.size(1)
    return torch.native_group_norm(x, None, None, n, c, x[0, 0].numel(), groups, eps)


_register(
    "_invstd_jvp#1", torch_op=_group_norm_op, formula=native_group_norm_jvp_fast_invstd,
    handfixed=native_group_norm_jvp_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0]), o[1], o[2], a[1]), grad_positions=(0,),
    diff_outputs=(0, 2),
    source=f"{SRC} _invstd_jvp: areAnyTensorSubclassLike({{input_t, input_p, mean_p, invstd_p}}) "
           "|| input_t._is_zerotensor() ? out of place : invstd_t *= input_p - mean_p; "
           "invstd_t *= -invstd_p.pow(3)",
    schema="(Tensor input_p, Tensor input_t, Tensor mean, Tensor rstd, int groups) -> (Tensor, Tensor)",
    make_samples=lambda: [
        Sample("2x4x3 groups=2", (randn(2, 4, 3, seed=9161), 2, 1e-5)),
        Sample("3x6x2x2 groups=3", (randn(3, 6, 2, 2, seed=9162), 3, 1e-5)),
    ],
    notes="Two routes reach the site: _norm_jvp (every batch/layer/group norm output; the target "
          "is tangent-centred, so batched primals break it) and group_norm_invstd_jvp (arguments "
          "swapped, the target is primal-centred, so batched tangents break it).",
    hazard=("tangents", "primals"), inplace_ops=("mul_",))


def _batch_norm_op(x, weight, bias, eps):
    return torch.native_batch_norm(x, weight, bias, None, None, True, 0.1, eps)


def _batch_norm_args(a, o, t):
    w, b = a[1], a[2]
    return (a[0], _t(t, 0, a[0]), w, None if w is None else _t(t, 1, w),
            b, None if b is None else _t(t, 2, b), None, None, o[1], o[2], True, a[3])


_BN_SCHEMA = ("(Tensor input_p, Tensor input_t, Tensor? weight_p, Tensor? weight_t, Tensor? bias_p, "
              "Tensor? bias_t, Tensor? running_mean, Tensor? running_var, Tensor saved_mean, "
              "Tensor saved_invstd, bool train, float eps) -> Tensor")
_register(
    "_norm_jvp#1", torch_op=_batch_norm_op, formula=batch_norm_jvp_fast_norm,
    handfixed=batch_norm_jvp_out_of_place, formula_args=_batch_norm_args, grad_positions=(0,),
    source=f"{SRC} _norm_jvp: areAnyTensorSubclassLike({{input_t, input_p, mean_p, invstd_p}}) || "
           "input_t._is_zerotensor() ? out of place : result_t *= invstd_p; temp *= invstd_t; "
           "result_t += temp",
    schema=_BN_SCHEMA,
    make_samples=lambda: [
        Sample("4x3 train", (randn(4, 3, seed=9171), None, None, 1e-5)),
        Sample("2x3x5 train", (randn(2, 3, 5, seed=9172), None, None, 1e-5)),
    ],
    notes="temp = input_p - mean_p is primal-only and takes the tangent invstd_t; result_t is "
          "tangent-only and takes the primal invstd_p.",
    hazard=("tangents", "primals"), inplace_ops=("mul_", "add_"))


def _layer_norm_op(x, weight, bias, eps):
    return torch.native_layer_norm(x, list(weight.shape), weight, bias, eps)


_register(
    "_affine_jvp#1", torch_op=_layer_norm_op, formula=layer_norm_jvp_fast_affine_weight,
    handfixed=layer_norm_jvp_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0]), a[1], _t(t, 1, a[1]), a[2], _t(t, 2, a[2]),
                                  o[1], o[2], list(a[1].shape)),
    grad_positions=(0, 1, 2),
    source=f"{SRC} _affine_jvp (weight): areAnyTensorSubclassLike({{input_p, input_t, weight_p, "
           "weight_t}}) || zerotensors ? out of place : input_t *= weight_p; temp = input_p; "
           "temp *= weight_t; input_t += temp",
    schema="(Tensor input_p, Tensor input_t, Tensor? weight_p, Tensor? weight_t, Tensor? bias_p, "
           "Tensor? bias_t, Tensor saved_mean, Tensor saved_invstd, SymInt[] normalized_shape) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 affine", (randn(3, 4, seed=9181), randn(4, seed=9182),
                                      randn(4, seed=9183), 1e-5), diff=(0, 1, 2)),
        Sample("2x3x4 affine (3,4)", (randn(2, 3, 4, seed=9184), randn(3, 4, seed=9185),
                                              randn(3, 4, seed=9186), 1e-5), diff=(0, 1, 2)),
    ],
    notes="temp aliases the primal result_p (fresh in every caller) and takes weight_t.",
    hazard=("tangents",), inplace_ops=("mul_", "add_"))

_register(
    "_affine_jvp#2", torch_op=_batch_norm_op, formula=batch_norm_jvp_fast_affine_bias,
    handfixed=batch_norm_jvp_out_of_place, formula_args=_batch_norm_args, grad_positions=(0, 1, 2),
    source=f"{SRC} _affine_jvp (bias): areAnyTensorSubclassLike({{input_t, bias_t}}) || "
           "input_t._is_zerotensor() ? input_t = input_t + bias_t : input_t += bias_t",
    schema=_BN_SCHEMA,
    make_samples=lambda: [
        Sample("4x3 train affine", (randn(4, 3, seed=9191), randn(3, seed=9192),
                                            randn(3, seed=9193), 1e-5), diff=(0, 1, 2)),
        Sample("2x3x5 train affine", (randn(2, 3, 5, seed=9194), randn(3, seed=9195),
                                              randn(3, seed=9196), 1e-5), diff=(0, 1, 2)),
    ],
    notes="The target input_t carries the input tangent, batched whenever bias_t or a primal is; "
          "core's _is_zerotensor() guard covers the one hazardous case (no input tangent).",
    hazard=(), inplace_ops=("add_",))


def _rms_norm_op(x, weight, eps):
    return internals.fused_rms_norm(x, list(weight.shape), weight, eps)


def _rms_samples():
    return [
        Sample("3x4 weight", (randn(3, 4, seed=9201), randn(4, seed=9202), 1e-5), diff=(0, 1)),
        Sample("2x3x4 weight (3,4)", (randn(2, 3, 4, seed=9203), randn(3, 4, seed=9204), 1e-5),
                       diff=(0, 1)),
    ]


_RMS_SCHEMA = ("(Tensor input_p, Tensor input_t, Tensor? weight_p, Tensor? weight_t, "
               "Tensor saved_rstd, int[] normalized_shape) -> Tensor")
_rms_args = lambda a, o, t: (a[0], _t(t, 0, a[0]), a[1], _t(t, 1, a[1]), o[1], list(a[1].shape))  # noqa: E731
_register(
    "rms_norm_jvp#1", torch_op=_rms_norm_op, formula=rms_norm_jvp_fast_rstd,
    handfixed=rms_norm_jvp_out_of_place, formula_args=_rms_args, grad_positions=(0, 1),
    source=f"{SRC} rms_norm_jvp (rstd_t): areAnyTensorSubclassLike({{input_t, input_p, rstd_p}}) || "
           "input_t._is_zerotensor() ? out of place : rstd_t = input_t * input_p; rstd_t *= -rstd_p.pow(3)",
    schema=_RMS_SCHEMA, make_samples=_rms_samples,
    notes="torch_op is aten._fused_rms_norm (via funcbwd.internals): F.rms_norm decomposes on CPU. "
          "The target input_t * input_p carries both batch dims.",
    hazard=(), inplace_ops=("mul_",))

_register(
    "rms_norm_jvp#2", torch_op=_rms_norm_op, formula=rms_norm_jvp_fast_result,
    handfixed=rms_norm_jvp_out_of_place, formula_args=_rms_args, grad_positions=(0, 1),
    source=f"{SRC} rms_norm_jvp (result_t): areAnyTensorSubclassLike({{input_t, input_p, rstd_p}}) || "
           "input_t._is_zerotensor() ? out of place : result_t = input_t * rstd_p; result_t += temp",
    schema=_RMS_SCHEMA, make_samples=_rms_samples,
    notes="torch_op is aten._fused_rms_norm (via funcbwd.internals). The target input_t * rstd_p "
          "carries both batch dims.",
    hazard=(), inplace_ops=("add_",))

_register(
    "rms_norm_rstd_jvp#1", torch_op=_rms_norm_op, formula=rms_norm_rstd_jvp_fast,
    handfixed=rms_norm_rstd_jvp_out_of_place,
    formula_args=lambda a, o, t: (a[0], _t(t, 0, a[0]), o[1], list(a[1].shape)), grad_positions=(0,),
    diff_outputs=(1,),
    source=f"{SRC} rms_norm_rstd_jvp: areAnyTensorSubclassLike({{input_t, input_p, rstd_p}}) || "
           "input_t._is_zerotensor() ? out of place : rstd_t = input_t * input_p; rstd_t *= -rstd_p.pow(3)",
    schema="(Tensor input_p, Tensor input_t, Tensor saved_rstd, int[] normalized_shape) -> Tensor",
    make_samples=lambda: [
        Sample("3x4", (randn(3, 4, seed=9211), randn(4, seed=9212), 1e-5)),
        Sample("2x3x4 (3,4)", (randn(2, 3, 4, seed=9213), randn(3, 4, seed=9214), 1e-5)),
    ],
    notes="torch_op is aten._fused_rms_norm (via funcbwd.internals); its rstd output (index 1).",
    hazard=(), inplace_ops=("mul_",))
