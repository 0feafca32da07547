"""``funcbwd bench``: what functionalizing a backward costs, measured in one run as ratios.

Three questions from the design thread ("how bad is the performance overhead for
functionalization, really?", functorch#241):

* **batched backward**: the median time of ``vmap(vjp_fn)(cotangents)`` per op x strategy x input
  size x batch size, against (a) the per-sample Python loop a user writes when vmap fails (the
  same strategy's unbatched ``vjp_fn`` called once per cotangent: outside vmap every legacy
  formula runs as written) and (b) torch's own modern formula under vmap (``builtin``, the
  hand-written limit);
* **vmap off**: a plain ``torch.autograd.grad`` with each strategy installed, against no strategy
  and against a no-op Python pre/post hook on every node (the floor any hook-based approach pays);
* **copies and memory**: ``funcbwd.observe.graphs.copy_table`` (copies and bytes in each strategy's FX
  graph) when present, and the bytes the batched backward allocates (``torch.profiler`` memory
  events).

Strategies are interleaved (each repeat loops over all of them, in a rotating order) so machine
noise hits all alike; every raw sample is kept in the result and ratios are computed from medians
of the same run. The default clock is the timing thread's CPU time (one intra-op thread): on a
shared machine wall time mostly measures the other processes; wall time is recorded too.
Timings are never thresholds: the targets are reported, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.func import vmap

from funcbwd.ops import registry
from funcbwd.run import matrix
from funcbwd.ops.registry import OpSpec, Sample
from funcbwd.batching.copy import batched_copy_rule
from funcbwd.errors import BadInputError, parse_names
from funcbwd.run.scenarios import bind, output_shapes
from funcbwd.strategies import available, get_strategy

SCHEMA = "funcbwd-bench/1"
SIZES = {"small": 1, "medium": 4, "large": 16}  # name -> scale factor on every dim of sample 0
TARGET_OPS = ("diag", "index_select", "topk", "sort", "mode")
COPY_RULE = "per_formula+copy_rule"
#: labels of the "vmap off" section that are not strategies
NO_STRATEGY, NOOP_HOOK = "none", "noop_hook"


# ------------------------------------------------------------------------------ configuration
@dataclasses.dataclass
class BenchConfig:
    """What to measure. ``ops``/``strategies`` None mean the catalog's test ops / every available
    strategy plus the ``per_formula+copy_rule`` variant."""

    ops: tuple[str, ...] | None = None
    strategies: tuple[str, ...] | None = None
    batch_sizes: tuple[int, ...] = (1, 8, 64, 256)
    #: batch sizes whose per-sample loops are timed (None: all); a loop is B unbatched calls, so
    #: B=256 dominates the run time. Unmeasured loops are reported as missing, never extrapolated.
    loop_batch_sizes: tuple[int, ...] | None = None
    sizes: tuple[str, ...] = ("small", "large")
    repeats: int = 5  # interleaved rounds of the vmap timings
    loop_repeats: int = 3  # rounds that also time the per-sample loops (the slow part)
    target_sample_s: float = 0.005  # each sample runs the call `number` times, about this long
    max_number: int = 200
    num_threads: int = 1  # the machine is shared; one intra-op thread keeps ratios stable
    #: "thread_cpu": CPU time of the timing thread (time.thread_time; immune to preemption by
    #: other processes on a shared machine; with one intra-op thread it covers all the work:
    #: the CPU autograd engine and vmap's fallback run on the calling thread), or "wall".
    #: Both clocks are recorded for every sample; this one drives calibration and ratios.
    clock: str = "thread_cpu"
    overhead_nodes: int = 16  # legacy-op nodes per graph in the vmap-off section
    overhead_repeats: int = 7
    memory_batches: tuple[int, ...] = (64,)
    copy_vmap_modes: tuple[bool, ...] = (True,)  # copy graphs under vmap; add False for unbatched
    check_batch: int = 3  # batch of the vmap_cotangents correctness check per size
    name: str = "custom"

    @classmethod
    def quick(cls) -> "BenchConfig":
        return cls(name="quick", loop_batch_sizes=(1, 8, 64), check_batch=2)

    @classmethod
    def full(cls) -> "BenchConfig":
        return cls(name="full", ops=tuple(registry.op_names()), repeats=7, loop_repeats=3,
                   target_sample_s=0.01, overhead_repeats=11, memory_batches=(64, 256),
                   copy_vmap_modes=(True, False))

    def validate(self) -> "BenchConfig":
        self.ops = (tuple(parse_names("op", list(self.ops), registry.op_names())) if self.ops
                    else tuple(registry.TEST_OPS))
        self.strategies = tuple(parse_names("strategy", list(self.strategies), strategy_labels())
                                if self.strategies else strategy_labels())
        parse_names("size", list(self.sizes), SIZES)
        parse_names("clock", [self.clock], CLOCKS)
        if self.clock == "thread_cpu" and self.num_threads != 1:
            raise BadInputError("clock 'thread_cpu' misses work done by other intra-op threads; "
                                "use num_threads=1 or clock='wall'")
        if not self.batch_sizes or any(not isinstance(b, int) or b < 1 for b in self.batch_sizes):
            raise BadInputError(f"batch sizes must be positive integers, got {self.batch_sizes!r}")
        for f in ("repeats", "loop_repeats", "max_number", "num_threads", "overhead_nodes",
                  "overhead_repeats", "check_batch"):
            if getattr(self, f) < 1:
                raise BadInputError(f"{f} must be >= 1, got {getattr(self, f)!r}")
        if self.loop_batch_sizes is not None:
            self.loop_batch_sizes = tuple(self.loop_batch_sizes)
        self.loop_repeats = min(self.loop_repeats, self.repeats)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def strategy_labels() -> list[str]:
    """Every available strategy, plus ``per_formula+copy_rule`` (per_formula with the opt-in
    ``aten::copy`` vmap rule of :mod:`funcbwd.batching.copy` active)."""
    names = available()
    return names + ([COPY_RULE] if "per_formula" in names else [])


@dataclasses.dataclass(frozen=True)
class Variant:
    """A bench label: a strategy, plus a context entered around (never inside) each timed sample."""

    label: str
    strategy: str
    context: Callable[[], Any] = contextlib.nullcontext
    #: whose per-sample loop this label shares (the copy rule acts only under vmap, so
    #: per_formula+copy_rule's loop is per_formula's)
    loop_label: str = ""

    def __post_init__(self) -> None:
        if not self.loop_label:
            object.__setattr__(self, "loop_label", self.label)


def variant(label: str) -> Variant:
    if label == COPY_RULE:
        return Variant(label, "per_formula", batched_copy_rule, loop_label="per_formula")
    return Variant(label, label)


# ------------------------------------------------------------------------------ input sizes
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(shape: Sequence[int], seed: int) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=_gen(seed))


def _scaled(t: torch.Tensor, f: int) -> list[int]:
    return [s * f for s in t.shape]


def _resize_index_select(a: tuple, f: int, seed: int) -> tuple:
    x, dim, index = a
    big = _randn(_scaled(x, f), seed)
    idx = torch.randint(0, big.shape[dim], (index.numel() * f,), generator=_gen(seed + 1))
    return (big, dim, idx)


def _resize_masked_select(a: tuple, f: int, seed: int) -> tuple:
    x, mask = a
    m = torch.rand(_scaled(mask, f), generator=_gen(seed + 1)) > 0.5
    m.view(-1)[0] = True
    return (_randn(_scaled(x, f), seed), m)


def _resize_clamp(a: tuple, f: int, seed: int) -> tuple:
    x, lo, hi = a
    big = _randn(_scaled(x, f), seed)
    if isinstance(lo, torch.Tensor):
        lo = _randn(_scaled(lo, f), seed + 1) - 0.5
    if isinstance(hi, torch.Tensor):
        hi = _randn(_scaled(hi, f), seed + 2) + 0.5
    return (big, lo, hi)


def _resize_mode(a: tuple, f: int, seed: int) -> tuple:
    # small integer values, as the catalog's sample: every row keeps a real mode and ties
    x = torch.randint(0, 3, _scaled(a[0], f), generator=_gen(seed)).float()
    return (x, *a[1:])


def _resize_prod(a: tuple, f: int, seed: int) -> tuple:
    # values near 1 and no zeros: the product of thousands of entries stays finite
    return (1.0 + 0.01 * _randn(_scaled(a[0], f), seed), *a[1:])


def _resize_topk(a: tuple, f: int, seed: int) -> tuple:
    x, k, *rest = a
    return (_randn(_scaled(x, f), seed), k * f, *rest)


def _resize_generic(a: tuple, f: int, seed: int) -> tuple:
    """Every floating tensor regenerated at ``f`` times each dim; everything else unchanged
    (the size check below rejects the result when that breaks the op)."""
    return tuple(_randn(_scaled(t, f), seed + i) if isinstance(t, torch.Tensor) and t.is_floating_point()
                 else t for i, t in enumerate(a))


_RESIZERS: dict[str, Callable[[tuple, int, int], tuple]] = {
    "index_select": _resize_index_select,
    "masked_select": _resize_masked_select,
    "clamp": _resize_clamp,
    "mode": _resize_mode,
    "prod": _resize_prod,
    "topk": _resize_topk,
}


def resize(spec: OpSpec, size: str) -> Sample:
    """The op's first sample with every dim scaled by ``SIZES[size]`` (index/k/mask scaled too)."""
    factor = SIZES[parse_names("size", [size], SIZES)[0]]
    base = spec.samples()[0]
    if factor == 1:
        return base
    seed = 1000 + sum(map(ord, spec.name)) + factor
    args = _RESIZERS.get(spec.name, _resize_generic)(base.args, factor, seed)
    smp = Sample(f"{base.name} x{factor}", args, base.diff)
    with torch.no_grad():
        spec.torch_op(*smp.args)  # raises if the resize broke the op
    return smp


def shape_text(sample: Sample) -> str:
    return "x".join(str(s) for s in sample.args[sample.diff[0]].shape)


# ------------------------------------------------------------------------------ timing
def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def rel_iqr(xs: Sequence[float]) -> float:
    """Interquartile range / median of the raw samples: the run's own noise level."""
    if len(xs) < 2:
        return math.nan
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return _div(q3 - q1, statistics.median(xs))


CLOCKS = ("thread_cpu", "wall")


def sample_once(fn: Callable[[], Any], number: int) -> dict[str, float]:
    """Seconds per call over ``number`` back-to-back calls on both clocks (gc off during the
    calls, as ``timeit`` does; no per-sample warm-up: :func:`calibrate` warms up once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(number):
            fn()
        c1, w1 = time.thread_time(), time.perf_counter()
    finally:
        if enabled:
            gc.enable()
    return {"thread_cpu": (c1 - c0) / number, "wall": (w1 - w0) / number}


def calibrate(fn: Callable[[], Any], target_s: float, max_number: int, clock: str = "thread_cpu") -> int:
    """Warm up ``fn`` (first calls trace, compile or register) and pick how many calls make one
    sample last about ``target_s``."""
    fn()
    once = max(sample_once(fn, 1)[clock], 1e-7)
    return max(1, min(max_number, int(target_s / once)))


@dataclasses.dataclass
class _Timed:
    """One measured series: a callable, its context and its raw samples."""

    key: dict[str, Any]
    fn: Callable[[], Any]
    context: Callable[[], Any]
    rounds: int
    number: int = 0
    clock: str = "thread_cpu"
    samples: list[float] = dataclasses.field(default_factory=list)
    wall_samples: list[float] = dataclasses.field(default_factory=list)
    error: str = ""

    def add(self, sample: dict[str, float]) -> None:
        # nanoseconds are both clocks' resolution; more digits only bloat the JSON
        self.samples.append(round(sample[self.clock], 9))
        self.wall_samples.append(round(sample["wall"], 9))

    def record(self) -> dict[str, Any]:
        d = dict(self.key)
        d.update(number=self.number, clock=self.clock, samples=self.samples,
                 wall_samples=self.wall_samples, median=_median(self.samples))
        if self.error:
            d["error"] = self.error
        return d


def run_interleaved(series: list[_Timed], cfg: BenchConfig) -> None:
    """Calibrate every series, then for each round time each series once, rotating the order."""
    for s in series:
        s.clock = cfg.clock
        try:
            with s.context():
                s.number = calibrate(s.fn, cfg.target_sample_s, cfg.max_number, cfg.clock)
        except Exception as e:  # noqa: BLE001 - a label that cannot run is recorded, not fatal
            s.error = f"{type(e).__name__}: {matrix.first_line(str(e))}"
    live = [s for s in series if not s.error]
    for r in range(max((s.rounds for s in live), default=0)):
        for s in live[r % len(live):] + live[:r % len(live)]:
            if r < s.rounds:
                with s.context():
                    s.add(sample_once(s.fn, s.number))


# ------------------------------------------------------------------------------ batched backward
def _cotangents(spec: OpSpec, smp: Sample, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    dtype = smp.args[smp.diff[0]].dtype
    return tuple(torch.randn((batch, *sh), generator=_gen(seed + i), dtype=dtype)
                 for i, sh in enumerate(output_shapes(spec, smp)))


def batched_callables(spec: OpSpec, smp: Sample, strategy: str, cts: tuple[torch.Tensor, ...]
                      ) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(vmap(vjp_fn)(cts), the per-sample loop of the same vjp_fn) for one strategy."""
    st = get_strategy(strategy)
    primals = [smp.args[p] for p in smp.diff]
    with st.active():
        _, vjp_fn = st.vjp(bind(spec, st, smp.args, smp.diff), *primals)
    batched_fn = vmap(lambda *c: vjp_fn(c))
    batch = cts[0].shape[0]

    def batched() -> Any:
        with st.active():
            return batched_fn(*cts)

    def loop() -> Any:
        with st.active():
            outs = [vjp_fn(tuple(c[b] for c in cts)) for b in range(batch)]
        return tuple(torch.stack(p) if p[0] is not None else None for p in zip(*outs))

    return batched, loop


def check_applicable(spec: OpSpec, smp: Sample, v: Variant, batch: int) -> dict[str, Any]:
    """The vmap_cotangents matrix cell for this sample (correctness vs the loop, fallback ops)."""
    with v.context():
        cell = matrix.run(spec, "vmap_cotangents", v.strategy, smp, batch=batch)
    return {"status": cell.status, "reason": cell.reason, "message": cell.message,
            "fallback_ops": cell.fallback_ops}


def bench_batched(cfg: BenchConfig, progress: Callable[[str], None]) -> tuple[list, list, list]:
    """(applicability records, timing records, skipped) for every op x size x batch x label."""
    applicability, records, skipped = [], [], []
    variants = [variant(label) for label in cfg.strategies]
    if "builtin" not in cfg.strategies and "builtin" in available():
        variants.insert(0, variant("builtin"))  # the reference is always measured
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
                cts = _cotangents(spec, smp, batch, seed=500 + batch)
                series = []
                timed_loops = set()
                time_loops = cfg.loop_batch_sizes is None or batch in cfg.loop_batch_sizes
                for v in ok:
                    fns = batched_callables(spec, smp, v.strategy, cts)
                    key = {"op": op, "size": size, "shape": shape_text(smp), "batch": batch,
                           "label": v.label, "strategy": v.strategy}
                    series.append(_Timed({**key, "mode": "vmap"}, fns[0], v.context, cfg.repeats))
                    if time_loops and v.loop_label not in timed_loops:
                        timed_loops.add(v.loop_label)
                        series.append(_Timed({**key, "label": v.loop_label, "mode": "loop"}, fns[1],
                                             v.context, cfg.loop_repeats))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the fallback's perf warning, once per call
                    run_interleaved(series, cfg)
                records.extend(s.record() for s in series)
                progress(f"batched {op} {size} B={batch}: {len(ok)} labels")
    return applicability, records, skipped


# ------------------------------------------------------------------------------ vmap off
def _noop_prehook(grad_outputs: Any) -> None:
    return None


def _noop_posthook(*args: Any) -> None:
    return None


def overhead_callable(spec: OpSpec, smp: Sample, label: str, nodes: int) -> Callable[[], Any]:
    """A plain backward through ``nodes`` op nodes, built with ``label``'s strategy active (or no
    strategy / the legacy op with no-op hooks on every node)."""
    st = get_strategy("plain" if label in (NO_STRATEGY, NOOP_HOOK) else label)
    prims = [smp.args[p].detach().clone().requires_grad_() for p in smp.diff]
    outs: list[torch.Tensor] = []
    with st.active(), torch.enable_grad():
        f = bind(spec, st, smp.args, smp.diff)
        for _ in range(nodes):
            res = f(*prims)
            if label == NOOP_HOOK:
                for node in {id(o.grad_fn): o.grad_fn for o in res if o.grad_fn is not None}.values():
                    node.register_prehook(_noop_prehook)
                    node.register_hook(_noop_posthook)
            outs.extend(res)
    cts = [torch.randn(o.shape, generator=_gen(7), dtype=o.dtype) for o in outs]

    def backward() -> Any:
        with st.active():
            return torch.autograd.grad(outs, prims, cts, retain_graph=True, allow_unused=True)

    return backward


def hook_body_section(cfg: BenchConfig) -> dict[str, Any]:
    """The hooks strategy's pre+post hook bodies called directly with vmap off, against no-op
    bodies: the per-node difference the end-to-end backward cannot resolve on a noisy machine
    (the engine's cost of calling a Python hook is the same for both, so it cancels)."""
    if "hooks" not in cfg.strategies:
        return {"status": "skipped", "reason": "hooks not among the strategies"}
    from funcbwd.strategies import hooks

    pre, post = hooks.functionalize_prehook, hooks.unfunctionalize_posthook
    grads_out, grads_in = (torch.ones(3, 5),), (torch.ones(3, 5),)
    calls = 200

    def hooked() -> None:
        for _ in range(calls):
            pre(grads_out)
            post(grads_in, grads_out)

    def noop() -> None:
        for _ in range(calls):
            _noop_prehook(grads_out)
            _noop_posthook(grads_in, grads_out)

    series = [_Timed({"label": "hooks"}, hooked, contextlib.nullcontext, cfg.overhead_repeats),
              _Timed({"label": NOOP_HOOK}, noop, contextlib.nullcontext, cfg.overhead_repeats)]
    run_interleaved(series, cfg)
    return {"status": "ok", "calls_per_sample_call": calls,
            "records": [s.record() for s in series]}


def bench_overhead(cfg: BenchConfig, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """The vmap-off cost per op: no strategy, the no-op hook floor, each strategy (small size)."""
    labels = [NO_STRATEGY, NOOP_HOOK] + [s for s in cfg.strategies if s not in ("plain", COPY_RULE)]
    records = []
    for op in cfg.ops:
        spec = registry.get_op(op)
        smp = resize(spec, "small")
        series = []
        for label in labels:
            key = {"op": op, "size": "small", "label": label, "nodes": cfg.overhead_nodes}
            try:
                fn = overhead_callable(spec, smp, label, cfg.overhead_nodes)
            except Exception as e:  # noqa: BLE001
                records.append({**key, "samples": [], "median": math.nan,
                                "error": f"{type(e).__name__}: {matrix.first_line(str(e))}"})
                continue
            series.append(_Timed(key, fn, contextlib.nullcontext, cfg.overhead_repeats))
        run_interleaved(series, cfg)
        records.extend(s.record() for s in series)
        progress(f"vmap-off {op}: {len(series)} labels")
    return records


# ------------------------------------------------------------------------------ copies and memory
def copy_section(cfg: BenchConfig) -> dict[str, Any]:
    """Copies and bytes per op x strategy vs builtin, from ``funcbwd.observe.graphs.copy_table`` (FX
    graphs of the formula form each strategy runs; strategies sharing a form share a capture).
    ``per_formula+copy_rule`` is per_formula's capture taken with the copy rule active."""
    if not cfg.copy_vmap_modes:
        return {"status": "skipped", "reason": "copy_vmap_modes is empty in this config"}
    from funcbwd.observe import graphs

    table, form_of = graphs.copy_table, graphs.check_form
    labels = [s for s in cfg.strategies if s in graphs.STRATEGY_FORMS and s != "builtin"]
    forms = list(dict.fromkeys(form_of(s) for s in labels))
    rows, errors = [], []
    for op in cfg.ops:
        for vm in cfg.copy_vmap_modes:
            try:
                by_form = dict(zip(forms + ["builtin"], table([op], forms, vmap=vm)))
                if vm and COPY_RULE in cfg.strategies:
                    with batched_copy_rule():
                        by_form[COPY_RULE] = table([op], [form_of("per_formula")], vmap=True)[0]
            except Exception as e:  # noqa: BLE001
                errors.append({"op": op, "vmap": vm, "error": f"{type(e).__name__}: {e}"})
                continue
            for label in labels + ["builtin"] + ([COPY_RULE] if COPY_RULE in by_form else []):
                form = label if label in (COPY_RULE, "builtin") else form_of(label)
                rows.append({"label": label, **_jsonable(by_form[form])})
    return {"status": "ok", "source": "funcbwd.observe.graphs.copy_table", "rows": rows, "errors": errors}


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


def memory_section(cfg: BenchConfig, applicability: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
                cts = _cotangents(spec, smp, batch, seed=500 + batch)
                for label in labels:
                    v = variant(label)
                    batched, _ = batched_callables(spec, smp, v.strategy, cts)
                    with v.context(), warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        batched()  # warm-up: traces and caches are not the backward's memory
                        prof = allocation_profile(batched)
                    rows.append({"op": op, "size": size, "batch": batch, "label": label, **prof})
    return rows


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
                 "in rotating order",
    }


def run_bench(config: BenchConfig | None = None, progress: Callable[[str], None] | None = None
              ) -> dict[str, Any]:
    """Run every section of the benchmark; returns the JSON-ready result (raw samples included)."""
    cfg = (config or BenchConfig.quick()).validate()
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    previous_threads = torch.get_num_threads()
    env = environment(cfg.num_threads)
    torch.set_num_threads(cfg.num_threads)
    try:
        applicability, batched, skipped = bench_batched(cfg, say)
        overhead = bench_overhead(cfg, say)
        hook_bodies = hook_body_section(cfg)
        memory = memory_section(cfg, applicability)
        say("memory done")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # vmap's fallback warns once per capture
            copies = copy_section(cfg)
    finally:
        torch.set_num_threads(previous_threads)
    env["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "environment": env,
        "applicability": applicability,
        "batched": batched,
        "overhead": overhead,
        "hook_bodies": hook_bodies,
        "memory": memory,
        "copies": copies,
        "skipped": skipped,
        "elapsed_s": round(time.perf_counter() - start, 2),
    }
    results["headline"] = headline(results)
    if "large" in cfg.sizes:
        results["headline_large"] = headline(results, size="large")
    return results


def _strict_json(x: Any) -> Any:
    """NaN/inf (what was not measured) as null: browsers' JSON.parse rejects NaN."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: _strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict_json(v) for v in x]
    return x


def save(results: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(_strict_json(results), f, allow_nan=False, separators=(",", ":"))
        f.write("\n")


def load(path: str) -> dict[str, Any]:
    """Read a result written by :func:`save`; rejects files that are not bench results."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise BadInputError(f"no bench result at {path!r}; "
                            f"run `python -m funcbwd bench --out {path}`") from None
    except json.JSONDecodeError as e:
        raise BadInputError(f"{path!r} is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BadInputError(f"{path!r} is not a funcbwd bench result (schema {SCHEMA!r})")
    return data


# ------------------------------------------------------------------------------ ratios
def _medians(records: Iterable[dict[str, Any]], key: Callable[[dict], tuple]) -> dict[tuple, float]:
    """Medians recomputed from the raw samples (never trusted from the file)."""
    return {key(r): _median(r["samples"]) for r in records if r.get("samples")}


def _div(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def ratios(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per op x size x batch x label: medians and

    * ``ratio_vs_builtin``: this label's vmap median / builtin's vmap median (1.0 = as fast as the
      hand-written formula; lower is better),
    * ``speedup_vs_loop``: the same strategy's per-sample loop / its vmap median (higher is better),
    * ``speedup_vs_builtin_loop``: the builtin op's loop / this label's vmap median."""
    key = lambda r: (r["op"], r["size"], r["batch"], r["label"], r["mode"])  # noqa: E731
    med = _medians(results["batched"], key)
    noise = {key(r): rel_iqr(r["samples"]) for r in results["batched"]}
    rows = []
    for (op, size, batch, label, mode), m in med.items():
        if mode != "vmap":
            continue
        ref = med.get((op, size, batch, "builtin", "vmap"), math.nan)
        loop = med.get((op, size, batch, variant(label).loop_label, "loop"), math.nan)
        bloop = med.get((op, size, batch, "builtin", "loop"), math.nan)
        rows.append({"op": op, "size": size, "batch": batch, "label": label,
                     "median_s": m, "loop_median_s": loop, "builtin_median_s": ref,
                     "ratio_vs_builtin": _div(m, ref), "speedup_vs_loop": _div(loop, m),
                     "speedup_vs_builtin_loop": _div(bloop, m),
                     "rel_iqr": noise[(op, size, batch, label, mode)]})
    return rows


def overhead_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per op x label with vmap off: ratio to no strategy, and microseconds per node over no
    strategy and over the no-op hook floor."""
    med = _medians(results["overhead"], lambda r: (r["op"], r["label"]))
    nodes = {r["op"]: r["nodes"] for r in results["overhead"]}
    noise = {(r["op"], r["label"]): rel_iqr(r["samples"]) for r in results["overhead"]}
    rows = []
    for (op, label), m in med.items():
        base = med.get((op, NO_STRATEGY), math.nan)
        floor = med.get((op, NOOP_HOOK), math.nan)
        n = nodes[op]
        rows.append({"op": op, "label": label, "nodes": n, "median_s": m, "ratio_vs_none": _div(m, base),
                     "us_per_node_vs_none": (m - base) / n * 1e6,
                     "us_per_node_vs_noop_hook": (m - floor) / n * 1e6,
                     "rel_iqr": noise[(op, label)]})
    return rows


def memory_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Memory rows with ratios to builtin at the same op x size x batch."""
    ref = {(r["op"], r["size"], r["batch"]): r for r in results["memory"] if r["label"] == "builtin"}
    rows = []
    for r in results["memory"]:
        b = ref.get((r["op"], r["size"], r["batch"]))
        rows.append({**r, "peak_vs_builtin": _div(r["peak_bytes"], b["peak_bytes"]) if b else math.nan,
                     "allocated_vs_builtin": (_div(r["allocated_bytes"], b["allocated_bytes"]) if b
                                              else math.nan)})
    return rows


def hook_body_difference(results: dict[str, Any]) -> float | str:
    """Microseconds per node the hooks' bodies cost over no-op bodies (vmap off), or why not."""
    hb = results.get("hook_bodies") or {}
    if hb.get("status") != "ok":
        return f"hook bodies not measured ({hb.get('reason', 'missing')})"
    med = _medians(hb["records"], lambda r: r["label"])
    return (med["hooks"] - med[NOOP_HOOK]) / hb["calls_per_sample_call"] * 1e6


def _finite_max(xs: Iterable[float]) -> float:
    """Max over the measured values (NaN marks what was not measured); NaN if none were."""
    vals = [x for x in xs if not math.isnan(x)]
    return max(vals) if vals else math.nan


def headline(results: dict[str, Any], ops: Sequence[str] = TARGET_OPS, min_batch: int = 64,
             size: str = "small") -> dict[str, Any]:
    """Per op, the best non-builtin label at batch >= ``min_batch`` (its worst ratio vs builtin
    over those batches, lowest wins) and whether it meets the targets (<= 1.2x builtin, >= 10x
    faster than the loop); plus the hooks' vmap-off cost per node over the no-op hook."""
    rows = [r for r in ratios(results) if r["size"] == size and r["batch"] >= min_batch
            and r["label"] != "builtin" and r["op"] in ops]
    per_op: dict[str, Any] = {}
    for op in ops:
        by_label: dict[str, list[dict]] = {}
        for r in rows:
            if r["op"] == op:
                by_label.setdefault(r["label"], []).append(r)
        if not by_label:
            per_op[op] = {"best": None, "reason": "no strategy measured/passing"}
            continue
        scores = {lbl: (_finite_max(r["ratio_vs_builtin"] for r in rs),
                        -_finite_max(-r["speedup_vs_loop"] for r in rs))
                  for lbl, rs in by_label.items()}
        best = min(scores, key=lambda lbl: (math.isnan(scores[lbl][0]), scores[lbl][0]))
        ratio, speedup = scores[best]
        per_op[op] = {"best": best, "worst_ratio_vs_builtin": ratio, "min_speedup_vs_loop": speedup,
                      "batches": sorted({r["batch"] for r in by_label[best]}),
                      "meets_ratio_target": ratio <= 1.2, "meets_loop_target": speedup >= 10,
                      "all": {lbl: {"worst_ratio_vs_builtin": s[0], "min_speedup_vs_loop": s[1]}
                              for lbl, s in sorted(scores.items())}}
    out: dict[str, Any] = {"criteria": f"size={size}, batch>={min_batch}; best = lowest worst-case "
                           "ratio vs builtin", "per_op": per_op}
    hrows = [r for r in overhead_rows(results) if r["label"] == "hooks"]
    hooks = [r["us_per_node_vs_noop_hook"] for r in hrows]
    # the run's own noise on this number: IQR of the hooks' samples, per node
    noise = [r["rel_iqr"] * r["median_s"] / r["nodes"] * 1e6 for r in hrows]
    out["hooks_us_per_node_vs_noop_hook"] = ({"median_over_ops": _median(hooks), "max": max(hooks),
                                              "median_noise_us_per_node": _median(noise),
                                              "meets_target": max(hooks) <= 1.0} if hooks
                                             else "hooks not measured")
    out["hook_bodies_us_per_node_vs_noop"] = hook_body_difference(results)
    out["elapsed_s"] = results.get("elapsed_s")
    return out


# ------------------------------------------------------------------------------ text output
def _fmt(x: float, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def format_ratios(results: dict[str, Any], size: str = "small") -> str:
    rows = [r for r in ratios(results) if r["size"] == size]
    lines = [f"{'op':14s} {'B':>4s} {'label':24s} {'vs builtin':>10s} {'x loop':>8s}"]
    for r in sorted(rows, key=lambda r: (r["op"], r["batch"], r["label"])):
        lines.append(f"{r['op']:14s} {r['batch']:4d} {r['label']:24s} "
                     f"{_fmt(r['ratio_vs_builtin']):>10s} {_fmt(r['speedup_vs_loop'], 1):>8s}")
    return "\n".join(lines)


def format_headline(h: dict[str, Any]) -> str:
    lines = [f"headline ({h['criteria']}):"]
    for op, d in h["per_op"].items():
        if not d.get("best"):
            lines.append(f"  {op:14s} {d.get('reason', '')}")
            continue
        lines.append(f"  {op:14s} best={d['best']:22s} {_fmt(d['worst_ratio_vs_builtin'])}x builtin "
                     f"({'ok' if d['meets_ratio_target'] else 'MISS'} <=1.2), "
                     f"{_fmt(d['min_speedup_vs_loop'], 1)}x faster than loop "
                     f"({'ok' if d['meets_loop_target'] else 'MISS'} >=10)")
    hk = h["hooks_us_per_node_vs_noop_hook"]
    if isinstance(hk, dict):
        lines.append(f"  hooks, vmap off: {_fmt(hk['median_over_ops'])} us/node over a no-op hook "
                     f"(max {_fmt(hk['max'])}; {'ok' if hk['meets_target'] else 'MISS'} <=1us; "
                     f"run noise ~{_fmt(hk['median_noise_us_per_node'], 1)} us/node)")
    else:
        lines.append(f"  hooks, vmap off: {hk}")
    hb = h.get("hook_bodies_us_per_node_vs_noop")
    if isinstance(hb, float):
        lines.append(f"  hooks' pre+post bodies alone, vmap off: {hb:.2f} us/node over no-op bodies "
                     f"({'ok' if hb <= 1.0 else 'MISS'} <=1us)")
    lines.append(f"  elapsed: {h['elapsed_s']} s")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ CLI
def configure_bench(p: argparse.ArgumentParser) -> None:
    p.epilog = ("Strategies (default: every available one, plus per_formula+copy_rule): "
                + ", ".join(strategy_labels())
                + "\nSizes: " + ", ".join(f"{k} (x{v})" for k, v in SIZES.items()))
    p.add_argument("--quick", action="store_true",
                   help="the quick config (the 8 test ops, loops up to B=64; default: the full config)")
    p.add_argument("--ops", default=None, help="comma-separated ops (default: all; --quick: the test ops)")
    p.add_argument("--strategies", default=None, help="comma-separated strategy labels")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8,64,256)")
    p.add_argument("--sizes", default=None, help="comma-separated sizes (default small,large)")
    p.add_argument("--repeats", type=int, default=None, help="interleaved rounds")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads while timing")
    p.add_argument("--clock", choices=CLOCKS, default=None,
                   help="clock for medians and ratios (default thread_cpu; both are recorded)")
    p.add_argument("--out", default=None, help="write the JSON result here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadInputError(f"{what} must be comma-separated integers, got {text!r}") from None


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = BenchConfig.quick() if args.quick else BenchConfig.full()
    if args.ops:
        cfg.ops = tuple(parse_names("op", args.ops, registry.op_names()))
    if args.strategies:
        cfg.strategies = tuple(parse_names("strategy", args.strategies, strategy_labels()))
    if args.batches:
        cfg.batch_sizes = _int_list(args.batches, "--batches")
    if args.sizes:
        cfg.sizes = tuple(parse_names("size", args.sizes, SIZES))
    if args.repeats is not None:
        cfg.repeats = args.repeats
    if args.threads is not None:
        cfg.num_threads = args.threads
    if args.clock is not None:
        cfg.clock = args.clock
    return cfg.validate()


def main_bench(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    results = run_bench(cfg, say)
    print(format_ratios(results))
    print(format_headline(results["headline"]))
    if "headline_large" in results:
        print(format_headline(results["headline_large"]))
    if args.out:
        save(results, args.out)
        print(f"wrote {args.out}")
    return 0


__all__ = ["BenchConfig", "run_bench", "load", "save", "ratios", "overhead_rows", "memory_rows",
           "headline", "resize", "strategy_labels", "configure_bench", "main_bench"]
