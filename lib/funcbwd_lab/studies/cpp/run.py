"""The C++ study's one command: rebuild, re-run the matrix, re-measure, save.

``python -m funcbwd_lab.studies.cpp --out data/cpp.json`` (``--force`` to overwrite the committed
file; ``--resume`` to continue an interrupted run from ``<out>.partial``). Stages, each saved to
the partial file as it ends:

1. ``extension``: build (or load the cached build of) the extension; what was generated;
2. ``probes``: what option 2 takes beyond the guard, each piece left out once (:func:`probes`);
3. ``matrix``: every C++ strategy on the 8 test ops x every sample x the 8 backward scenarios;
4. ``check`` and ``time``: every cost statement checked against builtin, then timed;
5. ``instructions``: callgrind (one valgrind process per op; the long part, resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

SCHEMA = "funcbwd-cpp/1"
STAGES = ("extension", "probes", "matrix", "check", "time", "instructions")
#: said up front (measured on this 2-core machine while other runs shared it)
DURATION = ("about 90 minutes: the extension (2-3 min when not cached), the matrix (2-4 min), "
            "checks and timings (10-15 min), callgrind (about an hour, resumable)")


def extension_stage(progress: Callable[[str], None]) -> dict[str, Any]:
    from funcbwd_lab.studies.cpp import build

    t0 = time.perf_counter()
    ext = build.load(progress)
    info = build.graphs_info()
    return {"name": ext.__name__, "load_seconds": round(time.perf_counter() - t0, 1),
            "cold_build": build.build_info(), "flags": list(build.CFLAGS),
            "events": list(ext.events), "formulas": list(ext.formulas),
            "graphs": info["graphs"], "skipped": info["skipped"]}


def probes() -> list[dict[str, Any]]:
    """Option 2 with one piece of "what it takes" left out, each run under vmap on a real
    formula and compared with the full guard's result (torch's gradient): the outcome as
    observed (raises what / wrong values / right values)."""
    import torch

    from funcbwd.errors import first_line
    from funcbwd_lab.strategies import cpp

    ext = cpp.extension()
    g = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    diag_right = torch.func.vmap(
        torch.func.vjp(lambda x: torch.diag(x, 1), torch.zeros(3, 5))[1])(g)[0]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([True, False, True, True])
    gm = torch.randn(4, int(mask.expand(3, 4).sum()), generator=torch.Generator().manual_seed(2))
    masked_right = torch.func.vmap(
        torch.func.vjp(lambda t: torch.masked_select(t, mask), x)[1])(gm)[0]
    cases = [
        ("the guard with a TLS include of Functionalize, no layer", "diag",
         lambda: torch.func.vmap(lambda t: ext.naive_guard_probe(t, [3, 5], 1))(g), diag_right),
        ("the guard wrapping the gradient only, not the saved tensors", "masked_select",
         lambda: torch.func.vmap(lambda t: ext.grad_only_probe(t, x, mask))(gm), None),
        ("the guard unwrapping without a sync", "diag",
         lambda: torch.func.vmap(lambda t: ext.no_sync_probe(t, [3, 5], 1))(g), diag_right),
    ]
    out = []
    for what, op, call, right in cases:
        try:
            got = call()
        except Exception as e:  # noqa: BLE001 - the observation
            outcome = f"raises {type(e).__name__}: {first_line(str(e), 110)}"
        else:
            ok = right is not None and got.shape == right.shape and torch.allclose(got, right)
            outcome = "right values" if ok else "wrong values, no error"
        out.append({"left_out": what, "op": op, "outcome": outcome,
                    "open_scopes_after": ext.open_scopes()})
    return out


def matrix_stage(progress: Callable[[str], None]) -> dict[str, Any]:
    from funcbwd_lab.ops import registry
    from funcbwd_lab.progress import Progress
    from funcbwd_lab.run.runner import run
    from funcbwd_lab.run.scenarios import BACKWARD_NAMES
    from funcbwd_lab.strategies import names
    from funcbwd_lab.studies.matrix import records

    cells = [(registry.get_op(op), smp, sc, st) for op in registry.TEST_OPS
             for smp in registry.get_op(op).samples() for sc in BACKWARD_NAMES
             for st in names("cpp")]
    bar = Progress("cpp matrix", len(cells))
    t0 = time.perf_counter()
    results = []
    try:
        for spec, smp, sc, st in cells:
            bar.doing(f"{spec.name} {sc} {st}")
            results.append(run(spec, sc, st, smp))
            bar.advance()
    finally:
        bar.close()
    return {"records": records.stable_records(results),
            "seconds": round(time.perf_counter() - t0, 1)}


def cost_plan(ops=None):
    from funcbwd_lab.ops.registry import TEST_OPS
    from funcbwd_lab.studies.cpp import cost

    return cost.plan(list(ops or TEST_OPS))


def check_stage(progress: Callable[[str], None], ops=None) -> list[dict[str, Any]]:
    from funcbwd_lab.ops.registry import TEST_OPS
    from funcbwd_lab.studies.cpp import cost

    cases = cost_plan(ops) + cost.instruction_plan(list(ops or TEST_OPS))
    cases = list(dict.fromkeys(cases))
    progress(f"checking {len(cases)} statements against builtin")
    verdicts = cost.check(cases)
    return [{**c.key(), "verdict": v} for c, v in verdicts.items()]


def _verdicts(rows: list[dict[str, Any]]) -> dict:
    from funcbwd_lab.studies.cpp.cost import Case

    return {Case(**{k: r[k] for k in ("op", "size", "batch", "label", "kind", "instance")}):
            r["verdict"] for r in rows}


def time_stage(progress: Callable[[str], None], checks: list[dict[str, Any]], ops=None
               ) -> dict[str, Any]:
    from funcbwd_lab.studies.cpp import cost

    t0 = time.perf_counter()
    rows = cost.time_cases(cost_plan(ops), _verdicts(checks), progress=progress)
    return {"rows": rows, "seconds": round(time.perf_counter() - t0, 1), "clock": "thread_cpu",
            "rounds": 9}


def instructions_stage(progress: Callable[[str], None], checks: list[dict[str, Any]],
                       partial: dict[str, Any], save: Callable[[], None], ops=None
                       ) -> dict[str, Any]:
    from funcbwd_lab.ops.registry import TEST_OPS
    from funcbwd_lab.studies.cpp import callgrind, cost

    why = callgrind.available()
    if why:
        return {"rows": [], "unavailable": why}
    verdicts = _verdicts(checks)
    cases = [c for c in cost.instruction_plan(list(ops or TEST_OPS)) if verdicts.get(c) == "pass"]
    done = partial.get("instructions_partial", [])
    t0 = time.perf_counter()

    def keep(rows: list[dict[str, Any]]) -> None:
        partial["instructions_partial"] = rows
        save()

    rows = callgrind.count(cases, progress, done=done, on_chunk=keep)
    partial.pop("instructions_partial", None)
    return {"rows": rows, "seconds": round(time.perf_counter() - t0, 1),
            "repeats": callgrind.REPEATS, "not_counted": [
                {**c.key(), "verdict": verdicts.get(c, "not checked")}
                for c in cost.instruction_plan(list(ops or TEST_OPS)) if verdicts.get(c) != "pass"]}


def compute(out: Path, resume: bool, ops, progress) -> dict[str, Any]:
    import torch

    partial_path = out.with_name(out.name + ".partial")
    doc: dict[str, Any] = {}
    if resume and partial_path.exists():
        doc = json.loads(partial_path.read_text())
        progress(f"resuming: stages done: {', '.join(s for s in STAGES if s in doc) or 'none'}")
    doc.update(schema=SCHEMA, torch=torch.__version__, python=platform.python_version(),
               cpu_count=os.cpu_count(), ops=list(ops) if ops else None)
    doc.setdefault("seconds", {})

    def save() -> None:
        partial_path.write_text(json.dumps(doc, sort_keys=True))

    steps = {
        "extension": lambda: extension_stage(progress),
        "probes": probes,
        "matrix": lambda: matrix_stage(progress),
        "check": lambda: check_stage(progress, ops),
        "time": lambda: time_stage(progress, doc["check"], ops),
        "instructions": lambda: instructions_stage(progress, doc["check"], doc, save, ops),
    }
    for stage in STAGES:
        if stage in doc:
            continue
        progress(f"stage {STAGES.index(stage) + 1}/{len(STAGES)}: {stage}")
        t0 = time.perf_counter()
        doc[stage] = steps[stage]()
        doc["seconds"][stage] = round(time.perf_counter() - t0, 1)
        save()
    doc["when"] = time.strftime("%Y-%m-%d")
    return doc


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab import command

    prog = "python -m funcbwd_lab.studies.cpp"
    p = argparse.ArgumentParser(prog=prog, description="The C++ study (docs/cpp.md): build the "
                                "extension, run the matrix, measure instructions and time. "
                                + DURATION + ".")
    p.add_argument("--out", required=True, help="the JSON to write (e.g. data/cpp.json)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.partial")
    p.add_argument("--ops", help="comma-separated test ops (default: all 8)")
    command.add_force(p)
    command.add_common(p)
    a = p.parse_args(argv)
    if command.out_refused(prog, a.out, a.force):
        return 2
    say = command.say_of(a, "cpp")
    say(f"this takes {DURATION}; progress follows")
    from funcbwd_lab.studies.cpp import build

    why = build.unavailable()
    if why:
        print(f"{prog}: error: the C++ extension cannot be built here: {why}", file=sys.stderr)
        return 2
    ops = a.ops.split(",") if a.ops else None
    out = Path(a.out)
    doc = compute(out, a.resume, ops, say)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    out.with_name(out.name + ".partial").unlink(missing_ok=True)
    total = sum(doc["seconds"].values())
    print(f"wrote {out} ({total / 60:.0f} min)")
    return 0
