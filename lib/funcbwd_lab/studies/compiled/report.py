"""The study's data file (``data/compiled.json``) and its text render (lines <= 100 columns).

:func:`collect` runs every part (:mod:`.outcomes`, :mod:`.cost`) and returns the JSON-ready dict;
:func:`render` turns it into text: one grid per backend (op x scenario, a short code per cell,
:func:`code`), the failure kinds with their first lines and where dynamo broke the graph, the cells
where backends differ, the control (:func:`~.outcomes.drop_probe`), the ``vmap(vjp_fn)`` variant,
the cost table and what a cell costs per backend.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from funcbwd_lab.ops import registry
from funcbwd_lab.run.scenarios import BACKWARD_NAMES
from funcbwd_lab.strategies.compiled import BACKENDS, DROP_ISSUE, Compiled
from funcbwd_lab.studies.compiled import cost, outcomes
from funcbwd_lab.tables import paragraph

FILE_NAME = "compiled.json"
WIDTH = 100

#: cell codes of the grids (:func:`code`), in legend order
CODES = {
    "PASS": "pass, the compiled graph ran the legacy formula (the mechanism)",
    "torch": "pass, compiled - but dynamo dropped the legacy backward: torch's own formula ran",
    "eager": "pass in an eager fallback (no graph holds the transform): not a pass of compile",
    "mism": "result differs from the per-sample loop",
    "dynamo": "fail: dynamo raised while tracing (before any backend)",
    "backend": "fail: the backend raised on dynamo's graph",
    "e:inpl": "fail in an eager fallback: vmap's in-place error (plain's failure)",
    "e:data": "fail in an eager fallback: data-dependent op under vmap (plain's failure)",
    "e:othr": "fail in an eager fallback: other error",
    "c:fail": "fail: the compiled graph raised",
    "n/a": "not applicable",
}
_SHORT = {"vmap_inplace": "e:inpl", "data_dependent": "e:data"}
#: grid column heads
ABBREV = {"vmap_cotangents": "v_cots", "vmap_all_args": "v_all", "vjp_of_vjp": "vjp_vjp",
          "grad_inside_vmap": "v_grad", "jacrev": "jr", "jacrev_jacrev": "jr_jr",
          "jacfwd_jacrev": "jf_jr", "vmap_jacrev": "v_jr"}


def code(row: dict[str, Any]) -> str:
    """The grid code of an outcome row (:data:`CODES`), computed from its fields."""
    status = row["status"]
    if status == "not_applicable":
        return "n/a"
    if status == "pass":
        if row["mechanism_ran"]:
            return "PASS"
        return "torch" if row["transform_in_graph"] and not row["function_in_graph"] else "eager"
    if status == "mismatch":
        return "mism"
    if row["error_stage"] in ("dynamo", "backend"):
        return row["error_stage"]
    if not row["transform_in_graph"]:
        return _SHORT.get(row["reason"], "e:othr")
    return "c:fail"


def _timed(label: str, fn: Callable[[], Any], say: Callable[[str], None]) -> tuple[Any, float]:
    say(f"{label} ...")
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    say(f"{label}: {seconds:.0f} s")
    return out, seconds


def collect(backends: Sequence[str] = BACKENDS, ops: Sequence[str] = registry.TEST_OPS,
            scenarios: Sequence[str] = BACKWARD_NAMES, cost_backends: Sequence[str] | None = None,
            cost_cases: Iterable[tuple[str, str]] | None = None, batch: int = cost.BATCH,
            pairs: int = 21, row: bool = True,
            say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every part of the study (``row``: also the registered row over every sample); ``say`` gets
    one progress line per cell / case."""
    def cell(r: dict) -> None:
        say(f"  {r['backend']:<9} {r['op']:<13} {r['scenario']:<16} {code(r):<7} {r['seconds']:.1f} s")

    rows, t_out = _timed("outcomes", lambda: outcomes.outcomes(backends, ops, scenarios, cell), say)
    def row_cell(r: Any) -> None:
        say(f"  {r.strategy:<9} {r.op:<13} {r.scenario:<16} {r.sample[:20]:<21} {r.status}")

    reg, t_row = _timed("registered row, every sample",
                        lambda: outcomes.registered_row(ops, scenarios, row_cell) if row else [], say)
    probe, t_probe = _timed("drop probe", lambda: outcomes.drop_probe(backends), say)
    variant, t_var = _timed("vmap(vjp_fn) variant",
                            lambda: outcomes.vjp_fn_outcomes(backends, ops), say)
    costs, t_cost = _timed("cost", lambda: cost.run(cost_backends or backends, cost_cases, batch,
                                                    pairs, progress=_cost_progress(say)), say)
    return {
        "meta": {"torch": torch.__version__, "python": platform.python_version(),
                 "backends": list(backends), "registered_backend": Compiled.backend,
                 "ops": list(ops), "scenarios": list(scenarios), "sample": "first of each op",
                 "batch": batch, "pairs": pairs, "num_threads": 1, "clock": "thread_cpu",
                 "drop_issue": DROP_ISSUE,
                 "seconds": {"outcomes": round(t_out), "registered_row": round(t_row),
                             "drop_probe": round(t_probe),
                             "vjp_fn_variant": round(t_var), "cost": round(t_cost)}},
        "outcomes": rows,
        "backend_differences": outcomes.backend_differences(rows),
        "registered_row": reg,
        "drop_probe": probe,
        "vjp_fn_outcomes": variant,
        "cost": costs,
    }


def _cost_progress(say: Callable[[str], None]) -> Callable[[dict], None]:
    def case(r: dict) -> None:
        ratio = (f"{r['ratio']:.2f}" if "ratio" in r
                 else "WRONG" if "wrong" in r else r.get("error", "?")[:40])
        say(f"  {r['variant']:<12} {r['backend']:<9} {r['op']:<13} {r['size']:<6} "
            f"compile {r['compile_s']:.1f} s  ratio {ratio}")
    return case


def recollect_cost(data: dict[str, Any], say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """``data`` with its cost section measured again (same backends, batch and pairs as its
    meta), every other section kept: what ``--only cost`` saves."""
    meta = data["meta"]
    costs, seconds = _timed("cost", lambda: cost.run(meta["backends"], None, meta["batch"],
                                                     meta["pairs"], progress=_cost_progress(say)), say)
    if meta["torch"] != torch.__version__:
        raise RuntimeError(f"the saved study ran on torch {meta['torch']}, this is "
                           f"{torch.__version__}: re-run the whole study")
    return {**data, "meta": {**meta, "seconds": {**meta["seconds"], "cost": round(seconds)}},
            "cost": costs}


def save(data: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


def load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


# ------------------------------------------------------------------------------ render
def _grid(rows: Sequence[dict], backend: str, scenarios: Sequence[str]) -> list[str]:
    mine = {(r["op"], r["scenario"]): r for r in rows if r["backend"] == backend}
    ops = list(dict.fromkeys(r["op"] for r in rows if r["backend"] == backend))
    heads = [ABBREV.get(s, s)[:9] for s in scenarios]
    lines = [f"{'op':<14}" + "".join(f"{h:<10}" for h in heads)]
    for op in ops:
        lines.append(f"{op:<14}" + "".join(f"{code(mine[(op, s)]) if (op, s) in mine else '':<10}"
                                           for s in scenarios))
    return lines


def _row_text(cell: dict[str, Any]) -> str:
    if cell["status"] == "pass":
        return "ok" if cell["mechanism_ran"] else "ok*"
    if cell["status"] == "not_applicable":
        return "n/a"
    head = "F" if cell["status"] == "fail" else "W"
    reason = {"vmap_inplace": "inpl", "data_dependent": "data", "other": "oth"}.get(
        cell["reason"], cell["reason"][:4])
    return f"{head}{cell['passed']}/{cell['total']} {reason}".rstrip()


def _row_grid(cells: Sequence[dict], scenarios: Sequence[str]) -> list[str]:
    by = {(c["op"], c["scenario"]): c for c in cells}
    ops = list(dict.fromkeys(c["op"] for c in cells))
    lines = [f"{'op':<14}" + "".join(f"{ABBREV.get(s, s)[:9]:<10}" for s in scenarios)]
    for op in ops:
        lines.append(f"{op:<14}" + "".join(f"{_row_text(by[(op, s)]) if (op, s) in by else '':<10}"
                                           for s in scenarios))
    lines += ["ok* = passed, mechanism not run (eager fallback or torch's formula);",
              "Fn/r = fail, n of r samples passed; Wn/r = a sample differs from the loop"]
    return lines


def _failure_kinds(rows: Sequence[dict]) -> list[str]:
    kinds: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r["status"] == "pass" or r["status"] == "not_applicable":
            continue
        key = (code(r), r["error"].split(": ", 1)[0], r["error"].split(": ", 1)[-1][:WIDTH - 4])
        k = kinds.setdefault(key, {"count": {}, "breaks": {}, "cell": r})
        for field in ("first_break_inside_transform", "first_break"):
            if r.get(field):
                k["breaks"][(field, r[field])] = k["breaks"].get((field, r[field]), 0) + 1
                break
        k["count"][r["backend"]] = k["count"].get(r["backend"], 0) + 1
    out = []
    for (c, cls, msg), k in sorted(kinds.items(), key=lambda kv: -sum(kv[1]["count"].values())):
        counts = ", ".join(f"{b} {n}" for b, n in k["count"].items())
        out.append(f"[{c}] {cls}:")
        out.append(f"    {msg}")
        out.append(f"    cells: {counts}; e.g. {k['cell']['op']} {k['cell']['scenario']}")
        for (field, text), n in sorted(k["breaks"].items(), key=lambda kv: -kv[1]):
            where, why = text.split(": ", 1)
            what = "inside the transform" if field == "first_break_inside_transform" else "outside it"
            out.append(f"    {n} cells: break {what} at {where}:")
            out.append(f"      {why}")
    return out


def _err(d: dict) -> str:
    if "error" in d:
        return d["error"][:44]
    return f"|d torch| {d['err_vs_torch']:.2g}, |d 2x torch| {d['err_vs_twice_torch']:.2g}"


def _cost_lines(rows: Sequence[dict]) -> list[str]:
    lines = [f"{'variant':<13}{'backend':<10}{'op':<14}{'shape':<6}{'compile':>8}{'eager':>9}"
             f"{'compiled':>10}  {'ratio [95% CI]':<20}graph"]
    for r in rows:
        head = f"{r['variant']:<13}{r['backend']:<10}{r['op']:<14}{r['shape']:<6}{r['compile_s']:>7.1f}s"
        if "ratio" not in r:
            why = r.get("error") or ("WRONG: " + r["wrong"] if "wrong" in r else "?")
            lines += paragraph(why, WIDTH, f"{head}  ", " " * 4).splitlines()
            continue
        lo, hi = r["ratio_ci"]
        graph = "yes" if r["transform_in_graph"] else "no"
        lines.append(f"{head}{r['eager_s'] * 1e6:>7.0f}us{r['compiled_s'] * 1e6:>8.0f}us  "
                     f"{r['ratio']:.2f} [{lo:.2f}, {hi:.2f}]   {graph}")
    return lines


def render(data: dict[str, Any]) -> str:
    meta, rows = data["meta"], data["outcomes"]
    out = [f"torch.compile x vmap(vjp) with the legacy in-place formulas (torch {meta['torch']})",
           f"each cell: the op's first sample, through the cell runner (compared with the "
           f"per-sample loop);", f"backends {', '.join(meta['backends'])}; registered row "
           f"'compiled' = {meta['registered_backend']}", ""]
    for b in meta["backends"]:
        out += [f"-- backend {b}", *_grid(rows, b, meta["scenarios"]), ""]
    names = [f"{ABBREV.get(s, s)} = {s}" for s in meta["scenarios"]]
    out += ["columns: " + ", ".join(names[:3]), "         " + ", ".join(names[3:6]),
            "         " + ", ".join(names[6:])]
    out += ["codes:", *[f"  {c:<8}{text}" for c, text in CODES.items()], ""]
    out += ["graph (cost): the transform is in a compiled graph; 'no': dynamo fell back to eager", ""]
    ran = sum(r["mechanism_ran"] for r in rows)
    out += [f"cells where the compiled graph ran the legacy formula: {ran} of {len(rows)}", ""]
    out += ["failure kinds (first line of the error):", *_failure_kinds(rows), ""]
    diffs = data["backend_differences"]
    out += [f"cells whose outcome differs between backends: {len(diffs)}"]
    for d in diffs:
        by = "; ".join(f"{b} {v[0]}{'/' + v[3] if v[3] else ''}" for b, v in d["by_backend"].items())
        out.append(f"  {d['op']} {d['scenario']}: {by}")
    if data.get("registered_row"):
        out += ["", f"registered row 'compiled' ({meta['registered_backend']}), every sample "
                "(worst over samples, passed/applicable):", *_row_grid(data["registered_row"],
                                                                       meta["scenarios"])]
    out += ["", f"control ({meta['drop_issue']}): diag as a well-formed autograd.Function, "
            "vmap(vjp) compiled whole"]
    for p in data["drop_probe"]:
        out.append(f"  backward {p['backward']:<22} {p['backend']:<10} eager:    {_err(p['eager'])}")
        out.append(f"  {'':<43}compiled: {_err(p['compiled'])}")
    out += ["", "torch.compile(vmap(vjp_fn)) only, vjp_fn made eagerly (legacy formula as written):"]
    breaks: dict[str, int] = {}
    for r in data["vjp_fn_outcomes"]:
        what = "eager fallback" if not r["transform_in_graph"] else "compiled"
        out.append(f"  {r['backend']:<10}{r['op']:<14}{r['status']:<6}{r['reason']:<14}{what}")
        why = r["first_break"].split(": ", 1)[-1]
        breaks[why or "(no graph break)"] = breaks.get(why or "(no graph break)", 0) + 1
    out += [f"  first graph break: {why} ({n} of {len(data['vjp_fn_outcomes'])} rows)"
            for why, n in breaks.items()]
    out += ["", f"cost on torch's own ops (builtin formulas), batch {meta['batch']}, "
            f"{meta['pairs']} pairs, {meta['clock']} clock;",
            "ratio = compiled / eager per pair: median [95% interval]; compile = first call, wall",
            *_cost_lines(data["cost"]), ""]
    out += ["seconds per outcome cell (compile + run + loop), by backend:"]
    for b in meta["backends"]:
        s = [r["seconds"] for r in rows if r["backend"] == b]
        if s:
            out.append(f"  {b:<10} median {statistics.median(s):.1f}  max {max(s):.1f}  "
                       f"total {sum(s):.0f} over {len(s)} cells")
    out.append("study sections (s): " + ", ".join(f"{k} {v}" for k, v in meta["seconds"].items()))
    return "\n".join(line[:WIDTH] for line in out) + "\n"
