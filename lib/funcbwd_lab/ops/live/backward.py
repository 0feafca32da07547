"""The live corpus, backward part: the 24 backward sites and 6 data-dependent controls of today's
core (docs/live-sites.md), registered as ops ``live_<cpp function>_<k>``.

Reference: ``torch/csrc/autograd/FunctionsManual.cpp`` at pytorch/pytorch commit
002ca6715ba1ab4d2369262b487eeb30bf249911 (mid-2025). There, ``isTensorSubclassLike(...)`` /
``areAnyTensorSubclassLike(...)`` chooses, per *site*, between an in-place fast path (plain
tensors) and an out-of-place path (subclass-like tensors such as functorch's BatchedTensor).
Control sites are those whose fast path uses ``masked_select``, ``nonzero``, ``.item()``,
``allclose`` or boolean-mask indexing rather than an in-place op.

Conventions of every family module below. Each helper follows ``FunctionsManual.cpp`` at that
commit line for line; "site k" comments mark the isTensorSubclassLike/areAnyTensorSubclassLike
decisions. The keyword-only ``fast`` lists the sites (1-based, in source order within the helper)
that take the in-place branch; every other site takes its out-of-place branch, and
``fast=ALL`` reproduces what core runs on plain tensors. Only the branch of each helper that
contains its site is re-created, and only real dtypes. Each module registers its sites right
below its helpers (:func:`funcbwd_lab.ops.live.common.register_site`); for a site ``f#k``:

* ``formula`` = the helper with ``fast=(k,)``: the fast path core runs on plain tensors, at this
  site only, so any failure is attributable to the site;
* ``handfixed`` = the helper with ``fast=()``: the out-of-place path core runs on subclasses;
* ``jvp`` = torch's own forward-mode rule of ``torch_op`` (not under study here).

All ops are registered with ``group="live"``, ``kind="backward"``; control sites say "negative
control: data-dependent" in ``notes``. :data:`SITES` maps op names to
:class:`funcbwd_lab.ops.live.common.Site`. Importing this module registers the families in the
order of the imports below (the registry's order).
"""

from __future__ import annotations

# The families, in registration order (do not reorder: saved data lists ops in registry order).
from funcbwd_lab.ops.live import clamp  # noqa: F401  clamp_backward#1, clamp_backward_min_max#1-2
from funcbwd_lab.ops.live import evenly_distribute  # noqa: F401  evenly_distribute_backward#1-2 (max())
from funcbwd_lab.ops.live import binary_cross_entropy  # noqa: F401  binary_cross_entropy*, ..._with_logits*
from funcbwd_lab.ops.live import eig  # noqa: F401  linalg_eig_backward#1-2
from funcbwd_lab.ops.live import matrix_exp  # noqa: F401  differential_analytic_matrix_function#1
from funcbwd_lab.ops.live import index  # noqa: F401  index_backward#1
from funcbwd_lab.ops.live import householder_product  # noqa: F401  householder_product_backward#1
from funcbwd_lab.ops.live import take  # noqa: F401  take_backward#1
from funcbwd_lab.ops.live import controls  # noqa: F401  masked_fill_backward#1, prod_backward#1-2, linalg_det_backward#1
from funcbwd_lab.ops.live.common import ALL, BACKWARD_SITES  # noqa: F401  (ALL: re-exported)
from funcbwd_lab.ops.live.eig import eig_gauge_fix, linalg_eig_backward  # noqa: F401  (re-exported)

#: op name -> Site, every backward and control site (registration order)
SITES = BACKWARD_SITES
