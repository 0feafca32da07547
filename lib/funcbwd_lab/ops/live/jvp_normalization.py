"""Live forward-mode sites of the norm family: ``_invstd_jvp#1``, ``_norm_jvp#1``,
``_affine_jvp#1-2`` and the rms_norm helpers (``rms_norm_jvp#1-2``, ``rms_norm_rstd_jvp#1``),
reached through batch_norm_jvp, layer_norm_jvp, group_norm_jvp (+ group_norm_invstd_jvp) and
rms_norm_jvp (+ rms_norm_rstd_jvp); registered right below.

Re-created from ``torch/csrc/autograd/FunctionsManual.cpp`` at pytorch/pytorch 002ca6715ba1.
``fast`` names the sites taking the in-place branch (e.g. ``frozenset({"_norm_jvp#1"})``); every
other site takes the subclass branch, so the evidence for a site is its own. The per-site entry
points (``*_fast_*`` / ``*_out_of_place``) are what the registrations use.

Conventions (fast and out-of-place entry points, registration): :mod:`funcbwd_lab.ops.live.jvp`.
"""

from __future__ import annotations

import torch

from funcbwd import internals
from funcbwd_lab.ops.live.common import SRC, randn, register_jvp_site
from funcbwd_lab.ops.live.common import tangent as _t
from funcbwd_lab.ops.registry import Sample


def _div_numel(t, numel, fast):
    # core: ``t /= numel`` on both branches; in place only in the fast-path variants here
    return t.div_(numel) if fast else t / numel


def _invstd_jvp(input_p, input_t, mean_p, invstd_p, dims, numel, keepdim, fast):
    """_invstd_jvp @ 002ca6715ba1: the jvp of ``1 / input.std(dims)``."""
    if "_invstd_jvp#1" in fast:
        invstd_t = input_t - input_t.mean(dims, True)
        invstd_t *= input_p - mean_p                               # site #1 fast path
        invstd_t *= -invstd_p.pow(3)
    else:
        invstd_t = -invstd_p.pow(3) * (input_t - input_t.mean(dims, True)) * (input_p - mean_p)
    invstd_t = invstd_t.sum(dims, keepdim)
    return _div_numel(invstd_t, numel, fast)


def _norm_jvp(input_p, input_t, mean_p, invstd_p, dims, numel, fast):
    """_norm_jvp @ 002ca6715ba1: the jvp of ``(input - mean) * invstd``."""
    invstd_t = _invstd_jvp(input_p, input_t, mean_p, invstd_p, dims, numel, True, fast)
    if "_norm_jvp#1" in fast:
        result_t = input_t - input_t.mean(dims, True)              # site #1 fast path
        result_t *= invstd_p
        temp = input_p - mean_p
        temp *= invstd_t
        result_t += temp
    else:
        result_t = (input_t - input_t.mean(dims, True)) * invstd_p + (input_p - mean_p) * invstd_t
    return result_t


def _affine_jvp(input_p, input_t, weight_p, weight_t, bias_t, fast):
    """_affine_jvp @ 002ca6715ba1: the jvp of ``input * weight + bias`` (weight/bias may be None)."""
    if weight_p is not None:
        if "_affine_jvp#1" in fast:
            input_t *= weight_p                                    # site #1 fast path
            temp = input_p                # aliases input_p, as core's `auto temp = input_p.value()`
            temp *= weight_t
            input_t += temp
        else:
            input_t = input_t * weight_p + input_p * weight_t
    if bias_t is not None:
        if "_affine_jvp#2" in fast:
            input_t += bias_t                                      # site #2 fast path
        else:
            input_t = input_t + bias_t
    return input_t


def _view(t, shape):
    return None if t is None else t.view(shape)


def batch_norm_jvp(input_p, input_t, weight_p, weight_t, bias_p, bias_t, running_mean, running_var,
                   saved_mean, saved_invstd, train, eps, *, fast=frozenset()):
    """batch_norm_jvp @ 002ca6715ba1 (native_batch_norm's result0)."""
    dims, view_size, numel = [], list(input_t.shape), 1
    for dim in range(len(view_size)):
        if dim != 1:
            numel *= input_t.size(dim)
            view_size[dim] = 1
            dims.append(dim)
    if train:
        mean_p, invstd_p = saved_mean.view(view_size), saved_invstd.view(view_size)
        result_t = _norm_jvp(input_p, input_t, mean_p, invstd_p, dims, numel, fast)
    else:
        mean_p = running_mean.view(view_size)
        invstd_p = (1 / torch.sqrt(running_var + eps)).view(view_size)
        result_t = input_t * invstd_p
    result_p = (input_p - mean_p) * invstd_p if weight_p is not None else None
    return _affine_jvp(result_p, result_t, _view(weight_p, view_size), _view(weight_t, view_size),
                       _view(bias_t, view_size), fast)


def _normalized_view_sizes(input_t, normalized_shape):
    """The loop shared by layer_norm_jvp, rms_norm_jvp and rms_norm_rstd_jvp: reduced dims, the
    statistics' view size, the affine parameters' view size, and the reduced element count."""
    dims, view_size, view_size_affine, numel = [], list(input_t.shape), list(input_t.shape), 1
    for i in range(len(view_size)):
        if i < len(view_size) - len(normalized_shape):
            view_size_affine[i] = 1
        else:
            numel *= input_t.size(i)
            view_size[i] = 1
            dims.append(i)
    return dims, view_size, view_size_affine, numel


def layer_norm_jvp(input_p, input_t, weight_p, weight_t, bias_p, bias_t, saved_mean, saved_invstd,
                   normalized_shape, *, fast=frozenset()):
    """layer_norm_jvp @ 002ca6715ba1 (native_layer_norm's result0)."""
    dims, view_size, view_size_affine, numel = _normalized_view_sizes(input_t, normalized_shape)
    mean_p, invstd_p = saved_mean.view(view_size), saved_invstd.view(view_size)
    result_t = _norm_jvp(input_p, input_t, mean_p, invstd_p, dims, numel, fast)
    result_p = (input_p - mean_p) * invstd_p if weight_p is not None else None
    return _affine_jvp(result_p, result_t, _view(weight_p, view_size_affine),
                       _view(weight_t, view_size_affine), _view(bias_t, view_size_affine), fast)


def group_norm_jvp(input_p, input_t, weight_p, weight_t, bias_p, bias_t, saved_mean, saved_invstd,
                   groups, *, fast=frozenset()):
    """group_norm_jvp @ 002ca6715ba1 (native_group_norm's result0)."""
    input_shape, N, C = input_p.shape, input_p.size(0), input_p.size(1)
    input_t_reshaped = input_t.view(1, N * groups, -1 if N else 1)
    input_p_reshaped = input_p.view(1, N * groups, -1 if N else 1)
    result_t = batch_norm_jvp(input_p_reshaped, input_t_reshaped, None, None, None, None, None, None,
                              saved_mean, saved_invstd, True, 0, fast=fast).view(input_shape)
    result_p = None
    if weight_p is not None:
        view_size = [1] * input_t_reshaped.dim()
        view_size[1] = input_t_reshaped.size(1)
        result_p = ((input_p_reshaped - saved_mean.view(view_size))
                    * saved_invstd.view(view_size)).view(input_shape)
    affine_param_shape = [1] * input_p.dim()
    affine_param_shape[1] = C
    return _affine_jvp(result_p, result_t, _view(weight_p, affine_param_shape),
                       _view(weight_t, affine_param_shape), _view(bias_t, affine_param_shape), fast)


def group_norm_invstd_jvp(input_p, input_t, mean_p, invstd_p, groups, *, fast=frozenset()):
    """group_norm_invstd_jvp @ 002ca6715ba1 (native_group_norm's result2). Core passes the tangent
    as ``_invstd_jvp``'s ``input_p`` and the primal as its ``input_t``: same value (the formula is
    symmetric in the two centred factors) but the in-place target becomes the primal one."""
    N = input_p.size(0)
    view_shape = (1, N * groups, -1 if N else 1)
    input_t_reshaped, input_p_reshaped = input_t.view(view_shape), input_p.view(view_shape)
    return _invstd_jvp(input_t_reshaped, input_p_reshaped, mean_p.view(view_shape),
                       invstd_p.view(view_shape), [2], input_t_reshaped.size(2), False,
                       fast).view_as(invstd_p)


def _rms_rstd_t(input_p, input_t, rstd_p, dims, numel, site, fast):
    if site in fast:
        rstd_t = input_t * input_p
        rstd_t *= -rstd_p.pow(3)                                   # rstd_t fast path
    else:
        rstd_t = -rstd_p.pow(3) * input_t * input_p
    rstd_t = rstd_t.sum(dims, True)
    return _div_numel(rstd_t, numel, fast)


def rms_norm_jvp(input_p, input_t, weight_p, weight_t, saved_rstd, normalized_shape, *,
                 fast=frozenset()):
    """rms_norm_jvp @ 002ca6715ba1 (_fused_rms_norm's result0): site #1 rstd_t, site #2 result_t."""
    dims, view_size, view_size_affine, numel = _normalized_view_sizes(input_t, normalized_shape)
    rstd_p = saved_rstd.view(view_size)
    rstd_t = _rms_rstd_t(input_p, input_t, rstd_p, dims, numel, "rms_norm_jvp#1", fast)
    if "rms_norm_jvp#2" in fast:
        result_t = input_t * rstd_p
        temp = input_p * rstd_t
        result_t += temp                                           # site #2 fast path
    else:
        result_t = input_t * rstd_p + input_p * rstd_t
    result_p = input_p * rstd_p if weight_p is not None else None
    return _affine_jvp(result_p, result_t, _view(weight_p, view_size_affine),
                       _view(weight_t, view_size_affine), None, fast)


def rms_norm_rstd_jvp(input_p, input_t, saved_rstd, normalized_shape, *, fast=frozenset()):
    """rms_norm_rstd_jvp @ 002ca6715ba1 (_fused_rms_norm's result1)."""
    dims, view_size, _, numel = _normalized_view_sizes(input_t, normalized_shape)
    return _rms_rstd_t(input_p, input_t, saved_rstd.view(view_size), dims, numel,
                       "rms_norm_rstd_jvp#1", fast)


# Per-site entry points (named functions, so their source can be shown).
def native_group_norm_jvp_fast_invstd(input_p, input_t, mean, rstd, groups):
    """native_group_norm result0 and result2 tangents, in-place branch at _invstd_jvp#1 only."""
    fast = frozenset({"_invstd_jvp#1"})
    return (group_norm_jvp(input_p, input_t, None, None, None, None, mean, rstd, groups, fast=fast),
            group_norm_invstd_jvp(input_p, input_t, mean, rstd, groups, fast=fast))


def native_group_norm_jvp_out_of_place(input_p, input_t, mean, rstd, groups):
    """native_group_norm result0 and result2 tangents, out of place."""
    return (group_norm_jvp(input_p, input_t, None, None, None, None, mean, rstd, groups),
            group_norm_invstd_jvp(input_p, input_t, mean, rstd, groups))


def batch_norm_jvp_fast_norm(*args):
    """batch_norm_jvp, in-place branch at _norm_jvp#1 only."""
    return batch_norm_jvp(*args, fast=frozenset({"_norm_jvp#1"}))


def batch_norm_jvp_fast_affine_bias(*args):
    """batch_norm_jvp, in-place branch at _affine_jvp#2 only."""
    return batch_norm_jvp(*args, fast=frozenset({"_affine_jvp#2"}))


def batch_norm_jvp_out_of_place(*args):
    """batch_norm_jvp, out of place."""
    return batch_norm_jvp(*args)


def layer_norm_jvp_fast_affine_weight(*args):
    """layer_norm_jvp, in-place branch at _affine_jvp#1 only."""
    return layer_norm_jvp(*args, fast=frozenset({"_affine_jvp#1"}))


def layer_norm_jvp_out_of_place(*args):
    """layer_norm_jvp, out of place."""
    return layer_norm_jvp(*args)


def rms_norm_jvp_fast_rstd(*args):
    """rms_norm_jvp, in-place branch at rms_norm_jvp#1 (rstd_t) only."""
    return rms_norm_jvp(*args, fast=frozenset({"rms_norm_jvp#1"}))


def rms_norm_jvp_fast_result(*args):
    """rms_norm_jvp, in-place branch at rms_norm_jvp#2 (result_t) only."""
    return rms_norm_jvp(*args, fast=frozenset({"rms_norm_jvp#2"}))


def rms_norm_jvp_out_of_place(*args):
    """rms_norm_jvp, out of place."""
    return rms_norm_jvp(*args)


def rms_norm_rstd_jvp_fast(*args):
    """rms_norm_rstd_jvp, in-place branch."""
    return rms_norm_rstd_jvp(*args, fast=frozenset({"rms_norm_rstd_jvp#1"}))


def rms_norm_rstd_jvp_out_of_place(*args):
    """rms_norm_rstd_jvp, out of place."""
    return rms_norm_rstd_jvp(*args)


# ================================================================== registration
def _group_norm_op(x, groups, eps):
    n, c = x.size(0), x.size(1)
    return torch.native_group_norm(x, None, None, n, c, x[0, 0].numel(), groups, eps)


register_jvp_site(
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
register_jvp_site(
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


register_jvp_site(
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

register_jvp_site(
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
register_jvp_site(
    "rms_norm_jvp#1", torch_op=_rms_norm_op, formula=rms_norm_jvp_fast_rstd,
    handfixed=rms_norm_jvp_out_of_place, formula_args=_rms_args, grad_positions=(0, 1),
    source=f"{SRC} rms_norm_jvp (rstd_t): areAnyTensorSubclassLike({{input_t, input_p, rstd_p}}) || "
           "input_t._is_zerotensor() ? out of place : rstd_t = input_t * input_p; rstd_t *= -rstd_p.pow(3)",
    schema=_RMS_SCHEMA, make_samples=_rms_samples,
    notes="torch_op is aten._fused_rms_norm (via funcbwd.internals): F.rms_norm decomposes on CPU. "
          "The target input_t * input_p carries both batch dims.",
    hazard=(), inplace_ops=("mul_",))

register_jvp_site(
    "rms_norm_jvp#2", torch_op=_rms_norm_op, formula=rms_norm_jvp_fast_result,
    handfixed=rms_norm_jvp_out_of_place, formula_args=_rms_args, grad_positions=(0, 1),
    source=f"{SRC} rms_norm_jvp (result_t): areAnyTensorSubclassLike({{input_t, input_p, rstd_p}}) || "
           "input_t._is_zerotensor() ? out of place : result_t = input_t * rstd_p; result_t += temp",
    schema=_RMS_SCHEMA, make_samples=_rms_samples,
    notes="torch_op is aten._fused_rms_norm (via funcbwd.internals). The target input_t * rstd_p "
          "carries both batch dims.",
    hazard=(), inplace_ops=("add_",))

register_jvp_site(
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
