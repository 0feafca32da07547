"""Scoped, opt-in vmap rules for the ops functionalization emits that torch 2.13 cannot batch.

* :mod:`funcbwd_lab.batching.copy`: ``aten::copy`` (functionalized ``dst.copy_(src)``) has no batching
  rule and runs vmap's slow per-sample fallback;
* :mod:`funcbwd_lab.batching.as_strided_scatter`: ``aten::as_strided_scatter`` (a functionalized write
  through an ``as_strided`` view, e.g. ``as_strided``'s and circular ``pad``'s backward) has a
  batching kernel that only raises, so vmap fails.

:func:`scoped_rules` enters both for a ``with`` block. Nothing is registered process-wide by
default: outside the block vmap behaves exactly as torch does. The coverage sweep enters it around
the functionalizing strategies (``whole``, ``hooks``), never around ``builtin`` (torch as is).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

#: the rules :func:`scoped_rules` enters, as ATen op names
RULES = ("aten::copy", "aten::as_strided_scatter")


@contextlib.contextmanager
def scoped_rules() -> Iterator[tuple[str, ...]]:
    """The copy rule and the as_strided_scatter rule, registered for the block only (re-entrant;
    removed when the outermost block exits, also on error). Yields :data:`RULES`."""
    from funcbwd_lab.batching.as_strided_scatter import batched_as_strided_scatter_rule
    from funcbwd_lab.batching.copy import batched_copy_rule

    with batched_copy_rule(), batched_as_strided_scatter_rule():
        yield RULES


def rules_active() -> bool:
    """True while both rules of :func:`scoped_rules` are registered."""
    from funcbwd_lab.batching.as_strided_scatter import as_strided_scatter_rule_active
    from funcbwd_lab.batching.copy import copy_rule_active

    return copy_rule_active() and as_strided_scatter_rule_active()
