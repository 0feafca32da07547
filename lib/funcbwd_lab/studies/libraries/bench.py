"""A benchmark, not a test: what the mode costs where it fixes and where plain already works.

For every function case's ``vmap`` and ``vmap_vjp`` cell whose verdict is ``pass`` or ``fixed``,
at a batch of 64 distinct samples, in one process, one torch thread: the median of 3 calls
(after one warm-up, which is also when the mode learns what works) of plain torch.func (where it
works), of the same call under ``funcbwd.allow_inplace()``, and of a per-sample Python loop of
the function (the truth's loop: eager, one sample at a time). Ratios are measured in this one
run; a cell whose mode took over ``SLOW_AT_3`` seconds at the study's batch of 3 (an adaptive
solver stepping per sample) or whose first mode call here takes over ``SLOW_S`` seconds is not
timed and says so.
Saved into the data file's ``bench`` (the rest of the file unchanged).
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from typing import Any

B = 64
REPEATS = 3
SLOW_S = 5.0
SLOW_AT_3 = 1.0
TRANSFORMS = ("vmap", "vmap_vjp")


def _time(call) -> float:
    call()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_cell(name: str, transform: str, verdict: str) -> dict[str, Any]:
    from funcbwd_lab.studies.libraries.cases import CASES
    from funcbwd_lab.studies.libraries.harness import arm_context, computed, inputs, truth

    case = CASES[name]
    args, cts = inputs(case, transform, B)
    out: dict[str, Any] = {"case": name, "transform": transform, "verdict": verdict, "batch": B}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = case.build()
        start = time.perf_counter()
        with arm_context("mode")():
            computed(transform, case, built, args, cts)
        if time.perf_counter() - start > SLOW_S:
            out["note"] = f"first mode call over {SLOW_S:g} s: not timed"
            return out

        def mode():
            with arm_context("mode")():
                computed(transform, case, built, args, cts)
        out["mode_s"] = _time(mode)
        out["loop_s"] = _time(lambda: truth(transform, case, built, args, cts))
        if verdict == "pass":
            out["plain_s"] = _time(lambda: computed(transform, case, built, args, cts))
    return out


def bench(path: Path, progress: Any = None) -> list[dict[str, Any]]:
    import torch

    from funcbwd_lab.studies.libraries import env
    from funcbwd_lab.studies.libraries.run import load, write
    from funcbwd_lab.studies.libraries.verdicts import rows

    env.activate()
    torch.set_num_threads(1)
    data = load(path)
    chosen = [r for r in rows(data) if r["transform"] in TRANSFORMS
              and r["verdict"] in ("pass", "fixed")
              and data["cases"][r["case"]]["kind"] == "function"]
    results = [{"case": r["case"], "transform": r["transform"], "verdict": r["verdict"],
                "note": f"mode took over {SLOW_AT_3:g} s at B=3: not timed"}
               for r in chosen if (r.get("mode_seconds") or 0) > SLOW_AT_3]
    slow = {(r["case"], r["transform"]) for r in results}
    cells = [(r["case"], r["transform"], r["verdict"]) for r in chosen
             if (r["case"], r["transform"]) not in slow]
    if progress is not None:
        progress.start(len(cells))
    for name, t, v in cells:
        if progress is not None:
            progress.doing(f"{name} {t}")
        try:
            results.append(time_cell(name, t, v))
        except Exception as e:  # noqa: BLE001 - a benchmark cell that raises is reported, not fatal
            results.append({"case": name, "transform": t, "verdict": v,
                            "note": f"raised {type(e).__name__}"})
        if progress is not None:
            progress.advance()
    if progress is not None:
        progress.close()
    data["bench"] = results
    write(path, data)
    return results


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the ratios, with how many cells each rests on."""
    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    fixed = [r for r in results if r["verdict"] == "fixed" and "mode_s" in r]
    passing = [r for r in results if r["verdict"] == "pass" and "plain_s" in r]
    return {"batch": B,
            "fixed_cells": len(fixed),
            "fixed_mode_over_loop": med([r["mode_s"] / r["loop_s"] for r in fixed]),
            "fixed_worst_over_loop": max((round(r["mode_s"] / r["loop_s"], 2) for r in fixed),
                                         default=None),
            "fixed_worst_cell": max(((r["mode_s"] / r["loop_s"], f"{r['case']} {r['transform']}")
                                     for r in fixed), default=(None, None))[1],
            "pass_cells": len(passing),
            "pass_mode_over_plain": med([r["mode_s"] / r["plain_s"] for r in passing]),
            "pass_mode_over_loop": med([r["mode_s"] / r["loop_s"] for r in passing]),
            "not_timed": sum(1 for r in results if "mode_s" not in r)}
