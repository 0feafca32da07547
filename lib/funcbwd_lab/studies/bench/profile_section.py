"""The bench's profile section: where one batched backward's time goes, saved with the run.

``python -m funcbwd_lab bench`` adds :func:`profile_section` to its result (``"profile"``): one cell
(diag, vmap over 64 cotangents) broken into funcbwd's Python, vmap dispatch, vmap's fallback and
the aten kernels by :func:`funcbwd_lab.studies.bench.profile.profile`, for the strategies the notebooks
compare. Notebooks read it back with :func:`breakdowns` instead of profiling live: a live profile
is a timing, and a timing stored in a notebook changes on every run (so running the notebook and
saving it would rewrite it). What was not measured says why; nothing is extrapolated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from funcbwd.errors import FuncbwdError, first_line
from funcbwd_lab.studies.bench import profile

OP, BATCH = "diag", 64
STRATEGIES = ("handfixed", "per_formula", "traced")


def profile_section(op: str = OP, strategies: Sequence[str] = STRATEGIES, batch: int = BATCH,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``{"status": "ok", "op", "batch", "breakdowns": [...]}``: one entry per strategy, the
    :class:`funcbwd_lab.studies.bench.profile.Breakdown` as a dict with ``"status": "ok"``, or
    ``{"strategy", "status": "fail", "reason"}`` when the cell cannot be profiled."""
    rows = []
    for st in strategies:
        try:
            b = profile.profile(op, st, batch=batch)
            rows.append({"status": "ok", **dataclasses.asdict(b)})
        except FuncbwdError as e:
            rows.append({"strategy": st, "status": "fail", "reason": first_line(str(e))})
        if progress:
            progress(f"profile {op} {st} B={batch}: {rows[-1]['status']}")
    return {"status": "ok", "op": op, "batch": batch, "breakdowns": rows}


def breakdowns(results: dict[str, Any]) -> dict[str, profile.Breakdown]:
    """The saved section's breakdowns by strategy (only those measured); empty when the result
    has no profile section (an older run, or ``funcbwd_lab.studies.bench.bench.run_bench`` called directly)."""
    section = results.get("profile") or {}
    out = {}
    for row in section.get("breakdowns", []):
        if row.get("status") != "ok":
            continue
        fields = {f.name for f in dataclasses.fields(profile.Breakdown)}
        b = profile.Breakdown(**{k: v for k, v in row.items() if k in fields})
        b.kernels = {k: tuple(v) for k, v in b.kernels.items()}  # JSON lists back to (us, calls)
        out[b.strategy] = b
    return out


def missing(results: dict[str, Any]) -> list[str]:
    """Why each strategy of the saved section has no breakdown (``"<strategy>: <reason>"``), or
    the one reason there is no section."""
    section = results.get("profile")
    if not section:
        return ["no profile section in this result: run `python -m funcbwd_lab bench --quick --out ...`"]
    return [f"{r['strategy']}: {r['reason']}" for r in section.get("breakdowns", [])
            if r.get("status") != "ok"]
