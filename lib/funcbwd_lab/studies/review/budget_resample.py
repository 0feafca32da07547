"""The OpInfo sweep's budget-spent cells, re-run: every one (the default), or a seeded random
sample with what it says of all of them at a stated confidence.

The sweep (``data/coverage.json.gz``) left 809 cells where ``builtin`` passes and
``traced_backward`` spent its 3 s budget: neither pass nor failure. :mod:`.budget_rerun` re-ran an
even sample of 12 at 30 s. This study draws the cells in a random order (seed :data:`SEED`,
without replacement: ``--sample N`` keeps the first N), re-runs each through the sweep's own cell
runner (:func:`funcbwd_lab.studies.coverage.sweep.run_cell`) with :data:`BUDGET_S` per cell, on
Dask (:func:`funcbwd_lab.parallel.map_items`, one item per cell, hard timeout
:data:`ITEM_TIMEOUT_S`), and writes each record as it arrives to ``<out>.partial.jsonl``
(``--resume`` skips those; removed once the output is written).

:func:`bound` turns a sample into an exact one-sided upper bound on how many of the whole
population are in a class (regression, or still out of budget): the largest count ``K`` for which
drawing at most the observed number in ``n`` draws from ``N`` still has probability >= 5%
(hypergeometric, no normal approximation); with every cell re-run it is the count itself.
``python -m funcbwd_lab.studies.review.budget_resample --out data/review-budget-resample.json
[--resume] [--workers 2] [--sample N]`` (every cell: about 45 minutes on one worker here, a random
100 about 3).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from funcbwd_lab.studies.review import saved

SCHEMA = "funcbwd-review-budget-resample/1"
FILE = "review-budget-resample.json"
SAMPLE, SEED, BUDGET_S, ITEM_TIMEOUT_S = None, 39, 60.0, 240.0
CONFIDENCE = 0.95
STRATEGY = "traced_backward"
#: a record's status -> what it says of the cell against builtin (which passes there)
CLASS = {"pass": "no regression", "fail": "regression", "mismatch": "regression",
         "uninformative": "uninformative", "timeout": "still out of budget",
         "not_applicable": "no regression"}


def population(records: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Every cell builtin passes and ``traced_backward`` ran out of budget on (the 809)."""
    from funcbwd_lab.studies.review import budget_rerun

    return budget_rerun.budget_cells(list(records))


def draw(cells: Sequence[tuple], n: int | None = SAMPLE, seed: int = SEED) -> list[tuple]:
    """``n`` cells (None: all) drawn at random without replacement (seeded; sorted input, so the
    same data gives the same draw)."""
    return random.Random(seed).sample(sorted(cells), len(cells) if n is None else min(n, len(cells)))


def run_cell(cell: Sequence[str]) -> dict[str, Any]:
    """One cell with :data:`BUDGET_S` (a Dask item: top level, picklable in and out)."""
    import dataclasses
    import warnings

    import torch

    from funcbwd.errors import first_line
    from funcbwd_lab.studies.coverage import opinfo, sweep

    op_id, i, dtype, comp = cell
    start = time.perf_counter()
    plan = dataclasses.replace(sweep.DEFAULT_PLAN, budget_s=BUDGET_S)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        op = opinfo.op_by_id(op_id)
        smp = opinfo.samples(op, getattr(torch, dtype), int(i) + 1)[int(i)]
        spec, sample = opinfo.case_for(op, smp, i)
        r = sweep.run_cell(spec, sample, comp, STRATEGY, plan)
    return {"cell": list(cell), "status": r.status, "reason": r.reason,
            "message": first_line(r.message or "", 120),
            "seconds": round(time.perf_counter() - start, 1)}


def _failed(cell: Any, reason: str, message: str) -> dict[str, Any]:
    """A cell whose worker crashed, raised or hit the hard timeout: still unknown, never a pass."""
    status = "timeout" if reason == "timeout" else "fail"
    return {"cell": list(cell), "status": status, "reason": reason,
            "message": (message or "").splitlines()[0][:120] if message else "", "seconds": None}


# ------------------------------------------------------------------------------ the bound
def hypergeom_cdf(k: int, N: int, K: int, n: int) -> float:
    """P(X <= k) for X ~ Hypergeometric(population N, K marked, n draws)."""
    total = math.comb(N, n)
    return sum(math.comb(K, j) * math.comb(N - K, n - j)
               for j in range(0, min(k, K, n) + 1)) / total


def upper_bound(k: int, N: int, n: int, confidence: float = CONFIDENCE) -> int:
    """The largest number K of marked cells in the population consistent with seeing ``k`` in
    ``n`` draws: max K with P(X <= k | K) >= 1 - confidence (exact, one-sided)."""
    alpha = 1.0 - confidence
    best = k
    for K in range(k, N - (n - k) + 1):
        if hypergeom_cdf(k, N, K, n) >= alpha:
            best = K
        else:
            break
    return best


def bound(rows: Sequence[dict[str, Any]], population_size: int,
          confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Per class (regression, still out of budget, no regression): seen in the sample, and the
    exact upper bound on the population's count at ``confidence``; a crash (worker died) is
    counted as still unknown, never as a pass."""
    n = len(rows)
    seen = Counter(CLASS.get(r["status"], "still out of budget") if r.get("reason") != "crash"
                   else "still out of budget" for r in rows)
    out = {"sampled": n, "population": population_size, "confidence": confidence,
           "seen": dict(seen), "at_most": {}}
    for cls in ("regression", "still out of budget"):
        out["at_most"][cls] = upper_bound(seen.get(cls, 0), population_size, n, confidence)
    # "no regression" (pass or uninformative): a lower bound, from the bound on the rest
    other = n - seen.get("no regression", 0) - seen.get("uninformative", 0)
    out["at_least_no_regression"] = population_size - upper_bound(other, population_size, n,
                                                                  confidence)
    return out


# ------------------------------------------------------------------------------ the run
def run(coverage: Path, out: Path, resume: bool, workers: int, n: int | None = SAMPLE
        ) -> dict[str, Any]:
    import torch

    from funcbwd_lab import parallel
    from funcbwd_lab.studies.coverage import data

    cells = population(data.load(coverage)["records"])
    chosen = draw(cells, n)
    partial = out.with_name(out.name + ".partial.jsonl")
    done: dict[tuple, dict] = {}
    if resume and partial.exists():
        for line in partial.read_text().splitlines():
            r = json.loads(line)
            done[tuple(r["cell"])] = r
    todo = [c for c in chosen if tuple(c) not in done]
    print(f"budget_resample: {len(chosen)} of {len(cells)} cells at {BUDGET_S:.0f} s each, "
          f"{len(done)} already done; about {len(todo) * 25 / max(workers, 1) / 60:.0f} min on "
          f"{max(workers, 1)} worker(s)", file=sys.stderr, flush=True)
    if not resume and partial.exists():
        partial.unlink()

    def keep(_cell: Any, rec: dict[str, Any]) -> None:
        with partial.open("a") as f:
            f.write(json.dumps(rec) + "\n")

    parallel.map_items(run_cell, todo, workers=workers, timeout=ITEM_TIMEOUT_S,
                       on_failure=_failed, on_result=keep)
    for line in partial.read_text().splitlines():
        r = json.loads(line)
        done[tuple(r["cell"])] = r
    rows = [done[tuple(c)] for c in chosen if tuple(c) in done]
    return {"schema": SCHEMA, "torch": torch.__version__, "budget_s": BUDGET_S, "seed": SEED,
            "strategy": STRATEGY, "rows": rows, "status": dict(Counter(r["status"] for r in rows)),
            "bound": bound(rows, len(cells))}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab import command

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.review.budget_resample",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help=f"the JSON to write (e.g. data/{FILE})")
    p.add_argument("--data", default="data", help="the data directory (coverage.json.gz)")
    p.add_argument("--resume", action="store_true", help="skip the cells of <out>.partial.jsonl")
    p.add_argument("--workers", type=int, default=2, help="Dask worker processes (0: serial)")
    p.add_argument("--sample", type=int, default=SAMPLE, help="cells to draw (default: all)")
    command.add_force(p)
    a = p.parse_args(argv)
    if command.out_refused(p.prog, a.out, a.force):
        return 2
    doc = run(Path(a.data) / "coverage.json.gz", Path(a.out), a.resume, a.workers, a.sample)
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    Path(a.out).with_name(Path(a.out).name + ".partial.jsonl").unlink(missing_ok=True)  # done
    print(f"wrote {a.out}: {doc['status']}; at most {doc['bound']['at_most']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
