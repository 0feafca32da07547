"""Why a functionalizing strategy regresses a cell that ``builtin`` passes: reviewed data, one
entry per known cause, each with its reason and where it is shown (a test, a torch-only repro).

A regression matches an entry when its strategy, composition and op are among the entry's and its
message contains the entry's ``message``; a regression no entry matches is *unexplained*, and the
summary says so (:func:`explain`). An entry explains; it never turns a regression into a pass.
Only causes that still hold are listed: a bug of ours the sweep found is fixed, with its test
(tests/test_sweep_regressions.py), not kept here, where it would explain away its own return.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Cause:
    key: str
    strategies: tuple[str, ...]
    compositions: tuple[str, ...]
    ops: tuple[str, ...]
    message: str  # a substring of the regression's message
    kind: str  # "torch": a limitation or bug of torch 2.13
    reason: str
    shown_by: str

    def matches(self, r: dict[str, Any]) -> bool:
        op, _, _, comp = r["cell"]
        return (r["strategy"] in self.strategies and comp in self.compositions and op in self.ops
                and self.message in r["message"])


#: the real and Hermitian FFTs, whose backward writes into a slice of a complex tensor
FFT = ("fft.hfft", "fft.hfft2", "fft.hfftn", "fft.ihfft", "fft.ihfft2", "fft.ihfftn", "fft.irfft",
           "fft.irfft2", "fft.irfftn", "fft.rfft", "fft.rfft2", "fft.rfftn")

CAUSES: tuple[Cause, ...] = (
    Cause("copy_has_no_derivative", ("whole", "hooks"), ("vmapvjpvjp",),
          ("as_strided", "as_strided_copy", "nn.functional.pad.circular"),
          "derivative for aten::copy is not implemented", "torch",
          "functionalizing a backward that writes with copy_ emits the out-of-place aten::copy, which "
          "torch 2.13 cannot differentiate again (no backward formula); eager's copy_ has one",
          "tests/test_sweep_regressions.py::test_functionalized_copy_has_no_derivative_in_torch"),
    Cause("copy_has_no_forward_ad", ("whole", "hooks"), ("vmapjvpvjp",),
          ("as_strided", "as_strided_copy", "nn.functional.pad.circular", "stft") + FFT,
          "Trying to use forward AD with aten::copy", "torch",
          "the same aten::copy has no forward-mode formula either, so a jvp of the functionalized "
          "backward fails; traced_backward elides its copies and passes these cells",
          "tests/test_sweep_regressions.py::test_functionalized_copy_has_no_derivative_in_torch"),
    Cause("complex_slice_scatter", ("whole", "hooks", "traced_backward"), ("vmapvjpvjp",),
          ("stft",) + FFT, "slice_scatter does not support automatic differentiation", "torch",
          "the backward of stft and of the real/Hermitian FFTs writes into a slice, which "
          "functionalization turns into slice_scatter; torch 2.13 refuses to differentiate slice_scatter for complex outputs",
          "tests/test_sweep_regressions.py::test_functionalized_copy_has_no_derivative_in_torch"),
)


def cause_of(r: dict[str, Any], causes: Sequence[Cause] = CAUSES) -> Cause | None:
    return next((c for c in causes if c.matches(r)), None)


def explain(regressions: Iterable[dict[str, Any]], causes: Sequence[Cause] = CAUSES
            ) -> dict[str, list[dict[str, Any]]]:
    """cause key (or ``"unexplained"``) -> the regressions it explains."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in regressions:
        c = cause_of(r, causes)
        out.setdefault(c.key if c else "unexplained", []).append(r)
    return out


def by_key(causes: Sequence[Cause] = CAUSES) -> dict[str, Cause]:
    return {c.key: c for c in causes}
