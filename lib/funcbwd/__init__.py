"""funcbwd: how should backward formulas that use in-place ops be functionalized so that
``vmap(vjp(f))`` works? A library and workbench that answers it with computed evidence."""

from . import catalog, legacy
from .catalog import OpSpec, Sample, get_op, op_names, register
from .errors import BadInputError, FuncbwdError, NotApplicableError, UnknownNameError
from .strategies import get_strategy

__all__ = [
    "catalog", "legacy", "get_op", "op_names", "get_strategy", "OpSpec", "Sample", "register",
    "FuncbwdError", "UnknownNameError", "BadInputError", "NotApplicableError",
]
__version__ = "0.1.0"
