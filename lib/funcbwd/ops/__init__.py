"""Ops: the legacy formulas, the specs tying them to torch ops, and the autograd ops running them.

Importing this package registers every built-in op (the 8 test ops, the extended corpus, the live
sites of today's core) and any plugin modules; :mod:`funcbwd.ops.registry` holds the registry.
The live sites (group "live": ``live_backward``, ``live_jvp``) are opt-in: registered, but not in
the default op set (``registry.OPT_IN_GROUPS``).
"""

from funcbwd.ops import (corpus, corpus_fill_and_controls, live_backward,  # noqa: F401  (registrations)
                         live_jvp, test_ops)
from funcbwd.ops.registry import (OPT_IN_GROUPS, TEST_OPS, OpSpec, Sample, all_ops, get_op, groups,
                                  op_names, register, validate_sample)

__all__ = ["OPT_IN_GROUPS", "TEST_OPS", "OpSpec", "Sample", "all_ops", "get_op", "groups", "op_names",
           "register", "validate_sample"]
