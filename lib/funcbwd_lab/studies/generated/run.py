"""The long run: many generated programs, every cell, on Dask; resumable; counts in data/.

``python -m funcbwd_lab.studies.generated.run --programs N [--workers 2] [--timeout S]``

checks N programs (hypothesis, :func:`~funcbwd_lab.studies.generated.grammar.programs` with no
feature required, chunks of :data:`CHUNK` drawn from seeds ``SEED + k``) in all 21 cells (8
transforms x 3 entry points; plain torch.func is each cell's baseline), one Dask item per program
(:func:`funcbwd_lab.parallel.map_items`): a cell gets ``--timeout`` seconds per call (a hang is
its verdict and the program's later cells are ``not_run``); an item gets a per-program timeout
(its record: every cell ``timeout``). A hang leaves its worker unusable: the worker keeps the
program's record in a file and ends itself; the item's retry on a fresh worker returns it.
Records go to ``--records`` (JSON lines, one per program) as they come:
an interrupted run resumes where it stopped (``--fresh`` starts over). The summary
(:func:`funcbwd_lab.studies.generated.report.summarize`: counts per entry point x transform x
verdict, every program with a cell that did not pass, with its source) is written to ``--out``.

Cost: about 0.4 s of CPU per program, plus ``--timeout`` and a worker restart per hang.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from funcbwd_lab import command
from funcbwd_lab.progress import Progress

CHUNK = 50
SEED = 37_000
TIMEOUT_S = 10.0
ITEM_TIMEOUT_S = 600.0
BATCH = 500  # programs per Dask cluster: a lost scheduler costs at most one batch
RETRIES = 2
RECORDS = Path("out/generated-records.jsonl")
DATA = Path(__file__).resolve().parents[4] / "data" / "generated.json"


@functools.lru_cache(maxsize=4)
def chunk(k: int) -> tuple:
    """Chunk ``k``: up to :data:`CHUNK` distinct programs drawn from seed ``SEED + k``."""
    from funcbwd_lab.studies.generated.grammar import programs
    from funcbwd_lab.studies.generated.seeded import draw

    return tuple(draw(programs(), CHUNK, SEED + k))


def warm() -> None:
    """What a worker imports before its first item (torch, the harness, hypothesis)."""
    import funcbwd_lab.studies.generated.seeded  # noqa: F401 - the imports are the point


def check_item(key: tuple[int, int], timeout: float = TIMEOUT_S,
               hangs: str | None = None) -> dict[str, Any]:
    """One program in every cell (what a worker runs). A hang leaves the process unusable:
    the record goes to ``hangs/KEY.json`` and the worker ends itself; the item's retry, on a
    fresh worker, returns that record (so no other program pays for the hang)."""
    import warnings

    from funcbwd import harness
    from funcbwd_lab.studies.generated.program import check_all

    kept = _kept(hangs, key)
    if kept is not None:
        return kept
    if harness.hung():  # a hang ends its worker: never reached, never run on a poisoned one
        os._exit(3)
    programs = chunk(key[0])
    if key[1] >= len(programs):
        return {"key": list(key), "duplicate": True}
    program = programs[key[1]]
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cells = check_all(program, timeout=timeout)
    ran = {(c["transform"], c["entry"]) for c in cells}
    cells += [{"transform": t, "entry": e, "verdict": "not_run", "call": 0,
               "detail": "an earlier cell of this program hung", "plain": ""}
              for t, e in program.cells() if (t, e) not in ran]
    record = {"key": list(key), "program": program.record(), "cpu_s": round(
        time.process_time() - t0, 3), "cells": [
        [c["transform"], c["entry"], c["verdict"], c["call"], c["plain"], c["detail"][:200]]
        for c in cells]}
    if harness.hung() and hangs is not None:
        Path(hangs, f"{key[0]}-{key[1]}.json").write_text(json.dumps(record))
        os._exit(0)
    return record


def _kept(hangs: str | None, key: Any) -> dict | None:
    path = None if hangs is None else Path(hangs, f"{key[0]}-{key[1]}.json")
    return json.loads(path.read_text()) if path is not None and path.exists() else None


def _failed(key: Any, reason: str, message: str, hangs: str | None = None) -> dict[str, Any]:
    """A program whose item failed on Dask: the record its hang kept, else every cell gets the
    reason (crash, timeout, error)."""
    kept = _kept(hangs, key)
    if kept is not None:
        return kept
    program = chunk(key[0])[key[1]]
    return {"key": list(key), "program": program.record(), "cells": [
        [t, e, reason, 0, "", message[-200:]] for t, e in program.cells()]}


def load_records(path: Path) -> dict[tuple, dict]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out[tuple(r["key"])] = r
    return out


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab.parallel import map_items
    from funcbwd_lab.studies.generated.report import dumps, summarize

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.generated.run",
                                description="generated programs in every cell, on Dask")
    p.add_argument("--programs", type=int, default=1000, help="how many (default 1000)")
    p.add_argument("--workers", type=int, default=2, help="Dask worker processes (0: serial)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per cell and call")
    p.add_argument("--records", type=Path, default=RECORDS, help=f"default {RECORDS}")
    p.add_argument("--out", type=Path, default=None,
                   help="the summary (data/generated.json refreshes the committed data)")
    p.add_argument("--fresh", action="store_true", help="start over (drop --records)")
    command.add_force(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    ns = p.parse_args(argv)
    if ns.out is not None and command.out_refused(p.prog, ns.out, ns.force):
        return 2
    if ns.fresh and ns.records.exists():
        ns.records.unlink()
    done = load_records(ns.records)
    keys = [(k, i) for k in range((ns.programs + CHUNK - 1) // CHUNK) for i in range(CHUNK)]
    keys = keys[:ns.programs]
    todo = [k for k in keys if k not in done]
    say = (lambda m: None) if ns.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    say(f"generated: {len(keys)} programs, {len(keys) - len(todo)} already in {ns.records}; "
        f"{len(todo)} to check: about {0.4 * len(todo) / max(ns.workers, 1) / 60:.0f} min on "
        f"{max(ns.workers, 1)} core(s), plus {ns.timeout:g} s and a worker restart per hang")
    ns.records.parent.mkdir(parents=True, exist_ok=True)
    bar = Progress("programs", enabled=not ns.quiet)
    hangs = str(ns.records) + ".hangs"  # a hung program's record, kept for its retry
    os.makedirs(hangs, exist_ok=True)
    with open(ns.records, "a") as sink:
        def save(key: Any, record: dict) -> None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()
        for attempt in range(RETRIES + 1):
            have = load_records(ns.records)
            left = [k for k in todo if k not in have]
            for start in range(0, len(left), BATCH):  # a lost cluster costs one batch's wait
                try:
                    map_items(functools.partial(check_item, timeout=ns.timeout, hangs=hangs),
                              left[start:start + BATCH], workers=ns.workers, warmup=warm,
                              timeout=ITEM_TIMEOUT_S, on_result=save, progress=bar,
                              on_failure=functools.partial(_failed, hangs=hangs))
                except Exception as e:  # noqa: BLE001 - the cluster itself failed: go on
                    say(f"the Dask cluster failed ({type(e).__name__}: {str(e)[:80]}); the "
                        f"records so far are kept, the rest runs again (attempt {attempt + 1})")
            have = load_records(ns.records)
            if all(k in have for k in todo):
                break
    records = load_records(ns.records)
    doc = summarize([records[k] for k in keys if k in records], ns.timeout, len(keys), CHUNK,
                    SEED)
    say(f"{doc['meta']['programs']} programs checked; " + ", ".join(
        f"{v} {n}" for n, v in doc["totals"].items()))
    if ns.out is not None:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(dumps(doc))
        say(f"written to {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
