"""The extended corpus beyond the 8 test ops, and the negative controls, one module per family.

Each module holds, per op and in this order, the citation comment (the C++ file and helper or the
derivatives.yaml entry, the historical in-place line, the PR that fixed it in core), the legacy
formula, the modern formula right below it (``OpSpec.handfixed``), and the registration:

* :mod:`.scatter_into_zeros`: gather, take, cummax / cummin, index (zeros + scatter/put);
* :mod:`.copy_into_view`: select, slice, diagonal, diag_embed, block_diag, matrix_exp
  (zeros + view + ``copy_``);
* :mod:`.fill_in_place`: trace, max / min / median, index_fill, index_copy, masked_fill;
* :mod:`.multiply_in_place`: binary_cross_entropy_with_logits;
* :mod:`.negative_controls`: norm_inf, copysign, cumprod, narrow.

Importing the package registers them, in this order (the registry's order: saved data and
notebooks list ops in it).
"""

from funcbwd_lab.ops.corpus import scatter_into_zeros  # noqa: F401  (registrations, in registry order)
from funcbwd_lab.ops.corpus import copy_into_view  # noqa: F401
from funcbwd_lab.ops.corpus import fill_in_place  # noqa: F401
from funcbwd_lab.ops.corpus import multiply_in_place  # noqa: F401
from funcbwd_lab.ops.corpus import negative_controls  # noqa: F401
