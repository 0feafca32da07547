"""torch errors funcbwd can only tell apart by their text.

A missing forward-mode formula is raised as a plain ``NotImplementedError`` (or ``RuntimeError``
from some kernels) with no type, attribute or op name of its own: torch's message is the only
signal that the failure is forward AD's, not the function's. It is matched here, in one place,
so a torch upgrade that rewords it touches this file only (tests/test_tool_eager.py fails then).
"""

from __future__ import annotations

#: torch's wordings of "this op has no forward-mode (jvp) formula"
_FORWARD_AD_MISSING = (
    "Trying to use forward AD with",  # torch/csrc/autograd/FunctionsManual: not implemented yet
    "forward-mode AD is not implemented",
    "jvp is not implemented",         # a custom Function without a jvp staticmethod
)


def forward_ad_missing(error: BaseException) -> bool:
    """True for torch's error saying an op (or custom Function) has no forward-mode formula: the
    grad transforms' eager stage (:mod:`funcbwd.eager`) computes ``J v`` by reverse mode then."""
    if not isinstance(error, (RuntimeError, NotImplementedError)):
        return False
    text = str(error)
    return any(m in text for m in _FORWARD_AD_MISSING)
