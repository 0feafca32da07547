"""The bench's copies and memory: what functionalizing adds besides time.

* :func:`copy_section`: copies and bytes per op x label counted in the FX graph of the formula
  form each label runs (:func:`funcbwd_lab.studies.graphs.graphs.copy_table`; labels sharing a form share a
  capture), plus ``handfixed``'s graph (core's modern formula as written, captured as the
  ``plain`` form of that formula) so copies can be compared with the reference that has no
  functionalization;
* :func:`memory_section`: the bytes the batched backward allocates, from ``torch.profiler``
  memory events, for every label that passed the correctness check.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

from funcbwd_lab.batching.copy import batched_copy_rule
from funcbwd.errors import first_line
from funcbwd_lab.studies.bench.config import COPY_RULE, BenchConfig, variant
from funcbwd_lab.studies.bench.inputs import cotangents, resize
from funcbwd_lab.ops import registry
from funcbwd_lab.strategies.handfixed import handfixed_formula

HANDFIXED = "handfixed"


def _jsonable(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = dataclasses.asdict(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return str(x)


def handfixed_copy_row(op: str, vmap: bool, builtin: dict[str, Any]) -> dict[str, Any]:
    """A ``copy_table``-shaped row for the handfixed formula of ``op`` (its graph as written:
    it is out of place, so there is nothing to functionalize), extras against ``builtin``'s row."""
    from funcbwd_lab.studies.graphs import graphs

    spec = registry.get_op(op)
    formula = handfixed_formula(spec)
    row = {"op": op, "form": HANDFIXED, "vmap": vmap, "sample": spec.samples()[0].name,
           "copies": None, "copy_bytes": None, "written_bytes": None, "extra_copies": None,
           "extra_copy_bytes": None, "extra_written_bytes": None, "copy_ops": "", "error": ""}
    if formula is None:
        row["error"] = f"no handfixed formula for {op}"
        return row
    s = graphs.copy_accounting(dataclasses.replace(spec, formula=formula), "plain", vmap=vmap)
    if s.error:
        row["error"] = s.error
        return row
    row.update(copies=s.copies, copy_bytes=s.copy_bytes, written_bytes=s.written_bytes,
               copy_ops=", ".join(f"{k} x{v[0]}" for k, v in s.by_op.items()))
    if not builtin.get("error"):
        row.update(extra_copies=s.copies - builtin["copies"],
                   extra_copy_bytes=s.copy_bytes - builtin["copy_bytes"],
                   extra_written_bytes=s.written_bytes - builtin["written_bytes"])
    return row


def copy_section(cfg: BenchConfig) -> dict[str, Any]:
    """Copies and bytes per op x label, ``extra_*`` against builtin (see the module docstring).
    ``per_formula+copy_rule`` is per_formula's capture taken with the copy rule active."""
    if not cfg.copy_vmap_modes:
        return {"status": "skipped", "reason": "copy_vmap_modes is empty in this config"}
    from funcbwd_lab.studies.graphs import graphs

    table, form_of = graphs.copy_table, graphs.check_form
    labels = [s for s in cfg.labels() if s in graphs.STRATEGY_FORMS and s != "builtin"]
    forms = list(dict.fromkeys(form_of(s) for s in labels))
    rows, errors = [], []
    for op in cfg.ops:
        for vm in cfg.copy_vmap_modes:
            try:
                by_form = dict(zip(forms + ["builtin"], table([op], forms, vmap=vm)))
                if vm and COPY_RULE in cfg.strategies:
                    with batched_copy_rule():
                        by_form[COPY_RULE] = table([op], [form_of("per_formula")], vmap=True)[0]
                by_form[HANDFIXED] = handfixed_copy_row(op, vm, by_form["builtin"])
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                errors.append({"op": op, "vmap": vm, "error": f"{type(e).__name__}: {first_line(str(e))}"})
                continue
            for label in labels + ["builtin", HANDFIXED] + ([COPY_RULE] if COPY_RULE in by_form else []):
                form = label if label in (COPY_RULE, "builtin", HANDFIXED) else form_of(label)
                rows.append({"label": label, **_jsonable(by_form[form])})
    return {"status": "ok", "source": "funcbwd_lab.studies.graphs.graphs.copy_table (handfixed: "
            "graphs.copy_accounting of the handfixed formula as written)", "rows": rows, "errors": errors}


def allocation_profile(fn: Callable[[], Any]) -> dict[str, int]:
    """Bytes ``fn`` allocates on the CPU, from ``torch.profiler`` memory events: the total of
    allocations, their count, and the peak of live bytes (an op's own allocations count at its
    start, frees as the profiler's ``[memory]`` events; relative to the start, so memory held
    before the call is not included)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    deltas = sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events()
                    if e.self_cpu_memory_usage)
    live = peak = total = count = 0
    for _, d in deltas:
        live += d
        peak = max(peak, live)
        if d > 0:
            total += d
            count += 1
    return {"allocated_bytes": total, "allocations": count, "peak_bytes": peak}


def memory_section(cfg: BenchConfig, applicability: list[dict[str, Any]],
                   batched_callables: Callable[..., tuple]) -> list[dict[str, Any]]:
    """Allocation profile of ``vmap(vjp_fn)`` per op x size x memory batch x passing label
    (``batched_callables(spec, sample, strategy, cotangents)`` builds the call, as the timings do)."""
    passing = {(a["op"], a["size"], a["label"]) for a in applicability if a["status"] == "pass"}
    rows = []
    for op in cfg.ops:
        spec = registry.get_op(op)
        for size in cfg.sizes:
            labels = [lbl for (o, s, lbl) in sorted(passing) if o == op and s == size]
            if not labels:
                continue
            smp = resize(spec, size)
            for batch in cfg.memory_batches:
                cts = cotangents(spec, smp, batch, seed=500 + batch)
                for label in labels:
                    v = variant(label)
                    batched, _ = batched_callables(spec, smp, v.strategy, cts)
                    with v.context(), warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        batched()  # warm-up: traces and caches are not the backward's memory
                        prof = allocation_profile(batched)
                    rows.append({"op": op, "size": size, "batch": batch, "label": label, **prof})
    return rows
