"""Instructions per call of each C++ approach, counted by valgrind's callgrind in one process.

:func:`count` starts one ``valgrind --tool=callgrind --collect-atstart=no`` process running this
module as a worker (:func:`worker`): it imports torch and the extension once (the slow part under
valgrind), then for each case makes the statement (:func:`funcbwd_lab.studies.cpp.cost.callable_for`)
and its base, calls each once uncounted, and counts ``number`` calls of each in a loop between
two client requests (``torch._C._valgrind_toggle`` / ``_valgrind_toggle_and_dump_stats``: one dump
per count), :data:`REPEATS` times. The base of a ``vjp`` statement is a function doing nothing;
of a ``node`` statement, the same statement applying the node zero times (its vmap and Python
wrapping included). Instructions per application: ``(statement - base) / (number x
applications)``, the lower of the repeats (both are kept).

Counts are repeatable to within the spread each case records (its two counts); the machine's
load does not change them (other engineers' runs share the cores, not the instruction stream).
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from funcbwd_lab.studies.cpp.cost import Case

REPEATS = 2  # counts per statement (their spread is recorded)


def calls_for(case: Case) -> int:
    """Python calls per count: a node statement loops in C++ already; a vjp statement is called
    20 times with vmap off, fewer at large batches."""
    if case.kind in ("node", "trigger"):
        return 1
    if case.batch is None:
        return 20
    return 3 if case.batch >= 512 else 5


def _loop(fn: Callable[[], Any], number: int) -> None:
    import torch

    gc.collect()
    gc.disable()
    torch._C._valgrind_toggle()
    for _ in range(number):
        fn()
    torch._C._valgrind_toggle_and_dump_stats()
    gc.enable()


def worker(plan_file: str) -> None:
    """Run under callgrind: count every case of ``plan_file`` (JSON: cases), writing what each
    dump holds, in order, to ``<plan_file>.manifest`` (one JSON line per dump)."""
    import torch

    torch.set_num_threads(1)  # intra-op threads' spin-waits would make counts vary
    import funcbwd_lab.studies.cpp  # noqa: F401 - wires the extension (cached build)
    from funcbwd_lab.studies.cpp import cost

    cases = [Case(**c) for c in json.loads(Path(plan_file).read_text())]
    with open(plan_file + ".manifest", "w") as manifest:
        for i, case in enumerate(cases):
            print(f"callgrind {i + 1}/{len(cases)} {case.op} {case.size} {case.kind} "
                  f"{'vmap off' if case.batch is None else f'B={case.batch}'} {case.label}",
                  file=sys.stderr, flush=True)
            fn, base = cost.statements(case)
            n = calls_for(case)
            for role, f in (("base", base), ("stmt", fn)):
                f()  # uncounted: the first call's one-time work (allocations, lookups)
                for r in range(REPEATS):
                    _loop(f, n)
                    manifest.write(json.dumps({"case": i, "role": role, "repeat": r}) + "\n")
                    manifest.flush()


_TOTALS = re.compile(r"^totals:\s*(\d+)", re.M)


def _totals(path: Path) -> int:
    m = _TOTALS.search(path.read_text(errors="replace"))
    if m is None:
        raise RuntimeError(f"{path.name}: no totals line")
    return int(m.group(1))


def available() -> str | None:
    """Why callgrind cannot count here (one line), or None."""
    import shutil

    import torch

    if shutil.which("valgrind") is None:
        return "valgrind is not installed"
    if not torch._C._valgrind_supported_platform():
        return "this torch build has no valgrind client requests"
    return None


def count(cases: Sequence[Case], progress: Callable[[str], None] | None = None,
          done: Sequence[dict[str, Any]] = (),
          on_chunk: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Instructions per application of each case: one valgrind process per op (the triggers with
    the first), minutes each. Rows: the case, ``instructions`` (the lower of the repeats),
    ``repeats``, ``spread`` (their relative difference), the base's raw counts. ``done``: rows of
    an earlier, interrupted run (their cases are not counted again); ``on_chunk(rows so far)``
    after each process (to save progress)."""
    rows = list(done)
    seen = {json.dumps(r_key(r), sort_keys=True) for r in rows}
    todo = [c for c in cases if json.dumps(c.key(), sort_keys=True) not in seen]
    chunks: dict[str, list[Case]] = {}
    for c in todo:
        chunks.setdefault(c.op if c.kind != "trigger" else "triggers", []).append(c)
    for i, (name, chunk) in enumerate(chunks.items()):
        if progress:
            progress(f"callgrind process {i + 1}/{len(chunks)} ({name}: {len(chunk)} cases; "
                     "about a minute to import torch under valgrind, then seconds per case)")
        rows += _count_chunk(chunk, progress)
        if on_chunk:
            on_chunk(rows)
    return rows


def r_key(row: dict[str, Any]) -> dict[str, Any]:
    """The case key of a row (:meth:`funcbwd_lab.studies.cpp.cost.Case.key`)."""
    return {k: row[k] for k in ("op", "size", "batch", "label", "kind", "instance")}


def _count_chunk(cases: Sequence[Case], progress: Callable[[str], None] | None) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="funcbwd-cg-") as tmp:
        plan_file = Path(tmp) / "plan.json"
        plan_file.write_text(json.dumps([c.key() for c in cases]))
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
               "--instr-atstart=yes", "--collect-atstart=no", sys.executable, "-m",
               "funcbwd_lab.studies.cpp.callgrind", "--worker", str(plan_file)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                env={**os.environ, "PYTHONWARNINGS": "ignore"})
        tail: list[str] = []
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("callgrind ") and progress:
                progress(f"{line.strip()} ({time.perf_counter() - t0:.0f} s)")
            elif not line.startswith("=="):
                tail = (tail + [line.rstrip()])[-5:]
        if proc.wait() != 0:
            raise RuntimeError(f"the callgrind worker failed: {' | '.join(tail)}")
        entries = [json.loads(ln) for ln in (plan_file.parent / "plan.json.manifest").read_text()
                   .splitlines()]
        counts = [_totals(Path(tmp) / f"cg.out.{k + 1}") for k in range(len(entries))]
    raw: dict[tuple[int, str], list[int]] = {}
    for e, c in zip(entries, counts):
        raw.setdefault((e["case"], e["role"]), []).append(c)
    rows = []
    for i, case in enumerate(cases):
        per = calls_for(case) * case.applications
        base = min(raw[i, "base"])
        per_call = [(c - base) / per for c in raw[i, "stmt"]]
        lo = min(per_call)
        rows.append({**case.key(), "instructions": round(lo, 1),
                     "repeats": [round(p, 1) for p in per_call],
                     "spread": (max(per_call) - lo) / lo if lo > 0 else None,
                     "base": raw[i, "base"], "calls": calls_for(case),
                     "applications": case.applications})
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        raise SystemExit("usage: python -m funcbwd_lab.studies.cpp.callgrind --worker PLAN "
                         "(run by funcbwd_lab.studies.cpp.callgrind.count under valgrind)")
