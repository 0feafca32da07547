"""The "live" corpus, forward-mode part: in-place fast paths that PyTorch core still takes today.

``torch/csrc/autograd/FunctionsManual.cpp`` (pytorch/pytorch at commit
002ca6715ba1ab4d2369262b487eeb30bf249911) keeps hand-written branches in its forward-mode (JVP)
helpers: ``areAnyTensorSubclassLike(...)`` / ``isTensorSubclassLike(...)`` picks an out-of-place
path for tensor subclasses (functorch's BatchedTensor, CompositeCompliance tensors, ...) and an
in-place *fast path* for plain tensors. Each guarded branch is one **site**, registered here as
one :class:`funcbwd_lab.ops.registry.OpSpec` with ``group="live"`` and ``kind="jvp"``.

Naming: site ``<C++ function>#<k>`` (as in docs/live-sites.md), ``k`` counting the guarded
branches of that function from the top of its body, is registered as op
``live_<C++ function>_<k>`` (``live_norm_jvp_1`` is the ``p == 1`` branch, ``live_norm_jvp_2``
the ``p == inf`` one; an identifier, so the composite strategy can make it a ``torch.library``
op). The forward use of ``differential_analytic_matrix_function#1`` (a site counted once, as a
backward site) is the extra op ``live_linalg_matrix_exp_differential_jvp_1``
(``Site.counted`` False). :data:`SITES` maps op names to :class:`funcbwd_lab.ops.live.common.Site`.

The helpers are re-created, each family with its registrations right below it (through
:func:`funcbwd_lab.ops.live.common.register_jvp_site`), in :mod:`funcbwd_lab.ops.live.jvp_reductions`
(norm_jvp, logcumsumexp_jvp, logsumexp_jvp), :mod:`funcbwd_lab.ops.live.jvp_linalg`
(householder_product_jvp, the forward use of matrix_exp's helper) and
:mod:`funcbwd_lab.ops.live.jvp_normalization` (the norm family); importing this module imports them in
that order (the registry's order).

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

# The families, in registration order (do not reorder: saved data lists ops in registry order).
from funcbwd_lab.ops.live import jvp_reductions  # noqa: F401  norm_jvp#1-2, logcumsumexp_jvp#1, logsumexp_jvp#1
from funcbwd_lab.ops.live import jvp_linalg  # noqa: F401  householder_product_jvp#1, matrix_exp (forward use)
from funcbwd_lab.ops.live import jvp_normalization  # noqa: F401  _invstd/_norm/_affine_jvp, rms_norm*_jvp
from funcbwd_lab.ops.live.common import JVP_SITE_NAMES, JVP_SITES, SITE_INPLACE_OPS, VMAP_HAZARD  # noqa: F401
from funcbwd_lab.ops.live.jvp_reductions import norm_jvp_fast  # noqa: F401  (re-exported for tests and views)

#: jvp site op names, in registration order
SITE_NAMES = JVP_SITE_NAMES
#: op name -> Site (kind "jvp"; ``fast_calls`` are the site's in-place aten ops)
SITES = JVP_SITES
