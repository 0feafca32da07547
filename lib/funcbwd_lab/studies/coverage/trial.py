"""A trial of the composition builders on the ops upstream xfails as "vmap: inplace into a regular
tensor": every in_dims choice of the first samples, plain torch.func, with upstream's copies as
batch entries and with distinct entries, each choice's errors counted by kind.

``python -m funcbwd_lab.studies.coverage.trial`` prints the table (progress on stderr). The expected
value of each choice is the per-sample loop (:meth:`funcbwd_lab.run.compositions.Composition.run`); the
vmap-of-vmap check runs too. A choice fails if either raises or differs from what it must equal.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from typing import Iterable

import torch

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd_lab.run import compositions as C
from funcbwd.compare import Mismatch, check_close, max_abs_error
from funcbwd_lab.run.entries import distinct_entries
from funcbwd_lab.studies.coverage import upstream

#: (OpInfo name, variant, composition): the two layer norms and binary_cross_entropy that
#: test_vmapvjpvjp xfails, hinge_embedding_loss and mvlgamma that test_vmapjvpvjp xfails
CASES = (
    ("native_layer_norm", "", "vmapvjpvjp"),
    ("nn.functional.layer_norm", "", "vmapvjpvjp"),
    ("nn.functional.binary_cross_entropy", "", "vmapvjpvjp"),
    ("nn.functional.hinge_embedding_loss", "", "vmapjvpvjp"),
    ("mvlgamma", "mvlgamma_p_1", "vmapjvpvjp"),
    ("mvlgamma", "mvlgamma_p_3", "vmapjvpvjp"),
    ("mvlgamma", "mvlgamma_p_5", "vmapjvpvjp"),
)
#: the same ops in the other composition (where upstream expects them to pass)
CROSS = (
    ("nn.functional.binary_cross_entropy", "", "vmapjvpvjp"),
    ("nn.functional.hinge_embedding_loss", "", "vmapvjpvjp"),
    ("mvlgamma", "mvlgamma_p_1", "vmapvjpvjp"),
)


@dataclasses.dataclass
class TrialRow:
    """One (op, composition, entries kind) over the first samples."""

    op: str
    composition: str
    entries: str  # "copies" | "distinct"
    choices: int = 0
    failed: int = 0
    errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    upstream: str = ""  # what test_ops.py expects (kind: reason)
    loop_raises: int = 0  # choices vmap ran but whose unbatched composition raises
    max_mismatch: float = 0.0  # largest |vmap - loop| over the choices that ran
    note: str = ""


def error_kind(e: BaseException) -> str:
    """A short class of a failure: vmap's in-place refusals apart from the rest."""
    msg = first_line(str(e), 200)
    if isinstance(e, Mismatch):
        return "mismatch"
    if "vmap: inplace arithmetic" in msg:
        return "vmap inplace arithmetic"
    if "doesn't match the broadcast shape" in msg:
        return "in-place output doesn't match the broadcast shape"
    if "Batch norm got a batched tensor" in msg:
        return "batch norm stats not batched"
    return f"{type(e).__name__}: {first_line(str(e), 70)}"


def _choice_errors(c: C.Composition, in_dims: tuple, entries: list, row: "TrialRow",
                   unbatched: str | None) -> list[str]:
    """The failure kinds of one choice (empty: it passed). If the sample's unbatched composition
    raises (``unbatched``: its error kind) only vmap's own call is run: vmap raising the same is
    "unbatched composition raises too"; a choice vmap accepts is counted in ``row.loop_raises``."""
    if unbatched is not None:
        try:
            torch.func.vmap(c.function(), in_dims=tuple(in_dims))(*c.batched(in_dims, entries))
        except Exception as e:  # noqa: BLE001 - measured and counted
            kind = error_kind(e)
            return [f"unbatched composition raises too: {kind}" if kind == unbatched else kind]
        row.loop_raises += 1
        return []
    kinds = []
    for check in (c.run, c.nested):
        try:
            got = check(in_dims, entries)
            if got is not None:
                row.max_mismatch = max(row.max_mismatch, max_abs_error(*got))
                check_close(*got, str(in_dims))
        except Exception as e:  # noqa: BLE001 - each choice's failure is measured and counted
            kinds.append(error_kind(e))
    return kinds


def _opinfo(name: str, variant: str):
    return next(o for o in internals.opinfo_database() if (o.name, o.variant_test_name) == (name, variant))


def trial(cases: Iterable[tuple[str, str, str]] = CASES, samples: int = 3, batch: int = C.UPSTREAM_BATCH,
          seed: int = 0, log=sys.stderr) -> list[TrialRow]:
    """Run each case's composition on the op's first ``samples`` float32 CPU samples, every in_dims
    choice, plain torch.func, with copies and with distinct entries of ``batch`` entries."""
    rows = []
    for name, variant, comp in cases:
        op = _opinfo(name, variant)
        up = upstream.expectation(f"test_{comp}", name, variant)
        expect = f"{up.kind}: {up.reason}" if up else "pass"
        made = list(op.sample_inputs("cpu", torch.float32, requires_grad=comp != "vmapjvpall"))
        for kind in ("copies", "distinct"):
            row = TrialRow(f"{name}.{variant}" if variant else name, comp, kind, upstream=expect)
            t0 = time.perf_counter()
            for i, s in enumerate(made[:samples]):
                c = C.BUILDERS[comp](op.op, s, torch.Generator().manual_seed(seed + i), name=op.name)
                entries = (C.copies(c.tensors(), batch) if kind == "copies"
                           else distinct_entries(c.tensors(), batch, seed + i))
                unbatched = _unbatched_error(c)
                if unbatched is not None:
                    row.note += f"sample {i}: its unbatched composition raises; "
                elif kind == "distinct" and not _loop_ok(c, entries):
                    row.note += f"sample {i}: distinct entries invalid for the op, copies used; "
                    entries = C.copies(c.tensors(), batch)
                for in_dims in c.in_dims():
                    row.choices += 1
                    kinds = _choice_errors(c, in_dims, entries, row, unbatched)
                    row.failed += bool(kinds)
                    row.errors.update(set(kinds))
            print(f"{row.op} {comp} {kind}: {row.failed}/{row.choices} choices fail "
                  f"({time.perf_counter() - t0:.1f}s)", file=log, flush=True)
            rows.append(row)
    return rows


def _unbatched_error(c: C.Composition) -> str | None:
    """The error kind of the composition on the sample's own values (no vmap), or None."""
    try:
        c.function()(*c.args)
        return None
    except Exception as e:  # noqa: BLE001 - measured
        return error_kind(e)


def _loop_ok(c: C.Composition, entries: list) -> bool:
    """Whether the per-sample loop runs on these entries (all batched)."""
    try:
        c.expected(c.in_dims()[0], entries)
        return True
    except Exception:  # noqa: BLE001 - an entry the op refuses (e.g. a target outside [0, 1])
        return False


def table(rows: list[TrialRow]) -> str:
    """The rows as a text table (fits 100 columns; error kinds on their own lines)."""
    out = [f"{'op':34} {'compos.':10} {'entries':8} {'fail/choices':>12} {'max err':>8}  upstream"]
    for r in rows:
        out.append(f"{r.op:34} {r.composition:10} {r.entries:8} {r.failed:>5}/{r.choices:<6} "
                   f"{r.max_mismatch:8.1e}  {r.upstream[:22]}")
        out += [f"    {n:4} x {k[:86]}" for k, n in r.errors.most_common()]
        if r.loop_raises:
            out.append(f"    {r.loop_raises:4} x vmap ran, the unbatched composition raises (not counted)")
        if r.note:
            out.append(f"    note: {r.note[:90]}")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(trial(CASES + CROSS)))
