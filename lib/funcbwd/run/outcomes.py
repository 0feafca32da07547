"""What a cell's outcome can be, and how a failure is classified.

:data:`STATUSES` and :data:`REASONS` are the vocabulary of every table; :func:`classify` maps an
exception to a reason from its message; :func:`fallback_ops` is the one parser of vmap's
"performance drop ... batching rule for <op>" warnings (the slow per-sample fallback).
"""

from __future__ import annotations

import re
from typing import Iterable
import warnings

#: "uninformative": it passed, but an all-zeros result would pass the same check (torch's answer
#: is zero there): no evidence, never counted as a pass or a fix
STATUSES = ("pass", "fail", "mismatch", "timeout", "uninformative", "not_applicable")
REASONS = {
    "vmap_inplace": "vmap in-place error: an unbatched in-place target received a batched tensor",
    "data_dependent": "data-dependent shape or control flow (.item(), nonzero, masked_select)",
    "functionalization_assert": "functionalization internal assert (a non-functional tensor met a functional one)",
    "composite_decomposed": "composite op decomposed before vmap saw it",
    "no_batch_rule": "an op with no batching rule that cannot use vmap's per-sample fallback",
    "leaked_state": "the strategy left functorch/dispatch state changed",
    "no_jvp": "no forward-mode (jvp) rule",
    "mutated_input": "the strategy changed a tensor the caller owns (eager autograd does not)",
    "reference_failed": "the per-sample loop (the reference) raised: nothing to compare with",
    "legacy_wrong": "agrees with the legacy formula's loop, which disagrees with torch's own gradient",
    "other": "other error",
    "": "",
}

_FALLBACK_RE = re.compile(r"batching rule for (\w+::\w+(?:\.\w+)?)")


def fallback_ops(caught: Iterable[warnings.WarningMessage]) -> list[str]:
    """The ATen ops named by vmap's "performance drop ... batching rule for <op>" warnings."""
    return sorted({m.group(1) for w in caught for m in [_FALLBACK_RE.search(str(w.message))] if m})


def classify(exc: BaseException) -> str:
    """The :data:`REASONS` key for a failure, read from the exception's message."""
    if type(exc).__name__ == "ReferenceFailed":
        return "reference_failed"
    msg = str(exc)
    if "inplace arithmetic" in msg or re.search(r"vmap: \S+_\(self, \*extra_args\) is not possible", msg):
        return "vmap_inplace"
    if any(s in msg for s in (".item()", "data-dependent", "dynamic shape", "differently shaped",
                              "nonzero", "Cannot call sizes")):
        return "data_dependent"
    if "does not yet have a batching rule" in msg or "vmap fallback which is currently disabled" in msg:
        return "no_batch_rule"
    if "functional" in msg.lower() and ("INTERNAL ASSERT" in msg or "FunctionalTensor" in msg
                                        or "functionalization" in msg.lower()):
        return "functionalization_assert"
    if "jvp" in msg and ("not implemented" in msg.lower() or "no jvp" in msg or "forward AD" in msg):
        return "no_jvp"
    return "other"
