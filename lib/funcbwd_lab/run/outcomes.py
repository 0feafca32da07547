"""What a cell's outcome can be, and how a failure is classified.

:data:`STATUSES` and :data:`REASONS` are the vocabulary of every table; :func:`classify` maps an
exception to a reason from its message; :func:`fallback_ops` is the one parser of vmap's
"performance drop ... batching rule for <op>" warnings (the slow per-sample fallback) and
:func:`fallbacks_seen` the one way to collect them, from Python warnings and from the C++ stderr.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from typing import Iterable, Iterator
import warnings

from funcbwd.internals import FALLBACK_RE as _FALLBACK_RE, fallback_ops  # noqa: F401

#: "uninformative": it passed, but an all-zeros result would pass the same check (torch's answer
#: is zero there): no evidence, never counted as a pass or a fix
STATUSES = ("pass", "fail", "mismatch", "timeout", "uninformative", "not_applicable")
REASONS = {
    "vmap_inplace": "vmap in-place error: an unbatched in-place target received a batched tensor",
    "inplace_shape": "in-place shape error: an in-place op's unbatched output cannot hold the batched "
                     "result (output with shape [..] doesn't match the broadcast shape [B, ..])",
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



@dataclasses.dataclass
class Fallbacks:
    """What :func:`fallbacks_seen` saw: ``ops`` once the block has exited."""

    ops: list[str] = dataclasses.field(default_factory=list)


@contextlib.contextmanager
def fallbacks_seen() -> Iterator[Fallbacks]:
    """Every slow-fallback warning raised inside the block, wherever the op was called from.

    vmap's fallback warns through torch's C++ warning handler: called from Python code it becomes
    a Python warning, but an op called from C++ (an ``OpOverload`` in an FX graph, a C++ autograd
    node) prints it to the process's stderr (fd 2), where ``warnings`` never sees it. So both are
    captured: Python warnings (``record=True``, "always") and fd 2, redirected into a temporary file
    for the block; captured stderr lines that are not fallback warnings are written back to stderr
    afterwards. Process-global (fd 2, the warnings filters): callers run one block at a time."""
    seen = Fallbacks()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(tmp.fileno(), 2)
        try:
            yield seen
        finally:
            try:
                sys.stderr.flush()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            tmp.seek(0)
            lines = tmp.read().decode(errors="replace").splitlines()
            seen.ops = sorted(set(fallback_ops(caught)) | set(fallback_ops(lines)))
            rest = [line for line in lines if not _FALLBACK_RE.search(line)]
            if rest:
                sys.stderr.write("\n".join(rest) + "\n")


#: the reasons that are an in-place write meeting vmap: vmap's own in-place error, and the shape
#: error of an in-place op whose unbatched output cannot hold the batched result
INPLACE_REASONS = ("vmap_inplace", "inplace_shape")
_INPLACE_SHAPE_RE = re.compile(r"output with shape \[[^\]]*\] doesn't match the broadcast shape")


def is_inplace(reason: str, message: str = "") -> bool:
    """Whether a failure is an in-place write meeting vmap (:data:`INPLACE_REASONS`); ``message``
    re-reads records saved before the shape error had its own reason ("other")."""
    return reason in INPLACE_REASONS or (reason == "other" and bool(_INPLACE_SHAPE_RE.search(message)))


def classify(exc: BaseException) -> str:
    """The :data:`REASONS` key for a failure, read from the exception's message."""
    if type(exc).__name__ == "ReferenceFailed":
        return "reference_failed"
    msg = str(exc)
    if "inplace arithmetic" in msg or re.search(r"vmap: \S+_\(self, \*extra_args\) is not possible", msg):
        return "vmap_inplace"
    if _INPLACE_SHAPE_RE.search(msg):
        return "inplace_shape"
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
