"""Ops: the legacy formulas, the specs tying them to torch ops, and the autograd ops running them.

Importing this package registers every built-in op (the 8 test ops, the extended corpus, the live
sites of today's core) and any plugin modules; :mod:`funcbwd.ops.registry` holds the registry.
"""

from funcbwd.ops import corpus, test_ops  # noqa: F401  (registrations)
from funcbwd.ops.registry import (TEST_OPS, OpSpec, Sample, all_ops, get_op, op_names, register,
                                  validate_sample)

__all__ = ["TEST_OPS", "OpSpec", "Sample", "all_ops", "get_op", "op_names", "register",
           "validate_sample"]
