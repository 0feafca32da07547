"""The seeded subset that ``make test`` runs: a fixed list of generated programs, every cell.

:func:`subset` draws, for each feature of :data:`~funcbwd_lab.studies.generated.grammar.FEATURES`,
the first :data:`PER_FEATURE` programs hypothesis writes that use it (and :data:`FREE`
programs with no feature required): ``derandomize=True``, no example database, generation only,
so the list is the same on every machine for one version of the grammar and of hypothesis. The
first programs hypothesis writes are its simplest, which makes each failure's program close to
minimal already.

A hang leaves the process unusable (:func:`funcbwd.harness.check`), so :func:`run_isolated`
runs the subset in a child process (``python -m funcbwd_lab.studies.generated.seeded``), which
writes one JSON line per program and stops at a hang; the parent starts a new child after the
program that hung, skipping the rest of that feature's programs (the feature has failed
already). A mutation (:mod:`funcbwd_lab.studies.generated.mutations`) is applied in the child
for the whole run.

    python -m funcbwd_lab.studies.generated.seeded --summary     # about 1 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from funcbwd_lab.studies.generated.grammar import FEATURES, programs
from funcbwd_lab.studies.generated.program import Program, check_all

PER_FEATURE = 5
FREE = 20
TIMEOUT_S = 10.0  # one cell, one call; a first call costs well under a second


def draw(strategy, n: int, seed: int | None = None) -> list[Program]:
    """The first ``n`` distinct programs hypothesis draws from ``strategy``: derandomized, or
    from ``seed``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    out: list[Program] = []

    @settings(max_examples=n * 2, database=None, derandomize=seed is None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(program: Program) -> None:
        out.append(program)

    (seeded(seed)(collect) if seed is not None else collect)()
    unique = list({p.source + repr(p.seed): p for p in out}.values())
    return unique[:n]


def subset(per_feature: int = PER_FEATURE, free: int = FREE) -> list[tuple[str, Program]]:
    """(feature, program) pairs: ``per_feature`` per feature, then ``free`` unconstrained."""
    items = [(f, p) for f in FEATURES
             for p in draw(programs(require=(f,), exclude=_alone(f)), per_feature)]
    return items + [("free", p) for p in draw(programs(exclude=_alone("free")), free)]


def _alone(feature: str) -> tuple[str, ...]:
    """``nested`` only in its own programs: today it hangs, and a hang costs a new process."""
    return () if feature == "nested" else ("nested",)


def run(items: list[tuple[str, Program]], start: int, skip: set[str], timeout: float,
        emit: Callable[[dict], None], progress: Callable[[str], None] | None = None) -> None:
    """Check ``items[start:]`` (those of a feature in ``skip`` left out), one record each;
    stop after a hang."""
    for i in range(start, len(items)):
        feature, program = items[i]
        if feature in skip:
            continue
        if progress:
            progress(f"{i + 1}/{len(items)} {feature}")
        t0 = time.process_time()
        cells = check_all(program, timeout=timeout)
        emit({"index": i, "feature": feature, "program": program.record(), "cells": cells,
              "cpu_s": round(time.process_time() - t0, 3)})
        if any(c["verdict"] == "hang" for c in cells):
            return


def run_isolated(mutation: str | None = None, timeout: float = TIMEOUT_S,
                 features: list[str] | None = None, say: Callable[[str], None] | None = None
                 ) -> list[dict[str, Any]]:
    """The subset in child processes (see the module docstring): one record per program run;
    a program whose child died is recorded with ``"crash"`` and the child's last stderr."""
    items = subset()
    skip = {f for f, _ in items if features is not None and f not in features}
    records: dict[int, dict] = {}
    start = 0
    with tempfile.TemporaryDirectory(prefix="funcbwd-seeded-") as tmp:
        while start < len(items):
            out = os.path.join(tmp, f"from-{start}.jsonl")
            cmd = [sys.executable, "-m", "funcbwd_lab.studies.generated.seeded", "--start",
                   str(start), "--out", out, "--timeout", str(timeout), "--skip", ",".join(skip)]
            cmd += ["--mutation", mutation] if mutation else []
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
            lines = [json.loads(ln) for ln in open(out)] if os.path.exists(out) else []
            records.update({r["index"]: r for r in lines})
            last = lines[-1]["index"] if lines else start - 1
            if lines and any(c["verdict"] == "hang" for c in lines[-1]["cells"]):
                skip.add(lines[-1]["feature"])
                if say:
                    say(f"a hang in {lines[-1]['feature']} (program {last}): a new process")
            elif proc.returncode != 0:
                crashed = next(i for i in range(last + 1, len(items)) if items[i][0] not in skip)
                records[crashed] = {"index": crashed, "feature": items[crashed][0],
                                    "program": items[crashed][1].record(), "cells": [],
                                    "crash": proc.stderr[-2000:]}
                last = crashed
            else:
                break
            start = last + 1
    return [records[i] for i in sorted(records)]


def failures(records: list[dict]) -> list[dict]:
    """Every cell outside the contract (not pass, refused or no_reference), with its program."""
    ok = ("pass", "refused", "no_reference")
    return [{"index": r["index"], "feature": r["feature"], "program": r["program"], **c}
            for r in records for c in r["cells"] if c["verdict"] not in ok] + [
        {"index": r["index"], "feature": r["feature"], "program": r["program"],
         "verdict": "crash", "detail": r["crash"]} for r in records if "crash" in r]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.generated.seeded",
                                description="the seeded subset of generated programs")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--out", help="JSON lines, one per program (default: run it all isolated "
                                 "and print the failures)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S)
    p.add_argument("--skip", default="", help="features whose programs are left out")
    p.add_argument("--mutation", default=None)
    p.add_argument("--save", help="(isolated run) the records as one JSON file")
    args = p.parse_args(argv)
    if args.out is None:
        recs = run_isolated(args.mutation, args.timeout, say=lambda m: print(m, file=sys.stderr))
        if args.save:
            with open(args.save, "w") as f:
                json.dump(recs, f, indent=1)
        for f in failures(recs):
            print(f"{f['feature']:>18} {f.get('transform', ''):>12} {f.get('entry', ''):>15} "
                  f"{f['verdict']:>13} call {f.get('call', 0)}: {f['detail'][:60]}")
        return 0
    from funcbwd_lab.studies.generated.mutations import applied

    with open(args.out, "a") as out, applied(args.mutation):
        def emit(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()
        run(subset(), args.start, set(filter(None, args.skip.split(","))), args.timeout, emit,
            progress=lambda m: print(m, file=sys.stderr, flush=True))
    os._exit(0)  # a thread blocked by a hang must not keep the process alive


if __name__ == "__main__":
    sys.exit(main())
