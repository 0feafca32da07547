"""Where torch's builtin backward takes vmap's slow per-sample fallback, how much faster is
``traced_backward``'s joint graph?

Candidates: every OpInfo op whose float32 ``vmapvjp`` records of ``builtin`` in the saved sweep
(``data/coverage.json.gz``, :mod:`funcbwd_lab.studies.coverage.data`) have non-empty
``fallback_ops``.

Per op: its float32 samples in order, each built as the sweep builds it (an OpInfo cell,
:func:`funcbwd_lab.studies.coverage.opinfo.case_for`, and functorch's ``vmapvjp`` composition,
:mod:`funcbwd_lab.run.compositions`: distinct batch entries, the per-sample loop of torch's vjp as
the reference) at batch 64; per sample the in_dims choices in the sweep's order (all args at 0
first). The first (sample, in_dims) where builtin passes *and takes the fallback* and
traced_backward passes (both compared with the loop, :func:`funcbwd.compare.check_close`)
is timed at each batch (default 8 and 64): ``vmap(h, in_dims)(*args)``, ``h`` the whole ``vjp``
(eager forward, then ``vjp_fn`` on the cotangents) as the composition builds it
(:meth:`Composition.actual`; traced_backward with its scoped batching rules, as in the sweep;
its graph is traced in the warm-up call, not timed; trace seconds are reported apart); at batch
64 also the floor (:func:`funcbwd_lab.studies.coverage.fallback_targets.floor_function`: one batched
call of the same math without vmap, where the op has one). Timing: ``repeats`` rounds, the arms
back to back in each, the order rotating (:func:`funcbwd_lab.studies.bench.timing.sample_once`, the
thread-CPU clock, one torch thread: immune to other processes on a shared machine); per op the
median of the per-round ratios builtin / traced (speedup) and traced / floor (time) with a
distribution-free 95% interval (:func:`funcbwd_lab.studies.bench.timing.median_interval`).
vmap's fallback warnings are swallowed while timing (they come on every call). Then the large
inputs (:func:`funcbwd_lab.studies.coverage.fallback_targets.large_inputs`).

An op fails (with the reason) when it cannot be swept, when no (sample, in_dims) within the
per-op budget has both passing with builtin falling back, or when timing raises. Across the
measured ops: quartiles, worst, best, and the targets of issue 30, each met, missed or not
resolved (:func:`funcbwd_lab.studies.coverage.fallback_targets.targets`). A pass where
traced_backward refused its graph (whole's mechanism ran) is measured and flagged (``graph_ran``
False, with the refusal); each graph's decomposed and left fallback ops are recorded.

Run: ``python -m funcbwd_lab.studies.coverage.fallback_speedup --coverage data/coverage.json.gz
--out data/fallback-speedup.json`` (progress on stderr; ``--force`` to overwrite the committed
file).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gzip
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch


from funcbwd_lab import command
from funcbwd.errors import first_line
from funcbwd_lab.progress import Progress
from funcbwd_lab.studies.bench import results as bench_results
from funcbwd.compare import compare
from funcbwd_lab.run.compositions import BUILDERS, Composition
from funcbwd_lab.run.entries import distinct_entries
from funcbwd_lab.run.functorch import SampleView
from funcbwd_lab.run.outcomes import fallbacks_seen
from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.coverage import fallback_targets, opinfo
from funcbwd_lab.studies.coverage.fallback_targets import format_result  # noqa: F401 (the study's text)
from funcbwd_lab.strategies import get_strategy, provenance
from funcbwd_lab.fx.forward_graph import ForwardGraph
from funcbwd_lab.strategies.traced_backward import (FALLBACK, FORWARD_GRAPH, PASSTHROUGH, JointGraph,
                                               TracedBackward)

#: traced_backward / builtin speedup the median op must reach at every batch >= 8 (issue 30;
#: 10x before: no floor reaches it at these sizes)
TARGET = 1.0
DEFAULT_BATCHES = (8, 64)
#: the batch the (sample, in_dims) is searched at; the floor's batch
SEARCH_BATCH = FLOOR_BATCH = 64
COMPOSITION = "vmapvjp"
FILE_NAME = "fallback-speedup.json"  # in the checkout's data/
DEFAULT_REPEATS = 21
#: the fewest pairs a tight per-op budget may cut the repeats to (a 95% interval for the median,
#: :func:`funcbwd_lab.studies.bench.timing.median_interval`, needs at least 6)
MIN_REPEATS = 9
DEFAULT_BUDGET_S = 60.0
#: seconds one timed sample aims at (calls per sample calibrated to it)
SAMPLE_S = 0.02


def candidates(path: str | Path) -> dict[str, list[str]]:
    """op -> the ATen ops builtin fell back for, over its builtin records of :data:`SCENARIOS`."""
    with gzip.open(path, "rt") as f:
        records = json.load(f)["records"]
    out: dict[str, set[str]] = {}
    for r in records:
        if (r["strategy"] == "builtin" and r["composition"] == COMPOSITION and r["dtype"] == "float32"
                and r["fallback_ops"]):
            out.setdefault(r["op"], set()).update(r["fallback_ops"])
    return {op: sorted(v) for op, v in sorted(out.items())}


# ------------------------------------------------------------------------------ one configuration
@dataclasses.dataclass
class Prepared:
    """One OpInfo sample as the sweep's ``vmapvjp`` composition, with its batch entries."""

    composition: Composition
    entries: list
    batch: int
    entries_kind: str = "distinct"

    @property
    def choices(self) -> list[tuple]:
        return self.composition.in_dims()

    def batched(self, in_dims: tuple) -> list:
        return self.composition.batched(in_dims, self.entries)

    def call(self, strategy: Any, in_dims: tuple, args: Sequence[Any] | None = None) -> tuple:
        return self.composition.actual(in_dims, self.batched(in_dims) if args is None else args,
                                       vjp=strategy.vjp)

    def expected(self, in_dims: tuple) -> tuple:
        return self.composition.expected(in_dims, self.entries)


def prepare(op: Any, sample: Any, batch: int) -> Prepared | str:
    case = opinfo.case_for(op, sample, "0")
    if isinstance(case, str):
        return case
    spec, smp = case
    args = [a.detach().requires_grad_(i in smp.diff)
            if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
            else a for i, a in enumerate(smp.args)]
    view = SampleView(args[0], tuple(args[1:]), {})
    c = BUILDERS[COMPOSITION](lambda *a: spec.torch_op(*a), view, torch.Generator().manual_seed(1000),
                              name=spec.name)
    return Prepared(c, distinct_entries(c.tensors(), batch, 0), batch)


def _attempt(p: Prepared, strategy: Any, in_dims: tuple, rules: bool) -> dict[str, Any]:
    """One checked call of the batched vjp: status, fallback ops, the strategy's events."""
    st = strategy.with_rules() if rules else strategy
    out: dict[str, Any] = {"status": "pass", "message": "", "fallback_ops": [], "events": []}
    with fallbacks_seen() as seen:
        try:
            with provenance.collecting() as events:
                actual = p.call(st, in_dims)
            out["events"] = [e for e in events if e.strategy == strategy.name]
            c = compare(actual, p.expected(in_dims))
            if not c.ok:
                out.update(status="mismatch", message=c.detail)
        except Exception as e:  # noqa: BLE001 - a failure is a reason, not a crash of the study
            out.update(status="fail", message=f"{type(e).__name__}: {first_line(str(e), 160)}")
    out["fallback_ops"] = seen.ops
    return out


def time_arms(arms: Sequence[Callable[[], Any]], repeats: int, budget_s: float = 60.0,
              contexts: Sequence[Callable[[], Any]] | None = None) -> dict[str, Any]:
    """Interleaved timing of ``arms`` (each warmed up and calibrated first: a graph is traced
    there, not timed): ``repeats`` rounds (cut to the budget, at least :data:`MIN_REPEATS`), each
    arm once per round, the order rotating; ``contexts`` are entered around each sample, outside
    its clock. Thread-CPU seconds per call: ``samples[arm][round]`` (round ``i`` of every arm
    is one paired set)."""
    contexts = list(contexts or [contextlib.nullcontext] * len(arms))
    numbers, round_s = [], 0.0
    with warnings.catch_warnings(), fallbacks_seen():  # the fallback warns on every call
        warnings.simplefilter("ignore")
        for arm, ctx in zip(arms, contexts):
            with ctx():
                numbers.append(timing.calibrate(arm, SAMPLE_S, 1000))
                round_s += timing.sample_once(arm, 1)["wall"] * numbers[-1]
        reps = min(repeats, max(MIN_REPEATS, int(budget_s / max(round_s, 1e-9))))
        samples: list[list[float]] = [[] for _ in arms]
        order = list(range(len(arms)))
        for i in range(reps):
            for a in order[i % len(arms):] + order[:i % len(arms)]:
                with contexts[a]():
                    samples[a].append(round(timing.sample_once(arms[a], numbers[a])["thread_cpu"], 9))
    return {"repeats": reps, "numbers": numbers, "samples": samples}


def _ratio(num: Sequence[float], den: Sequence[float]) -> tuple[float, list[float]]:
    ratios = [a / b for a, b in zip(num, den)]
    lo, hi = timing.median_interval(ratios)
    return statistics.median(ratios), [lo, hi]


def _timed(p: Prepared, in_dims: tuple, traced: TracedBackward, repeats: int, budget_s: float,
           with_floor: bool) -> dict[str, Any]:
    """builtin and traced_backward (and the floor, :func:`fallback_targets.floor_function`) at
    ``p``'s batch, paired: builtin / traced (speedup) and traced / floor (time), each the median
    of the per-round ratios with its 95% interval. traced_backward runs with its scoped rules
    (``with_rules``: around its graph, as in the sweep)."""
    args = p.batched(in_dims)
    builtin = get_strategy("builtin")
    scoped = traced.with_rules()  # the rules around its graph, as in the sweep
    with warnings.catch_warnings(), fallbacks_seen():
        warnings.simplefilter("ignore")
        p.call(scoped, in_dims, args)  # the first call at this batch decides what installs
        with provenance.collecting() as events:
            p.call(scoped, in_dims, args)  # what runs from then on
    installed = sorted({e.mechanism for e in events if e.strategy == traced.name})
    arms = [lambda: p.call(builtin, in_dims, args), lambda: p.call(scoped, in_dims, args)]
    contexts = [contextlib.nullcontext, contextlib.nullcontext]
    floor, how = fallback_targets.floor_function(p, in_dims) if with_floor else (None, "")
    if floor is not None:
        arms.append(floor)
        contexts.append(contextlib.nullcontext)
    t = time_arms(arms, repeats, budget_s, contexts)
    cpu = t["samples"]
    speedup, ci = _ratio(cpu[0], cpu[1])
    out: dict[str, Any] = {
        "batch": p.batch, "repeats": t["repeats"], "numbers": t["numbers"],
        "builtin_s": cpu[0], "traced_s": cpu[1],
        "builtin_median_s": statistics.median(cpu[0]), "traced_median_s": statistics.median(cpu[1]),
        "speedup": speedup, "speedup_ci95": ci, "installed": installed}
    if with_floor:
        if floor is None:
            out["floor"] = {"why": how}
        else:
            tf, tf_ci = _ratio(cpu[1], cpu[2])
            bf, bf_ci = _ratio(cpu[0], cpu[2])
            out["floor"] = {"layout": how, "floor_s": cpu[2], "floor_median_s": statistics.median(cpu[2]),
                            "traced_over_floor": tf, "traced_over_floor_ci95": tf_ci,
                            "builtin_over_floor": bf, "builtin_over_floor_ci95": bf_ci}
    return out


def measure_op(name: str, batches: Sequence[int] = DEFAULT_BATCHES, repeats: int = DEFAULT_REPEATS,
               budget_s: float = DEFAULT_BUDGET_S) -> dict[str, Any]:
    """One op's row: the first (sample, in_dims) at batch :data:`SEARCH_BATCH` where both pass
    and builtin falls back, timed at each of ``batches`` (the floor at :data:`FLOOR_BATCH`); or
    ``status`` "failed" with the ``reason`` (and what each tried sample did)."""
    start = time.perf_counter()
    row: dict[str, Any] = {"op": name, "status": "failed", "reason": "", "tried": []}
    op = opinfo.op_by_id(name)
    why = opinfo.not_sweepable(op)
    if why:
        row["reason"] = why
        return row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smps = opinfo.samples(op)
    builtin = get_strategy("builtin")
    for i, sample in enumerate(smps):
        if time.perf_counter() - start > budget_s:
            row["reason"] = f"budget of {budget_s:.0f} s spent after {i} of {len(smps)} samples"
            break
        p = _prepared(op, sample, SEARCH_BATCH)
        if isinstance(p, str):
            row["tried"].append({"sample": i, "skipped": p})
            continue
        for in_dims in p.choices:
            if time.perf_counter() - start > budget_s:
                row["reason"] = (f"budget of {budget_s:.0f} s spent in sample {i} of {len(smps)} "
                                 "before a timed one")
                break
            b = _attempt(p, builtin, in_dims, rules=False)
            tried = {"sample": i, "in_dims": list(in_dims), "builtin": b["status"],
                     "builtin_fallback_ops": b["fallback_ops"]}
            row["tried"].append(tried)
            if b["status"] != "pass" or not b["fallback_ops"]:
                tried["why"] = b["message"] or "builtin takes no fallback here"
                continue
            traced = TracedBackward(cost_gate=True)
            t = _attempt(p, traced, in_dims, rules=True)  # the first call decides what installs
            if t["status"] == "pass":
                t = _attempt(p, traced, in_dims, rules=True)  # a later call: what then runs
            tried.update(traced_backward=t["status"], traced_fallback_ops=t["fallback_ops"])
            if t["status"] != "pass":
                tried["why"] = t["message"]
                continue
            forward = [e.detail for e in t["events"] if e.mechanism == FORWARD_GRAPH]
            graph = [e for e in t["events"] if e.ran and e.mechanism != FORWARD_GRAPH]
            refused = [e.detail for e in t["events"] if not e.ran and e.mechanism == FALLBACK]
            passthrough = [e.detail for e in t["events"] if e.mechanism == PASSTHROUGH]
            graphs = [h for h in traced.cached() if isinstance(h, JointGraph)]
            # reports of what runs from the second call on (not a first call's needless graph)
            report = graphs[0].fallbacks if graphs and graph else None
            fwd = next((h.report for h in traced.cached_forwards() if isinstance(h, ForwardGraph)),
                       None) if forward else None
            row.update(status="measured", sample=i, in_dims=list(in_dims), entries=p.entries_kind,
                       builtin_fallback_ops=b["fallback_ops"], traced_fallback_ops=t["fallback_ops"],
                       graph_ran=(bool(graph) and not refused and not passthrough) or bool(forward),
                       installed=("forward graph; " if forward else "") + (
                           "graph" if graph and not refused and not passthrough else
                           f"passthrough: {passthrough[0]}" if passthrough else
                           f"refused: {refused[0]}" if refused else "none"),
                       forward_graph=forward[0] if forward else "",
                       graph=(graph[0].detail if graph else ""), refusal=refused[0] if refused else "",
                       graph_decomposed=[*(report.decomposed if report else ()),
                                         *(f"forward: {o}" for o in (fwd.decomposed if fwd else ()))],
                       graph_fallbacks_left=[*([list(x) for x in report.left] if report else []),
                                             *([f"forward: {o}", w] for o, w in (fwd.left if fwd else ()))],
                       graph_probe=report.probe if report else "",
                       trace_s=(round(sum(traced.trace_seconds), 4) if traced.trace_seconds else None),
                       by_batch={})
            try:
                for batch in batches:
                    q = p if batch == SEARCH_BATCH else _prepared(op, sample, batch)
                    if isinstance(q, str):
                        row["by_batch"][str(batch)] = {"error": q}
                        continue
                    left = max(budget_s - (time.perf_counter() - start), 5.0) / max(len(batches), 1)
                    fresh = TracedBackward(cost_gate=True)  # its first call at this batch decides
                    timed = _timed(q, in_dims, fresh, repeats, left, batch == FLOOR_BATCH)
                    if "floor" in timed:
                        row["floor"] = timed.pop("floor")
                    row["by_batch"][str(batch)] = timed
                main_batch = row["by_batch"].get(str(SEARCH_BATCH)) or next(iter(row["by_batch"].values()))
                row.update(speedup=main_batch["speedup"], speedup_ci95=main_batch["speedup_ci95"])
            except Exception as e:  # noqa: BLE001
                row.update(status="failed", reason=f"timing raised {type(e).__name__}: "
                                                   f"{first_line(str(e), 120)}")
            row["seconds"] = round(time.perf_counter() - start, 2)
            return row
        if row["reason"]:
            break
    if not row["reason"]:
        row["reason"] = _why_none(row["tried"])
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def _prepared(op: Any, sample: Any, batch: int) -> Prepared | str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return prepare(op, sample, batch)
        except Exception as e:  # noqa: BLE001
            return f"prepare fails: {type(e).__name__}: {first_line(str(e), 120)}"


def _why_none(tried: Sequence[dict[str, Any]]) -> str:
    if not tried:
        return "no samples"
    if all("skipped" in t for t in tried):
        return "no sample can be swept: " + tried[0]["skipped"]
    if not any(t.get("builtin") == "pass" and t.get("builtin_fallback_ops") for t in tried):
        fails = [t for t in tried if t.get("builtin") and t["builtin"] != "pass"]
        return ("builtin takes no fallback where it passes at this batch"
                + (f" (and fails: {fails[0]['why']})" if fails else ""))
    bad = next((t for t in tried if t.get("traced_backward") not in (None, "pass")), None)
    return (f"traced_backward {bad['traced_backward']}s where builtin falls back: {bad['why']}"
            if bad else "no (sample, in_dims) where both pass")


# ------------------------------------------------------------------------------ the study
def summarize(rows: Sequence[dict[str, Any]], batches: Sequence[int] = DEFAULT_BATCHES,
              large: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The distribution of per-op median speedups at :data:`SEARCH_BATCH` over the measured ops,
    and the targets (:func:`fallback_targets.targets`)."""
    measured = sorted((r for r in rows if r["status"] == "measured"), key=lambda r: r["speedup"])
    s = [r["speedup"] for r in measured]
    t = fallback_targets.targets(measured, batches, large)
    if not s:
        return {"measured": 0, "failed": len(rows), "target": TARGET, "met": False, "targets": t}
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0]] * 3
    batch = SEARCH_BATCH if SEARCH_BATCH in batches else batches[0]
    return {"measured": len(s), "failed": len(rows) - len(s), "target": TARGET, "batch": batch,
            "median_speedup": statistics.median(s), "q1": q[0], "q3": q[2],
            "worst": {"op": measured[0]["op"], "speedup": s[0]},
            "best": {"op": measured[-1]["op"], "speedup": s[-1]},
            "met": t["speedup_b8_plus"]["verdict"] == "met",
            "at_least_target": sum(x >= TARGET for x in s), "slower": sum(x < 1 for x in s),
            "graph_refused": [r["op"] for r in measured if not r["graph_ran"]],
            "by_fallback_left": {k: {r["op"]: round(r["speedup"], 3) for r in measured
                                     if _left(r) == k} for k in ("none", "some", "all")},
            "targets": t}


def _left(row: dict[str, Any]) -> str:
    """How much of builtin's fallback traced_backward leaves: none, some or all of its ops (what
    is left runs in the eager forward, or in the graph)."""
    left = set(row["traced_fallback_ops"]) & set(row["builtin_fallback_ops"])
    return "none" if not row["traced_fallback_ops"] else "all" if left == set(
        row["builtin_fallback_ops"]) else "some"


def run(ops: str | Iterable[str] | None = None, batches: Sequence[int] = DEFAULT_BATCHES,
        repeats: int = DEFAULT_REPEATS, progress: bool = True, budget_s: float = DEFAULT_BUDGET_S,
        coverage_file: str | Path | None = None, large: bool = True) -> dict[str, Any]:
    """The study over ``ops`` (default: :func:`candidates` of ``coverage_file``), then the large
    inputs (unless ``large`` is False)."""
    found = candidates(coverage_file) if coverage_file and Path(coverage_file).exists() else {}
    chosen = list(found) if ops is None else opinfo.select_ops(ops)
    prog = Progress("fallback speedup", total=len(chosen), enabled=progress)
    rows = []
    with prog, timing.one_torch_thread():
        prog(f"{len(chosen)} ops, batches {list(batches)}, then {len(fallback_targets.LARGE_OPS)} "
             f"large-input ops: about {max(1, round(len(chosen) * 5 / 60))} min here (2 cores)")
        for k, name in enumerate(chosen, 1):
            prog.doing(name)
            row = measure_op(name, batches, repeats, budget_s)
            row["fallback_ops_in_sweep"] = found.get(name, [])
            rows.append(row)
            if row["status"] == "measured":
                text = " ".join(f"B={b} {v['speedup']:.2f}x" for b, v in row["by_batch"].items()
                                if "speedup" in v)
                fl = row.get("floor", {})
                text += (f", floor {fl['traced_over_floor']:.1f}x" if "traced_over_floor" in fl
                         else ", no floor") + ("" if row["graph_ran"] else " (no graph)")
                if row["graph_fallbacks_left"]:
                    text += " left: " + ",".join(o for o, _ in row["graph_fallbacks_left"])
            else:
                text = f"failed: {row['reason']}"
            prog(f"[{k}/{len(chosen)}] {name}: {first_line(text, 70)} ({row['seconds']} s)")
            prog.advance(failed=row["status"] != "measured")
        large_rows = fallback_targets.large_inputs(time_arms, repeats, prog) if large else []
    meta = {"torch": torch.__version__, "batches": list(batches), "search_batch": SEARCH_BATCH,
            "floor_batch": FLOOR_BATCH, "repeats": repeats, "budget_s": budget_s,
            "clock": "thread_cpu", "threads": 1, "date": datetime.date.today().isoformat(),
            "candidates": chosen, "large": bool(large),
            "source": "builtin vmapvjp float32 records with fallback_ops in data/coverage.json.gz",
            "method": __doc__.split("\n\n")[2].replace("\n", " ")}
    return {"meta": meta, "summary": summarize(rows, batches, large_rows), "ops": rows,
            "large": large_rows}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.coverage.fallback_speedup",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=None, help="comma-separated OpInfo ids (default: candidates)")
    ap.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)),
                    help=f"comma-separated batch sizes (the floor at {FLOOR_BATCH})")
    ap.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds per op")
    ap.add_argument("--no-large", action="store_true", help="skip the large-input rows")
    command.add_out(ap, "JSON file to write (data/fallback-speedup.json is committed: --force)")
    ap.add_argument("--coverage", default=None, metavar="FILE",
                    help="the sweep's data file whose builtin fallbacks name the candidates "
                         "(e.g. data/coverage.json.gz); required unless --ops")
    a = ap.parse_args(argv)
    if command.out_refused(ap.prog, a.out, a.force):
        return 2
    if a.ops is None and a.coverage is None:
        ap.error("give --coverage FILE (the candidates) or --ops")
    batches = tuple(int(b) for b in a.batches.split(",") if b.strip())
    result = run(a.ops, batches, a.repeats, True, a.budget, a.coverage, large=not a.no_large)
    print(format_result(result))
    if a.out:
        Path(a.out).write_text(json.dumps(bench_results.strict_json(result), indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
