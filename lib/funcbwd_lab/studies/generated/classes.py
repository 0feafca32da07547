"""Issue 37's classes of bugs, each recognized in a checked cell of a generated program.

A class is a predicate on (program record, cell record): the program has the class's feature
and the cell shows the class's signature (an entry point, a verdict, a call, words of the
error). :func:`found` counts, for a run's records, the programs and cells each class is seen
in; docs/generated.md renders that for the seeded subset (what ``make test`` finds).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

Record = dict
Cell = dict


def _has(program: dict, *features: str) -> bool:
    return any(f in program["features"] for f in features)


@dataclasses.dataclass(frozen=True)
class BugClass:
    name: str  # issue 37's words
    seen: Callable[[dict, Cell], bool]  # (program record, cell)


CLASSES = [
    BugClass("1. `torch.no_grad()` (or another grad-mode switch) inside a decorated function is "
             "dropped", lambda p, c: _has(p, "grad_mode") and c["entry"] == "functionalized"
             and c["verdict"] == "wrong" and c["plain"] in ("pass", "raised")),
    BugClass("2. captured tensors, floats, ints and dict entries are baked into the cached graph",
             lambda p, c: _has(p, "captured") and c["entry"] == "functionalized"
             and c["verdict"] in ("wrong", "regression") and c["call"] == 2),
    BugClass("3. a decorated function calling another decorated function hangs",
             lambda p, c: _has(p, "nested") and c["verdict"] == "hang"),
    BugClass("4-5. caller-owned state (buffers, dicts, module buffers) written per sample is "
             "neither refused nor done as the loop does it",
             lambda p, c: _has(p, "buffer", "module") and c["entry"] in ("vmap", "allow_inplace")
             and c["verdict"] == "wrong"),
    BugClass("6. a custom Function: torch's error, no word from funcbwd",
             lambda p, c: _has(p, "function_new", "function_old")
             and c["verdict"] in ("unclear_error", "regression")
             and any(w in c["detail"] for w in ("vmap support", "custom_function_call",
                                               "setup_context"))),
    BugClass("7. a call (even one that raises) leaves the random state changed",
             lambda p, c: c["verdict"] == "wrong" and "random state" in c["detail"]),
    BugClass("10. under `torch.inference_mode()` around the call: wrong or refused where plain "
             "torch.func passes", lambda p, c: "inference_mode" in p["around"]
             and c["verdict"] in ("wrong", "regression")),
    BugClass("10. writes through `.data`, `.detach()` or after `detach_()` are differentiated",
             lambda p, c: _has(p, "detach") and c["entry"] == "functionalized"
             and c["verdict"] == "wrong" and c["plain"] == "pass"),
    BugClass("10. `if x.requires_grad:` is decided at trace time",
             lambda p, c: _has(p, "requires_grad_read") and c["entry"] == "functionalized"
             and c["verdict"] == "wrong" and c["plain"] == "pass"),
    BugClass("10. what worked is remembered by `id()` (a closure built anew, second call)",
             lambda p, c: _has(p, "closure") and not _has(p, "captured")
             and c["verdict"] == "wrong" and c["call"] == 2),
    BugClass("new: raises where plain torch.func passes (e.g. an INTERNAL ASSERT on the "
             "decorator's second call under hessian)", lambda p, c: c["verdict"] == "regression"),
    BugClass("new: a per-sample value stored into a caller's dict escapes the transform",
             lambda p, c: "escaped tensor" in c["detail"]),
]


def found(programs: list[tuple[dict, list[dict]]]) -> list[tuple[str, int, int]]:
    """(class, programs, cells) for each class of :data:`CLASSES` over (program record, its
    cells) pairs (:func:`funcbwd_lab.studies.generated.report.outside`)."""
    out = []
    for bug in CLASSES:
        hits = [sum(bug.seen(p, c) for c in cells) for p, cells in programs]
        out.append((bug.name, sum(h > 0 for h in hits), sum(hits)))
    return out
