"""funcbwd: how should backward formulas that use in-place ops be functionalized so that
``vmap(vjp(f))`` works? A library and workbench that answers it with computed evidence.

The public face for formula authors: :class:`OpSpec`, :class:`Sample`, :func:`register` and the
helpers in :mod:`funcbwd.ops.helpers`; ``funcbwd.legacy.<op>(...)`` calls a registered op with its
legacy formula as the backward. The packages, bottom to top: ``ops`` -> ``strategies`` -> ``run``
-> ``observe``/``measure`` -> ``views`` -> ``cli`` (see README, "How the code is laid out").
"""

from funcbwd.errors import BadInputError, FuncbwdError, NotApplicableError, UnknownNameError
from funcbwd.ops import helpers
from funcbwd.ops import legacy_ops as legacy
from funcbwd.ops.registry import OpSpec, Sample, get_op, op_names, register
from funcbwd.strategies import get_strategy

__all__ = [
    "OpSpec", "Sample", "register", "get_op", "op_names", "helpers", "legacy", "get_strategy",
    "FuncbwdError", "UnknownNameError", "BadInputError", "NotApplicableError",
]
__version__ = "0.1.0"
