"""functorch's own expected failures for its composition tests, as reviewed data with their source.

PyTorch's ``test/functorch/test_ops.py`` runs each OpInfo through compositions of transforms
(``test_vmapvjp``, ``test_vmapvjpvjp``, ``test_vmapjvpvjp``, ``test_vmapjvpall``, ``test_vjpvmap``,
``test_vmapvjp_has_batch_rule``) and marks the ops it expects to fail with ``skipOps(test_case,
test_name, {xfail(op, variant), skip(...), decorate(...)})``, usually as a shared set (``vjp_fail``,
``vmapvjp_fail``, ``vmapjvpall_fail``) united with the test's own entries. This module gives:

* :data:`SOURCE`: which file and commit the data was transcribed from;
* :data:`ENTRIES`: one :class:`Entry` per (test, op, variant, kind) for the six tests above, built
  from the per-set table in :mod:`funcbwd_lab.studies.coverage.upstream_sets` by the unions upstream
  writes (:data:`USES`). Sets used only by other tests (``test_grad``, ``test_vjp``,
  ``test_vmapjvpall_has_batch_rule``, ...) are not attributed to these tests;
* :data:`TOLERANCES`: the float32 tolerance overrides those tests declare;
* :func:`expectation`: what upstream expects of an op in a test on a Linux CPU machine.

An entry that upstream lists twice for one test (once in a shared set and once in the test's own
set, e.g. ``xfail("narrow")`` in ``test_vmapvjp_has_batch_rule``) is one :class:`Entry` whose
``lines``/``sets`` name every occurrence; its ``reason`` joins the distinct comments with " | ", and
its ``device_type`` is None if any occurrence applies to every device (upstream applies both).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from funcbwd_lab.studies.coverage.upstream_sets import SECTIONS, SET_LINES, SETS, TOLERANCE_ROWS

SOURCE = {
    "repo": "pytorch/pytorch",
    "path": "test/functorch/test_ops.py",
    "commit": "28a580b0d22161650a6f4131276dddbf3a4699f4",
    "date": None,  # not known: the index that served the file gives no date
    "helpers": {"path": "test/functorch/common_utils.py",
                "commit": "1ed400c2f1671d3ffb381f16c643665e0648a363"},
    "note": ("The stored version may predate torch 2.13: it still names the OpInfo "
             "linalg.det/singular, which torch 2.13's op_db no longer has, and mentions "
             "_batch_norm_with_update (added in 2024), so it is from 2024 or later but before that "
             "removal. Verdicts on torch 2.13 must be measured, not read off this list."),
}

#: the tests this data covers, and the sets each one applies (in upstream's union order)
USES: dict[str, tuple[str, ...]] = {
    "test_vmapvjp": ("vjp_fail", "vmapvjp_fail", "test_vmapvjp"),
    "test_vmapvjpvjp": ("vjp_fail", "test_vmapvjpvjp", "test_vmapvjpvjp#2"),
    "test_vmapjvpvjp": ("vjp_fail", "test_vmapjvpvjp"),
    "test_vmapjvpall": ("vmapjvpall_fail", "test_vmapjvpall"),
    "test_vjpvmap": ("vjp_fail", "test_vjpvmap"),
    "test_vmapvjp_has_batch_rule": ("vjp_fail", "vmapvjp_fail", "test_vmapvjp_has_batch_rule"),
}
TESTS = tuple(USES)

#: OpInfos the stored file names that torch 2.13's op_db does not have, with why
NOT_IN_TORCH_2_13: dict[tuple[str, str], str] = {
    ("linalg.det", "singular"): "the OpInfo variant was removed from torch's op_db before torch 2.13 "
                                "(the stored test file predates the removal)",
}
#: OpInfos of torch.testing._internal.autograd_function_db (not op_db) that the entries name
AUTOGRAD_FUNCTION_OPS = ("NumpyCubeNotComposableAutogradFunction", "NumpyExpMarkDirtyAutogradFunction")

#: what each decorator of a ``decorate`` entry does on a Linux CPU machine without ROCm
#: (torch.testing._internal.common_utils: runOnRocm raises SkipTest unless TEST_WITH_ROCM)
DECORATOR_ON_LINUX_CPU: dict[str, str] = {
    "skipIfRocm": "none",
    "runOnRocm": "skip",
    "expectedFailureIf(IS_MACOS and IS_X86)": "none",
    "expectedFailureIf(TEST_WITH_ROCM)": "none",
}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One upstream expectation: ``kind`` of ``op``/``variant`` in ``test`` (see the module doc)."""

    test: str
    op: str
    variant: str
    kind: str  # "xfail" | "skip" | "decorator"
    reason: str  # upstream's comment next to the entry, verbatim; "" if none
    reason_where: str  # "inline" | "above" | ""
    line: int  # first occurrence: the line of test_ops.py where the entry's call opens
    lines: tuple[int, ...]  # every occurrence
    sets: tuple[str, ...]  # the set of each occurrence
    device_type: Optional[str] = None
    dtypes: Optional[tuple[str, ...]] = None
    decorator: Optional[str] = None
    group: str = ""  # the comment heading the (reviewed) run of entries, for an uncommented one
    section: str = ""  # upstream's dashed section header ("ALLOWED FAILURES: ...", "BUGS: ...")

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.test, self.op, self.variant, self.kind)

    def on_linux_cpu(self) -> str:
        """``"xfail"``, ``"skip"`` or ``"none"``: what this entry does to the test on a Linux CPU
        machine (a CUDA-only entry does nothing; a decorator per :data:`DECORATOR_ON_LINUX_CPU`)."""
        if self.device_type not in (None, "cpu"):
            return "none"
        if self.kind == "decorator":
            return DECORATOR_ON_LINUX_CPU[self.decorator or ""]
        return self.kind


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """A float32 tolerance override; ``op == "*"`` is the test-wide default."""

    test: str
    op: str
    variant: str
    atol: float
    rtol: float
    device_type: Optional[str]
    line: int


def _section(set_name: str, line: int) -> str:
    return next((title for s, a, b, title in SECTIONS if s == set_name and a <= line <= b), "")


def _build_entries() -> tuple[Entry, ...]:
    out: list[Entry] = []
    for test, sets in USES.items():
        merged: dict[tuple, list] = {}
        for set_name in sets:
            for row in SETS[set_name]:
                line, kind, op, variant, reason, where = row[:6]
                extras = row[6] if len(row) > 6 else {}
                merged.setdefault((op, variant, kind), []).append(
                    (line, set_name, reason, where, extras))
        for (op, variant, kind), occ in merged.items():
            reasons = list(dict.fromkeys(o[2] for o in occ if o[2]))
            first_where = next((o[3] for o in occ if o[2]), "")
            devices = [o[4].get("device_type") for o in occ]
            decorators = {o[4].get("decorator") for o in occ}
            dtypes = {o[4].get("dtypes") for o in occ}
            assert len(decorators) == 1 and len(dtypes) == 1, (test, op, variant, kind)
            out.append(Entry(
                test=test, op=op, variant=variant, kind=kind, reason=" | ".join(reasons),
                reason_where=first_where, line=occ[0][0], lines=tuple(o[0] for o in occ),
                sets=tuple(o[1] for o in occ),
                device_type=None if None in devices else devices[0],
                dtypes=dtypes.pop(), decorator=decorators.pop(),
                group=next((o[4]["group"] for o in occ if o[4].get("group")), ""),
                section=_section(occ[0][1], occ[0][0])))
    return tuple(out)


ENTRIES: tuple[Entry, ...] = _build_entries()
TOLERANCES: tuple[Tolerance, ...] = tuple(
    Tolerance(test, op, variant, atol, rtol, device, line)
    for line, test, op, variant, atol, rtol, device in TOLERANCE_ROWS)


def entries_for(test: str) -> tuple[Entry, ...]:
    """Every entry upstream applies to ``test`` (one of :data:`TESTS`)."""
    if test not in USES:
        from funcbwd.errors import UnknownNameError

        raise UnknownNameError("functorch test", test, list(USES))
    return tuple(e for e in ENTRIES if e.test == test)


def expectation(test: str, op: str, variant: str = "") -> Optional[Entry]:
    """The entry that decides ``op``/``variant`` in ``test`` on a Linux CPU machine (a skip wins
    over an xfail, as unittest runs a skipped test not at all), or None: upstream expects a pass."""
    hits = [e for e in entries_for(test) if e.op == op and e.variant == variant
            and e.on_linux_cpu() != "none"]
    hits.sort(key=lambda e: e.on_linux_cpu() != "skip")
    return hits[0] if hits else None


def tolerance(test: str, op: str, variant: str = "", device_type: str = "cpu") -> tuple[float, float] | None:
    """(atol, rtol) upstream uses for float32 ``op`` in ``test`` on ``device_type``: the op's own
    override, else the test-wide one, else None (torch's default float32 tolerance)."""
    own = [t for t in TOLERANCES if t.test == test and t.op == op and t.variant == variant
           and t.device_type in (None, device_type)]
    wide = [t for t in TOLERANCES if t.test == test and t.op == "*"]
    hit = (own or wide or [None])[0]
    return None if hit is None else (hit.atol, hit.rtol)


__all__ = ["SOURCE", "USES", "TESTS", "ENTRIES", "TOLERANCES", "Entry", "Tolerance", "SET_LINES",
           "NOT_IN_TORCH_2_13", "AUTOGRAD_FUNCTION_OPS", "entries_for", "expectation", "tolerance"]
