"""Compute the study: every case x transform x arm against the per-sample loop, on Dask.

``python -m funcbwd_lab.studies.libraries run [--cases NAME ..] [--out PATH] [--workers N]``

One Dask item per case (all its transforms and arms; :func:`run_case`), ``--timeout`` seconds
each (a case past it is recorded ``unknown``: the budget ran out, never a pass). Records are
saved as each case finishes, so an interrupted run resumes where it stopped (cases already in
``--out`` for this torch, lock and tool source are kept; ``--fresh`` starts over).
``--out`` defaults to ``out/libraries.json`` (untracked); ``data/libraries.json`` is refused
unless ``--force``.
"""

from __future__ import annotations

import json
import platform
import time
import warnings
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path("out/libraries.json")
TIMEOUT_S = 600.0


def run_case(name: str) -> dict[str, Any]:
    """Every transform and arm of case ``name`` (a Dask item: top level, picklable)."""
    import torch

    from funcbwd_lab.studies.libraries import env
    from funcbwd_lab.studies.libraries.cases import CASES
    from funcbwd_lab.studies.libraries.harness import run_cell

    env.activate()
    torch.set_num_threads(1)
    case = CASES[name]
    cells = {}
    start = time.perf_counter()
    for t in case.transforms:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cells[t] = run_cell(case, t)
            except Exception as e:  # noqa: BLE001 - the harness itself failed on this cell
                from funcbwd.errors import first_line
                cells[t] = {"truth": {"status": "noref", "error_type": type(e).__name__,
                                      "message": "harness: " + first_line(str(e), 250)}}
    return {"case": name, "cells": cells, "seconds": round(time.perf_counter() - start, 2)}


def _failed(name: str, reason: str, message: str) -> dict[str, Any]:
    """A case that never finished (crash, timeout, error outside the harness): unknown."""
    return {"case": name, "unknown": reason, "message": message[:300], "cells": {}}


def metadata() -> dict[str, Any]:
    import torch

    from funcbwd_lab.studies.libraries import env
    from funcbwd_lab.studies.libraries.harness import discard_available

    from funcbwd_lab.provenance import source_hash

    return {"torch": torch.__version__, "python": platform.python_version(),
            "lock": env.lock_hash(), "pins": env.pins(),
            "source": source_hash(Path(__file__).parent),
            "discard_opt_in": discard_available(),
            "basis": "each case x transform: a batch of 3 distinct samples (jacrev, jacfwd, "
                     "hessian: the first); truth: a per-sample loop of eager autograd on the same "
                     "call (fresh objects and fresh copies of the arguments per run); outputs and "
                     "the "
                     "caller's state (a module's buffers) compared in float64 within 1e-6 "
                     "(functions and whole models; a module whose constants .double() does not "
                     "reach, in float32 within upstream's composition tolerance, 1e-4); the "
                     "mode's arms run twice (a second, fresh call)"}


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def compute(names: list[str], out: Path, workers: int = 2, timeout: float = TIMEOUT_S,
            fresh: bool = False, progress: Any = True) -> dict[str, Any]:
    """Run ``names`` (those not already in ``out``), saving ``out`` after every case."""
    from funcbwd_lab.parallel import map_items
    from funcbwd_lab.studies.libraries.cases import CASES

    meta = metadata()
    old = None if fresh else load(out)
    keep = {}
    if old and all(old.get(k) == meta[k] for k in ("torch", "lock", "source")):
        keep = {r["case"]: r for r in old["results"] if "unknown" not in r}
    data = {**meta, "cases": cases_table(), "results": [keep[n] for n in names if n in keep]}
    todo = [n for n in names if n not in keep]

    def save(_item: Any, record: dict) -> None:
        data["results"] = [r for r in data["results"] if r["case"] != record["case"]] + [record]
        write(out, data)

    if todo:
        map_items(run_case, todo, workers=workers, timeout=timeout, progress=progress,
                  on_failure=_failed, on_result=save)
    order = {n: i for i, n in enumerate(CASES)}
    data["results"].sort(key=lambda r: order.get(r["case"], len(order)))
    write(out, data)
    return data


def write(out: Path, data: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    tmp.replace(out)


def cases_table() -> dict[str, dict[str, Any]]:
    from funcbwd_lab.studies.libraries.cases import CASES

    return {n: {"library": c.library, "call": c.call, "cite": c.cite, "group": c.group,
                "kind": c.kind, "what": c.what, "transforms": list(c.transforms),
                "not_applicable": c.not_applicable()} for n, c in CASES.items()}
