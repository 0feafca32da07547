"""The 8 test ops of the design discussion (functorch#241), one module per op or shared formula.

Each module holds, in this order, the citations (the C++ file and helper, the historical in-place
line, the PR that fixed it in core), the legacy formula, the modern formula right below it (core's
out-of-place formula today, ``OpSpec.handfixed``), and the registration(s):

* :mod:`.diag`, :mod:`.index_select`, :mod:`.masked_select`, :mod:`.clamp`, :mod:`.prod`;
* :mod:`.value_selecting`: topk, sort and mode, which share ``value_selecting_reduction_backward``.

Importing the package registers them, in this order (the registry's order: saved data and
notebooks list ops in it).
"""

from funcbwd_lab.ops.discussion import diag  # noqa: F401  (registrations, in registry order)
from funcbwd_lab.ops.discussion import index_select  # noqa: F401
from funcbwd_lab.ops.discussion import value_selecting  # noqa: F401  (topk, sort, mode)
from funcbwd_lab.ops.discussion import masked_select  # noqa: F401
from funcbwd_lab.ops.discussion import clamp  # noqa: F401
from funcbwd_lab.ops.discussion import prod  # noqa: F401
