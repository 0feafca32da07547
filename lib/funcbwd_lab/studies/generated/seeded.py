"""The seeded subset that ``make test`` runs: a fixed list of generated programs, every cell.

:func:`subset` draws, for each feature of :data:`~funcbwd_lab.studies.generated.grammar.FEATURES`,
the first :data:`PER_FEATURE` distinct programs hypothesis writes that use it, and :data:`FREE`
programs with no feature required: a fixed seed each (the CRC-32 of the feature's name), no
example database, generation only, so the list is the same on every machine for one version of
the grammar and of hypothesis. Hypothesis writes its simplest programs first, which keeps each
failure's program close to minimal.

A hang leaves the process unusable (:func:`funcbwd.harness.check`), so :func:`run_isolated`
runs :class:`Job`\\ s (the subset, or part of it, optionally under a mutation of
:mod:`funcbwd_lab.studies.generated.mutations`) in a child process
(``python -m funcbwd_lab.studies.generated.seeded --jobs ...``) that writes one JSON line per
program and stops at a hang; the parent then starts a new child after the program that hung,
skipping the rest of that job's programs of that feature (the feature has failed already).

    python -m funcbwd_lab.studies.generated.seeded      # the failures, about 1 min on 2 cores
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from typing import Any, Callable

from funcbwd_lab.studies.generated.grammar import FEATURES, programs
from funcbwd_lab.studies.generated.program import CELLS, Program, check_all

PER_FEATURE = 5
FREE = 20
TIMEOUT_S = 10.0  # one cell, one call; a first call costs well under a second
OK = ("pass", "refused", "no_reference")


def draw(strategy, n: int, seed: int) -> list[Program]:
    """The first ``n`` distinct programs hypothesis draws from ``strategy`` with ``seed``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    out: list[Program] = []

    @seeded(seed)
    @settings(max_examples=n * 2, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(program: Program) -> None:
        out.append(program)

    with warnings.catch_warnings():  # another thread's use of `random` (a Dask worker's)
        warnings.simplefilter("ignore")
        collect()
    return list({p.source + repr(p.seed): p for p in out}.values())[:n]


def _alone(feature: str) -> tuple[str, ...]:
    """``nested`` only in its own programs: today it hangs, and a hang costs a new process."""
    return () if feature == "nested" else ("nested",)


def subset(per_feature: int = PER_FEATURE, free: int = FREE) -> list[tuple[str, Program]]:
    """(feature, program) pairs: ``per_feature`` per feature, then ``free`` unconstrained."""
    items = [(f, p) for f in FEATURES for p in draw(
        programs(require=(f,), exclude=_alone(f)), per_feature, zlib.crc32(f.encode()))]
    return items + [("free", p) for p in draw(programs(exclude=_alone("free")), free,
                                              zlib.crc32(b"free"))]


@dataclasses.dataclass(frozen=True)
class Job:
    """Part of the subset (``features``; None: all) in some cells (``entries``; None: all),
    under ``mutation`` (a name for :func:`~funcbwd_lab.studies.generated.mutations.applied`)."""

    mutation: str | None = None
    features: tuple[str, ...] | None = None
    entries: tuple[str, ...] | None = None

    def cells(self) -> tuple:
        return tuple(c for c in CELLS if self.entries is None or c[1] in self.entries)


def run(items: list[tuple[str, Program]], jobs: list[Job], start: tuple[int, int],
        skip: set, timeout: float, emit: Callable[[dict], None],
        progress: Callable[[str], None] | None = None) -> None:
    """Each job over ``items`` from ``start`` (job, program), one record per program; stop after
    a hang. ``skip``: (job, feature) pairs left out."""
    from funcbwd_lab.studies.generated.mutations import applied

    for j, job in enumerate(jobs):
        if j < start[0]:
            continue
        with applied(job.mutation):
            for i, (feature, program) in enumerate(items):
                if ((j, i) < start or (j, feature) in skip
                        or (job.features is not None and feature not in job.features)):
                    continue
                if progress:
                    progress(f"job {j + 1}/{len(jobs)} program {i + 1}/{len(items)} {feature}")
                t0 = time.process_time()
                cells = check_all(program, job.cells(), timeout)
                emit({"job": j, "index": i, "feature": feature, "program": program.record(),
                      "cells": cells, "cpu_s": round(time.process_time() - t0, 3)})
                if any(c["verdict"] == "hang" for c in cells):
                    return


def run_isolated(jobs: list[Job] | None = None, timeout: float = TIMEOUT_S,
                 say: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The jobs in child processes (see the module docstring): one record per program run, in
    order; a program whose child died is recorded with its stderr's tail under ``"crash"``."""
    jobs = jobs or [Job()]
    items = subset()
    todo = [(j, i) for j, job in enumerate(jobs) for i, (f, _) in enumerate(items)
            if job.features is None or f in job.features]
    records: dict[tuple[int, int], dict] = {}
    skip: set = set()
    start = todo[0] if todo else None
    with tempfile.TemporaryDirectory(prefix="funcbwd-seeded-") as tmp:
        while start is not None:
            out, spec = os.path.join(tmp, f"{start[0]}-{start[1]}.jsonl"), os.path.join(tmp, "s")
            with open(spec, "w") as f:
                json.dump({"jobs": [dataclasses.asdict(j) for j in jobs], "start": start,
                           "skip": sorted(skip), "timeout": timeout}, f)
            proc = subprocess.run([sys.executable, "-m", "funcbwd_lab.studies.generated.seeded",
                                   "--child", spec, "--child-out", out], stderr=subprocess.PIPE,
                                  text=True)
            lines = [json.loads(ln) for ln in open(out)] if os.path.exists(out) else []
            records.update({(r["job"], r["index"]): r for r in lines})
            left = [k for k in todo if k not in records and (k[0], items[k[1]][0]) not in skip]
            if lines and any(c["verdict"] == "hang" for c in lines[-1]["cells"]):
                skip.add((lines[-1]["job"], lines[-1]["feature"]))
                if say:
                    say(f"a hang in {lines[-1]['feature']}: a new process")
            elif proc.returncode != 0 and left:
                j, i = left[0]
                records[(j, i)] = {"job": j, "index": i, "feature": items[i][0],
                                   "program": items[i][1].record(), "cells": [],
                                   "crash": proc.stderr[-2000:]}
            left = [k for k in todo if k not in records and (k[0], items[k[1]][0]) not in skip]
            start = left[0] if left and (proc.returncode != 0 or lines) else None
    return [records[k] for k in sorted(records)]


def failures(records: list[dict]) -> list[dict]:
    """Every cell outside the contract (not pass, refused or no_reference) with its program,
    and every crash."""
    out = []
    for r in records:
        head = {k: r[k] for k in ("job", "index", "feature", "program")}
        out += [{**head, **c} for c in r["cells"] if c["verdict"] not in OK]
        if "crash" in r:
            out.append({**head, "transform": "", "entry": "", "verdict": "crash", "call": 0,
                        "detail": r["crash"]})
    return out


def _child(spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    jobs = [Job(j["mutation"], None if j["features"] is None else tuple(j["features"]),
                None if j["entries"] is None else tuple(j["entries"])) for j in spec["jobs"]]
    with open(out_path, "a") as out:
        def emit(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()
        run(subset(), jobs, tuple(spec["start"]), {tuple(s) for s in spec["skip"]},
            spec["timeout"], emit, progress=lambda m: print(m, file=sys.stderr, flush=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.generated.seeded",
                                description="run the seeded subset of generated programs "
                                            "(about a minute on 2 cores) and list its failures")
    p.add_argument("--mutation", default=None, help="a mutation's name (see mutations.py)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per cell and call")
    p.add_argument("--save", help="also write the records as one JSON file")
    p.add_argument("--out", dest="summary", help="the summary (data/generated-seeded.json "
                   "refreshes the committed baseline)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, args.child_out)
        os._exit(0)  # a thread blocked by a hang must not keep the process alive
    print("seeded subset: about a minute on 2 cores (a hang costs --timeout more)",
          file=sys.stderr)
    recs = run_isolated([Job(args.mutation)], args.timeout,
                        say=lambda m: print(m, file=sys.stderr))
    if args.save:
        with open(args.save, "w") as f:
            json.dump(recs, f, indent=1)
    if args.summary:
        from funcbwd_lab.studies.generated.report import dumps, seeded_summary

        with open(args.summary, "w") as f:
            f.write(dumps(seeded_summary(recs, PER_FEATURE, FREE, args.timeout)))
    for f in failures(recs):
        print(f"{f['feature']:>18} {f['transform']:>12} {f['entry']:>15} {f['verdict']:>13} "
              f"call {f.get('call', 0)}: {f['detail'][:40]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
