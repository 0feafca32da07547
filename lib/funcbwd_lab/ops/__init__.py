"""Ops: the legacy formulas, the modern ones, the specs tying them to torch ops, and the autograd
ops running them.

Importing this package registers every built-in op and any plugin modules;
:mod:`funcbwd_lab.ops.registry` holds the registry. One module per op or family holds the whole
story of its ops on one screen: the citations, the legacy formula, the modern formula right below
it (``OpSpec.handfixed``) and the registration(s):

* :mod:`funcbwd_lab.ops.corpus`: the extended corpus and the negative controls (groups ``extended``,
  ``negative_control``);
* :mod:`funcbwd_lab.ops.live`: the sites of today's core (group ``live``, opt-in: registered, but not
  in the default op set, ``registry.OPT_IN_GROUPS``); each helper holds both branches;
* :mod:`funcbwd_lab.ops.discussion`: the 8 test ops of the design discussion (functorch#241, group
  ``test``).

A legacy formula follows the historical C++ (PyTorch ~1.10/1.11) line for line, including the
in-place op (or ``.item()``) that broke ``vmap(vjp(f))``. A modern formula has exactly the legacy
formula's signature and computes the same gradient the way core does today: the branch core takes
for tensor-subclass-like inputs (out of place), the out-of-place decomposition core registers
(torch/_decomp), or the override functorch installs under transforms; it mutates no tensor and
reads no tensor data into Python (``tests/test_handfixed.py`` checks both).

The three packages register in the order imported below, which is the registry's order (saved
data and notebooks list ops in it): do not reorder.
"""

from funcbwd_lab.ops import corpus  # noqa: F401  (registrations, in registry order)
from funcbwd_lab.ops import live  # noqa: F401
from funcbwd_lab.ops import discussion  # noqa: F401
from funcbwd_lab.ops.registry import (OPT_IN_GROUPS, TEST_OPS, OpSpec, Sample, all_ops, get_op, groups,
                                  op_names, register, validate_sample)

__all__ = ["OPT_IN_GROUPS", "TEST_OPS", "OpSpec", "Sample", "all_ops", "get_op", "groups", "op_names",
           "register", "validate_sample"]
