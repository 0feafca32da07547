"""``funcbwd bench``: what functionalizing a backward costs, measured in one run as ratios.

The design thread asked "how bad is the performance overhead for functionalization, really?"
(functorch#241). One run answers, per op x label x input size x batch size:

* **batched backward**: the median time of ``vmap(vjp_fn)(cotangents)`` against (a) ``handfixed``
  (core's modern out-of-place formula in Python through the same legacy-op machinery: the ratio
  is what functionalization, plus our machinery, costs), (b) ``builtin`` (torch's C++ formula:
  the ratio adds what running a formula in Python costs at all) and (c) the per-sample Python
  loop a user writes when vmap fails (the same label's unbatched ``vjp_fn`` once per cotangent);
* **vmap off** (:mod:`funcbwd_lab.studies.bench.overhead`): a plain ``torch.autograd.grad`` with each
  strategy installed, and the hooks claim as paired differences with a 95% interval;
* **copies and memory** (:mod:`funcbwd_lab.studies.bench.copies`).

Labels are interleaved (each round times every label once, in a rotating order) so machine noise
hits all alike; every raw sample is kept and ratios are computed from medians of the same run
(:mod:`funcbwd_lab.studies.bench.results`). The default clock is the timing thread's CPU time (one
intra-op thread): on a shared machine wall time mostly measures the other processes; wall time is
recorded too. Timings are never thresholds: the targets are reported, not asserted. Run from a
terminal with ``python -m funcbwd_lab bench`` (:mod:`funcbwd_lab.studies.bench.cli`).
"""

from __future__ import annotations

import datetime
import os
import platform
import time
import warnings
from typing import Any, Callable

import torch
from torch.func import vmap

from funcbwd_lab.studies.bench import copies as bench_copies
from funcbwd_lab.studies.bench import overhead as bench_overhead
from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.bench.config import BenchConfig, Variant, variant
from funcbwd_lab.studies.bench.inputs import cotangents, resize, shape_text
from funcbwd_lab.ops import registry
from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.run import runner
from funcbwd_lab.run.scenario import bind
from funcbwd_lab.strategies import available, get_strategy


# ------------------------------------------------------------------------------ batched backward
def batched_callables(spec: OpSpec, smp: Sample, strategy: str, cts: tuple[torch.Tensor, ...]
                      ) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(vmap(vjp_fn)(cts), the per-sample loop of the same vjp_fn) for one strategy."""
    st = get_strategy(strategy)
    primals = [smp.args[p] for p in smp.diff]
    _, vjp_fn = st.vjp(bind(spec, st, smp.args, smp.diff), *primals)
    batched_fn = vmap(lambda *c: vjp_fn(c))
    batch = cts[0].shape[0]

    def batched() -> Any:
        return batched_fn(*cts)

    def loop() -> Any:
        outs = [vjp_fn(tuple(c[b] for c in cts)) for b in range(batch)]
        return tuple(torch.stack(p) if p[0] is not None else None for p in zip(*outs))

    return batched, loop


def check_applicable(spec: OpSpec, smp: Sample, v: Variant, batch: int) -> dict[str, Any]:
    """The vmap_cotangents matrix cell for this sample (correctness vs the loop, fallback ops)."""
    with v.context():
        cell = runner.run(spec, "vmap_cotangents", v.strategy, smp, batch=batch)
    return {"status": cell.status, "reason": cell.reason, "message": cell.message,
            "fallback_ops": cell.fallback_ops}


def _series_for_batch(spec: OpSpec, smp: Sample, size: str, batch: int, ok: list[Variant],
                      cfg: BenchConfig) -> list[timing.Timed]:
    cts = cotangents(spec, smp, batch, seed=500 + batch)
    series, timed_loops = [], set()
    time_loops = cfg.loop_batch_sizes is None or batch in cfg.loop_batch_sizes
    for v in ok:
        fns = batched_callables(spec, smp, v.strategy, cts)
        key = {"op": spec.name, "size": size, "shape": shape_text(smp), "batch": batch,
               "label": v.label, "strategy": v.strategy}
        series.append(timing.Timed({**key, "mode": "vmap"}, fns[0], v.context, cfg.repeats))
        if time_loops and v.loop_label not in timed_loops:
            timed_loops.add(v.loop_label)
            series.append(timing.Timed({**key, "label": v.loop_label, "mode": "loop"}, fns[1],
                                       v.context, cfg.loop_repeats))
    return series


def bench_batched(cfg: BenchConfig, progress: Callable[[str], None]) -> tuple[list, list, list]:
    """(applicability records, timing records, skipped) for every op x size x batch x label;
    only labels that pass the vmap_cotangents check (computed, against the loop) are timed."""
    applicability, records, skipped = [], [], []
    variants = [variant(label) for label in cfg.labels()]
    for op in cfg.ops:
        spec = registry.get_op(op)
        for size in cfg.sizes:
            try:
                smp = resize(spec, size)
            except Exception as e:  # noqa: BLE001
                skipped.append({"op": op, "size": size, "reason": f"resize failed: {e}"})
                continue
            ok = []
            for v in variants:
                cell = check_applicable(spec, smp, v, cfg.check_batch)
                applicability.append({"op": op, "size": size, "shape": shape_text(smp),
                                      "label": v.label, "strategy": v.strategy, **cell})
                if cell["status"] == "pass":
                    ok.append(v)
            for batch in cfg.batch_sizes:
                series = _series_for_batch(spec, smp, size, batch, ok, cfg)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the fallback's perf warning, once per call
                    timing.run_interleaved(series, cfg.clock, cfg.target_sample_s, cfg.max_number)
                records.extend(s.record() for s in series)
                progress(f"batched {op} {size} B={batch}: {len(ok)} labels")
    return applicability, records, skipped


# ------------------------------------------------------------------------------ the run
def environment(num_threads: int) -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_num_threads_default": torch.get_num_threads(),
        "torch_num_threads_used": num_threads,
        "load_average_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "strategies_available": available(),
        "timer": "a timeit-style loop per sample (gc off) read on time.thread_time and "
                 "time.perf_counter; warm-up + calibration once per series; interleaved rounds "
                 "in rotating order; the hooks claim in alternating pairs",
    }


def run_bench(config: BenchConfig | None = None, progress: Callable[[str], None] | None = None
              ) -> dict[str, Any]:
    """Run every section of the benchmark; returns the JSON-ready result (raw samples included,
    plus ``headline``, ``targets`` and ``hooks_claim_result`` computed from them)."""
    cfg = (config or BenchConfig.quick()).validate()
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    previous_threads = torch.get_num_threads()
    env = environment(cfg.num_threads)
    torch.set_num_threads(cfg.num_threads)
    try:
        applicability, batched, skipped = bench_batched(cfg, say)
        overhead = bench_overhead.bench_overhead(cfg, say)
        claim = bench_overhead.hooks_claim(cfg, say)
        memory = bench_copies.memory_section(cfg, applicability, batched_callables)
        say("memory done")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # vmap's fallback warns once per capture
            copies = bench_copies.copy_section(cfg)
        say("copies done")
    finally:
        torch.set_num_threads(previous_threads)
    env["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results = {
        "schema": bench_results.SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "environment": env,
        "applicability": applicability,
        "batched": batched,
        "overhead": overhead,
        "hooks_claim": claim,
        "memory": memory,
        "copies": copies,
        "skipped": skipped,
        "elapsed_s": round(time.perf_counter() - start, 2),
    }
    results["headline"] = bench_results.headline(results)
    if "large" in cfg.sizes:
        results["headline_large"] = bench_results.headline(results, size="large")
    results["targets"] = bench_results.targets(results)
    results["hooks_claim_result"] = bench_results.hooks_claim_result(results)
    return results


__all__ = ["BenchConfig", "run_bench", "batched_callables", "check_applicable", "bench_batched",
           "environment"]
