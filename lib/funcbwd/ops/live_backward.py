"""The live corpus, backward part: registrations of the 24 backward sites and 6 data-dependent
controls of today's core (docs/live-sites.md) as ops ``live_<cpp function>_<k>``.

Reference: ``torch/csrc/autograd/FunctionsManual.cpp`` at pytorch/pytorch commit
002ca6715ba1ab4d2369262b487eeb30bf249911 (mid-2025). There, ``isTensorSubclassLike(...)`` /
``areAnyTensorSubclassLike(...)`` chooses, per *site*, between an in-place fast path (plain
tensors) and an out-of-place path (subclass-like tensors such as functorch's BatchedTensor).
Control sites are those whose fast path uses ``masked_select``, ``nonzero``, ``.item()``,
``allclose`` or boolean-mask indexing rather than an in-place op.

The helpers themselves are re-created in :mod:`funcbwd.ops.live_backward_formulas` and
:mod:`funcbwd.ops.live_backward_linalg`, each with a keyword ``fast`` listing the sites that take
the in-place branch. For a site ``f#k``:

* ``formula`` = the helper with ``fast=(k,)``: the fast path core runs on plain tensors, at this
  site only, so any failure is attributable to the site;
* ``handfixed`` = the helper with ``fast=()``: the out-of-place path core runs on subclasses;
* ``jvp`` = torch's own forward-mode rule of ``torch_op`` (not under study here).

:data:`SITES` maps op names to :class:`funcbwd.ops.live_common.Site`. All ops are registered with
``group="live"``, ``kind="backward"``; control sites say "negative control: data-dependent" in
``notes``. Importing this module registers them.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from funcbwd.ops.live_backward_formulas import (  # noqa: F401  (ALL, formulas: re-exported)
    ALL, REDUCTIONS, binary_cross_entropy_double_backward, binary_cross_entropy_double_backward_grad_output,
    binary_cross_entropy_double_backward_target, binary_cross_entropy_target_backward,
    binary_cross_entropy_with_logits_backward, binary_cross_entropy_with_logits_target_backward,
    clamp_backward, clamp_backward_min_max, evenly_distribute_backward, index_backward,
    masked_fill_backward, prod_backward, prod_backward_dim, take_backward)
from funcbwd.ops.live_backward_linalg import (  # noqa: F401
    eig_formula_args, eig_gauge_fix, eig_real_views, householder_product_backward,
    linalg_det_backward, linalg_eig_backward, linalg_matrix_exp_differential)
from funcbwd.ops.live_common import COMMIT, CPP, Site, bind_fast, prob, rand, randn, torch_jvp_rule
from funcbwd.ops.registry import OpSpec, Sample, register

SITES: dict[str, Site] = {}  # op name -> Site


def _register(fn: Callable, k: int, kind: str, *, site_fn: str | None = None, torch_op: Callable,
              formula_args: Callable, grad_positions: tuple[int, ...], schema: str,
              samples: Callable[[], list], fast_calls: tuple[str, ...], fast: str, slow: str,
              fixed_by: str, diff_outputs: tuple[int, ...] = (0,), notes: str = "",
              batch_entry: Callable | None = None) -> None:
    site = Site(f"{site_fn or fn.__name__}#{k}", kind, fast_calls)
    if kind == "control":
        notes = f"negative control: data-dependent ({fast}). " + notes
    register(OpSpec(
        name=site.op_name,
        torch_op=torch_op,
        formula=bind_fast(fn, (k,), f"fast@{k}"),
        formula_args=formula_args,
        grad_positions=grad_positions,
        source=f"{CPP} {site.site_id} (pytorch@{COMMIT[:7]}): fast {fast}; out-of-place {slow}",
        fixed_by=fixed_by,
        make_samples=samples,
        schema=schema,
        diff_outputs=diff_outputs,
        jvp=torch_jvp_rule(torch_op, grad_positions),
        group="live",
        notes=notes.strip(),
        handfixed=bind_fast(fn, (), "out-of-place"),
        kind="backward",
        batch_entry=batch_entry,
    ))
    SITES[site.op_name] = site


# ------------------------------------------------------------------ seeded sample inputs
_sample = Sample


def _clamp_inputs(seed: int) -> tuple:
    """Ties with both bounds, and min > max at one position (max broadcast from (4,))."""
    x, lo, hi = randn(3, 4, seed=seed), randn(3, 4, seed=seed + 1) - 0.5, randn(4, seed=seed + 2) + 0.5
    x[0, 0] = lo[0, 0]
    x[1, 1] = hi[1]
    lo[2, 2] = hi[2] + 0.3
    return x, lo, hi


def _max_ties(seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed).clamp(-1.5, 1.5)
    x.view(-1)[[1, 6, 9]] = 2.0
    return x


def _with_nan(seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    x.view(-1)[[2, 7]] = float("nan")
    return x


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


def _index(x, *indices):
    return x[indices]


def _prod(x):
    return torch.prod(x)


def _prod_dim(x, dim, keepdim):
    return torch.prod(x, dim, keepdim)


def _with_zeros(flat: list[int], seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    x.view(-1)[flat] = 0.0
    return x


def _similar(eigs: torch.Tensor, seed: int) -> torch.Tensor:
    """A real 3x3 matrix Q B Q^-1 with block B (a diagonal, or a rotation block for a complex pair)."""
    Q = randn(3, 3, seed=seed, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    return Q @ eigs @ torch.linalg.inv(Q)


def _householder_inputs(k: int, seed: int) -> tuple:
    a, tau = torch.geqrf(randn(4, 3, seed=seed, dtype=torch.float64))
    return a, tau[:k].contiguous()


def _mask(*shape: int, seed: int) -> torch.Tensor:
    m = rand(*shape, seed=seed) > 0.5
    m.view(-1)[0], m.view(-1)[-1] = True, False  # never all-true, never all-false
    return m


# ------------------------------------------------------------------ clamp (pytorch#69534)
_CLAMP = dict(torch_op=torch.clamp, formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2]),
              fixed_by="pytorch#69534 (introduced isTensorSubclassLike; tracking pytorch#69991)")
_register(clamp_backward, 1, "backward", grad_positions=(0,),
          schema="(Tensor grad, Tensor self, Tensor min, Tensor max) -> Tensor",
          samples=lambda: [_sample("ties, min>max once, max (4,)", _clamp_inputs(301), (0,))],
          fast_calls=("logical_and_",), fast="(self >= min).logical_and_(self <= max)",
          slow="logical_and", **_CLAMP)
for _k, _call in ((1, "logical_and_"), (2, "logical_or_")):
    _register(clamp_backward_min_max, _k, "backward", grad_positions=(1, 2),
              schema="(Tensor grad, Tensor self, Tensor min, Tensor max) -> (Tensor, Tensor)",
              samples=lambda: [_sample("ties, min>max once, max (4,)", _clamp_inputs(311), (1, 2))],
              fast_calls=(_call,), fast=f"pred = ... .{_call}(...)", slow=_call[:-1], **_CLAMP,
              notes="Grads of min and max (Tensor bounds).")

# ------------------------------------------------------------------ max() (pytorch#69534)
_EVEN = dict(torch_op=torch.max, formula_args=lambda a, o, g: (g[0], a[0], o[0]), grad_positions=(0,),
             schema="(Tensor grad, Tensor input, Tensor value) -> Tensor", fixed_by="pytorch#69534",
             samples=lambda: [_sample("max tied x3", (_max_ties(321),), (0,)),
                              _sample("NaN x2 (max is NaN)", (_with_nan(322),), (0,))])
_register(evenly_distribute_backward, 1, "control", fast_calls=("item", "masked_fill_"),
          fast=".item() on value.isnan(), then new_zeros().masked_fill_(mask, ...)",
          slow="mask * (grad / mask.sum())",
          notes="Core's CPU plain-tensor branch; under cotangent-only vmap .item() reads an "
          "unbatched value, so it fails only when the primal is batched.", **_EVEN)
_register(evenly_distribute_backward, 2, "backward", fast_calls=("logical_and_",),
          fast="input_isnan.logical_and_(value_isnan)", slow="logical_and",
          notes="Core reaches this in-place branch for plain tensors on CUDA only.", **_EVEN)

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
        out = [_sample("weight (4,), mean", (p, t, rand(4, seed=seed + 2) + 0.5, "mean"), (1,)),
               _sample("weight (3,4), none", (p, t, rand(3, 4, seed=seed + 3) + 0.5, "none"), (1,))]
        return out if weighted_only else out + [_sample("no weight, sum", (p, t, None, "sum"), (1,))]
    return make


for _k, _w in ((1, False), (2, True)):
    _register(binary_cross_entropy_target_backward, _k, "backward", torch_op=_bce,
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
        out = [_sample("weight, none", (randn(3, 4, seed=seed + 3), p, t, w, "none"), (diff,)),
               _sample("weight, mean", (randn(seed=seed + 4), p, t, w, "mean"), (diff,))]
        unweighted = _sample("no weight, none", (randn(3, 4, seed=seed + 5), p, t, None, "none"), (diff,))
        return out if weighted_only else out + [unweighted]
    return make


_BCE_BW = dict(torch_op=_bce_backward, fixed_by="pytorch#70198", batch_entry=_probabilities(1, 2),
               notes="Double backward of binary_cross_entropy: torch_op is aten.binary_cross_entropy_backward.")
for _k, (_w, _call) in enumerate(((True, "res.mul_(weight)"), (False, "neg_self.mul_(self)"),
                                  (False, "res.div_(denom)")), start=1):
    _register(binary_cross_entropy_double_backward_target, _k, "backward",
              formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2], a[3], REDUCTIONS[a[4]]),
              grad_positions=(2,),
              schema="(Tensor grad, Tensor grad_output, Tensor self, Tensor target, Tensor? weight, "
              "int reduction) -> Tensor",
              samples=_bce_backward_samples(361 + 10 * _k, _w, 2),
              fast_calls=(_call.split(".")[1].split("(")[0],), fast=_call,
              slow=_call.replace("_(", "("), **_BCE_BW)
for _k, _w in ((1, False), (2, True)):
    _register(binary_cross_entropy_double_backward, _k, "backward",
              formula_args=lambda a, o, g: (a[0], g[0], a[1], a[2], a[3], REDUCTIONS[a[4]]),
              grad_positions=(1,),
              schema="(Tensor grad_output, Tensor grad, Tensor input, Tensor target, Tensor? weight, "
              "int reduction) -> Tensor",
              samples=_bce_backward_samples(401 + 10 * _k, _w, 1), fast_calls=("mul_",),
              fast="gI *= weight" if _w else "gI *= grad * grad_output", slow="gI * ...", **_BCE_BW)
    _register(binary_cross_entropy_double_backward_grad_output, _k, "backward",
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
        every = {"PW": _sample("weight, pos_weight, mean", (x, t, w, pw, "mean"), (diff,)),
                 "P": _sample("pos_weight, none", (x, t, None, pw, "none"), (diff,)),
                 "NW": _sample("weight, no pos_weight, none", (x, t, w, None, "none"), (diff,)),
                 "N": _sample("no weight, no pos_weight, sum", (x, t, None, None, "sum"), (diff,))}
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
    _register(binary_cross_entropy_with_logits_backward, _k, "backward", grad_positions=(0,),
              samples=_logits_samples(501 + 10 * _k, 0, _keep), fast_calls=_calls, fast=_fast,
              slow="the same chain out of place", fixed_by="pytorch#70198", notes=_GRADMODE, **_LOGITS)
for _k, _keep, _calls, _fast in ((1, "PW P", ("mul_", "sub_"),
                                  "log_sigmoid(-self).sub_(log_sigmoid(self).mul_(pos_weight)).mul_(grad_output)"),
                                 (2, "PW NW", ("mul_",), "grad_target.mul_(weight)")):
    _register(binary_cross_entropy_with_logits_target_backward, _k, "backward", grad_positions=(1,),
              samples=_logits_samples(551 + 10 * _k, 1, _keep), fast_calls=_calls, fast=_fast,
              slow="the same chain out of place",
              fixed_by="tracking pytorch#69991 (PR not identified; the pattern of pytorch#70198)",
              notes="Target grad of binary_cross_entropy_with_logits.", **_LOGITS)

# ------------------------------------------------------------------ linalg.eig (pytorch#79698)
def _f64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


_ROT = _f64([[1.0, -2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
_EIG = dict(torch_op=eig_real_views, diff_outputs=(0, 1),
            formula_args=eig_formula_args,
            grad_positions=(0,),
            schema="(Tensor gL, Tensor gV, Tensor L, Tensor V, bool is_hermitian, bool real_input) -> Tensor",
            samples=lambda: [
                _sample("real spectrum 1,2,4", (_similar(torch.diag(_f64([1.0, 2.0, 4.0])), 601),), (0,)),
                _sample("complex pair 1±2i, 3", (_similar(_ROT, 602),), (0,))])
_EIG_NOTE = ("Real input, complex outputs, exposed as real views (torch_op returns "
             "view_as_real(L), view_as_real(V)). The eigenvector cotangent must be gauge-invariant "
             "(Im diag(V^H gV) = 0) or torch itself raises: formula_args projects every cotangent "
             "with eig_gauge_fix, and a caller comparing with torch projects it the same way.")
_register(linalg_eig_backward, 1, "control", fast_calls=("allclose",),
          fast="TORCH_CHECK(at::allclose(imag(diag(V^H gV)), 0))", slow="no check",
          fixed_by="tracking pytorch#69991 (likely pytorch#82957 '[composite compliance] eig_backward'; not verified)",
          notes="allclose returns a Python bool from tensor data. " + _EIG_NOTE, **_EIG)
_register(linalg_eig_backward, 2, "backward", fast_calls=("copy_",),
          fast="ret.diagonal(0, -2, -1).copy_(gL)", slow="ret.diagonal_scatter(gL, 0, -2, -1)",
          fixed_by="pytorch#79698", notes=_EIG_NOTE, **_EIG)

# ------------------------------------------------------------------ matrix_exp (pytorch#81225)
_register(linalg_matrix_exp_differential, 1, "backward", site_fn="differential_analytic_matrix_function",
          torch_op=torch.linalg.matrix_exp, formula_args=lambda a, o, g: (a[0], g[0], True),
          grad_positions=(0,), schema="(Tensor self, Tensor grad, bool adjoint) -> Tensor",
          samples=lambda: [_sample("3x3", (0.5 * randn(3, 3, seed=611),), (0,)),
                           _sample("batch 2x3x3", (0.5 * randn(2, 3, 3, seed=612),), (0,))],
          fast_calls=("copy_",), fast="zeros(2n, 2n) then three narrow(...).copy_(A / A / grad)",
          slow="cat([[A, grad], [zeros_like(A), A]])", fixed_by="pytorch#81225",
          notes="Reached through linalg_matrix_exp_differential(self, grad, adjoint=true).")

# ------------------------------------------------------------------ advanced indexing (pytorch#71779)
_register(index_backward, 1, "backward", torch_op=_index,
          formula_args=lambda a, o, g: (g[0].new_zeros(a[0].shape), g[0], *a[1:]), grad_positions=(0,),
          schema="(Tensor zeros_like_self, Tensor grad, Tensor[] indices) -> Tensor",
          samples=lambda: [
              _sample("x[i], repeated rows", (randn(4, 3, seed=621), torch.tensor([1, 3, 1])), (0,)),
              _sample("x[i, j], repeated pairs", (randn(4, 3, seed=622), torch.tensor([0, 2, 2]),
                                                  torch.tensor([1, 0, 0])), (0,))],
          fast_calls=("_index_put_impl_",), fast="at::_index_put_impl_(zeros_like_self, indices, grad, true, true)",
          slow="zeros_like_self.index_put(indices, grad, true)", fixed_by="pytorch#71779",
          notes="derivatives.yaml passes grad.new_zeros(self.sizes()) as zeros_like_self (formula_args "
          "does the same), so the in-place target is batched whenever grad is.")

# ------------------------------------------------------------------ householder_product (pytorch#84180)
_register(householder_product_backward, 1, "backward", torch_op=torch.linalg.householder_product,
          formula_args=lambda a, o, g: (g[0], o[0], a[0], a[1], False), grad_positions=(0, 1),
          schema="(Tensor grad, Tensor result, Tensor input, Tensor tau, bool flip_order) -> (Tensor, Tensor)",
          samples=lambda: [_sample("geqrf 4x3, k=3", _householder_inputs(3, 631), (0, 1)),
                           _sample("geqrf 4x3, k=2", _householder_inputs(2, 632), (0, 1))],
          fast_calls=("copy_",), fast="zeros_like(input/tau), then select(-1, i).copy_(...) per column",
          slow="collect columns, then cat", fixed_by="pytorch#84180",
          notes="K itself is updated in place (sub_) whenever GradMode is off: core's grad-mode "
          "gate, not a subclass site, kept as core has it.")

# ------------------------------------------------------------------ take (pytorch#81094)
_register(take_backward, 1, "backward", torch_op=torch.take,
          formula_args=lambda a, o, g: (g[0], a[0], a[1]), grad_positions=(0,),
          schema="(Tensor grad, Tensor self, Tensor indices) -> Tensor",
          samples=lambda: [_sample("3x4, repeated flat index", (randn(3, 4, seed=641),
                                                                torch.tensor([[0, 5], [5, 11]])), (0,))],
          fast_calls=("put_",), fast="zeros_like(self).put_(indices, grad, true)",
          slow="zeros_like(self).put(indices, grad, true)", fixed_by="pytorch#81094")

# ------------------------------------------------------------------ data-dependent controls
_register(masked_fill_backward, 1, "control", torch_op=torch.masked_fill,
          formula_args=lambda a, o, g: (g[0], a[1]), grad_positions=(2,),
          schema="(Tensor grad, Tensor mask) -> Tensor",
          samples=lambda: [
              _sample("mask 3x4, value 0-dim", (randn(3, 4, seed=651), _mask(3, 4, seed=652),
                                                torch.tensor(0.7)), (2,)),
              _sample("mask (4,) broadcast", (randn(3, 4, seed=653), _mask(4, seed=654),
                                              torch.tensor(-1.2)), (2,))],
          fast_calls=("masked_select",), fast="grad.masked_select(mask).sum()",
          slow="where(mask, grad, 0).sum()", fixed_by="pytorch#83515",
          notes="Grad of masked_fill's Tensor value.")
_register(prod_backward, 1, "control", torch_op=_prod, formula_args=lambda a, o, g: (g[0], a[0], o[0]),
          grad_positions=(0,), schema="(Tensor grad, Tensor input, Tensor result) -> Tensor",
          samples=lambda: [_sample("no zeros", (_with_zeros([], 661),), (0,)),
                           _sample("one zero", (_with_zeros([5], 662),), (0,)),
                           _sample("two zeros", (_with_zeros([1, 6], 663),), (0,))],
          fast_calls=("nonzero",), fast="(input == 0).nonzero(), branch on its size",
          slow="prod_safe_zeros_backward always", fixed_by="pytorch#81969")
_register(prod_backward_dim, 2, "control", site_fn="prod_backward", torch_op=_prod_dim,
          formula_args=lambda a, o, g: (g[0], a[0], o[0], a[1], a[2]), grad_positions=(0,),
          schema="(Tensor grad, Tensor input, Tensor result, int dim, bool keepdim) -> Tensor",
          samples=lambda: [_sample("dim=1, no zeros", (_with_zeros([], 671), 1, False), (0,)),
                           _sample("dim=1, one zero", (_with_zeros([5], 672), 1, False), (0,)),
                           _sample("dim=0, two zeros, keepdim", (_with_zeros([4, 5], 673), 0, True), (0,))],
          fast_calls=("item",), fast="zero count .item<int64_t>(), branch on it",
          slow="prod_safe_zeros_backward always", fixed_by="pytorch#81969",
          notes="The prod(dim) overload; site #2 of the two prod_backward overloads.")


def _det_inputs(seed: int) -> torch.Tensor:
    """A batch of two 3x3 matrices: one invertible, one exactly singular (rank 2)."""
    ok = randn(3, 3, seed=seed, dtype=torch.float64) + 2 * torch.eye(3, dtype=torch.float64)
    singular = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=torch.float64)
    return torch.stack([ok, singular])


_register(linalg_det_backward, 1, "control", torch_op=torch.linalg.det,
          formula_args=lambda a, o, g: (g[0], o[0], a[0]), grad_positions=(0,),
          schema="(Tensor grad, Tensor det, Tensor A) -> Tensor",
          samples=lambda: [_sample("batch: invertible + singular", (_det_inputs(681),), (0,)),
                           _sample("one invertible 3x3", (_det_inputs(682)[0],), (0,))],
          fast_calls=("index_put_",),
          fast="masked_fmap(|det| < 100 eps, singular, non_singular, ...): boolean-mask index + index_put_",
          slow="the SVD-based singular formula for every matrix",
          fixed_by="tracking pytorch#69991 (masked_fmap from pytorch#80217; guard's PR not identified)",
          notes="Only in core's GradMode-enabled branch (create_graph=True, as under torch.func.vjp); "
          "the formula re-creates that branch only.")
