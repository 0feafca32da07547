"""Where the time of one batched backward goes: funcbwd's Python, vmap, and the aten kernels.

:func:`profile` takes one cell (op x strategy x batch, vmap over the cotangents) and splits the
time of ``vmap(vjp_fn)(cotangents)`` (``vjp_fn`` built once under the strategy, as ``funcbwd
bench`` does) into:

* **funcbwd Python**: time spent executing funcbwd's own Python frames (the strategy, the legacy
  op's backward, the formula or the compiled graph's code), measured by ``cProfile`` as the
  ``tottime`` of frames whose file is in the funcbwd package (or is a graph :mod:`funcbwd.fx.codegen`
  compiled), as a share of the profiled run's total;
* **aten kernels**: ``torch.profiler`` self time of the aten ops that call no other aten op (the
  leaves of each op's call tree), outside vmap's fallback;
* **vmap dispatch**: self time of the aten ops that do call others (a batching rule, a composite
  op, functorch's dispatch around them), outside the fallback;
* **vmap fallback**: the whole time of each op that had no batching rule (named by vmap's
  performance warning, e.g. ``aten::copy``): the per-sample loop, its kernels and the final stack;
* **other (torch Python, autograd engine)**: the rest of the total: torch's own Python (vmap's
  and vjp's wrappers, ``autograd.grad``), the autograd engine, the Python/C++ boundary.

Each profiler's parts are taken as shares of the time of its own profiled run and applied to the
total measured without a profiler (median of interleaved rounds, the timing thread's CPU time, one
intra-op thread), so each profiler's overhead scales its own parts, not the total. Limits: the two
profilers run separately (their shares are combined, not observed together); profiler overhead is
per event, so event-heavy parts (many small ops, the fallback loop) come out somewhat larger than
they are; "kernel" self time includes the dispatcher's work for that call; a batching rule that
redispatches without calling another op counts as kernel; a C++ batching rule's own cost is in
"vmap dispatch" only when it calls other ops. If the measured parts exceed the total the
breakdown says so (``overlap_us``) instead of hiding it in "other".
"""

from __future__ import annotations

import cProfile
import dataclasses
import gc
import os
import pstats
import statistics
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # torch.profiler's start/stop lines (see observe.trace)

import torch  # noqa: E402

from funcbwd.errors import BadInputError, NotApplicableError, first_line  # noqa: E402
from funcbwd_lab.studies.bench.bench import batched_callables  # noqa: E402
from funcbwd_lab.studies.bench.inputs import cotangents  # noqa: E402
from funcbwd_lab.ops import registry  # noqa: E402
from funcbwd_lab.run.outcomes import fallback_ops  # noqa: E402
from funcbwd_lab.strategies import get_strategy  # noqa: E402

PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # lib/funcbwd
PARTS = ("funcbwd Python", "vmap dispatch", "vmap fallback", "aten kernels",
         "other (torch Python, autograd engine)")


@dataclasses.dataclass
class Breakdown:
    """One cell's batched backward, per call, in microseconds (see the module docstring)."""

    op: str
    strategy: str
    sample: str
    batch: int
    total_us: float
    parts: dict[str, float]
    #: aten op -> (kernel self time in us per call, calls per call), outside the fallback
    kernels: dict[str, tuple[float, float]]
    #: funcbwd function -> us per call of its own Python time (its cProfile share of the total)
    python_frames: dict[str, float]
    fallback_ops: list[str]
    calls: int
    #: how far the measured parts exceed the total (0 when they fit; then "other" is the rest)
    overlap_us: float = 0.0

    @property
    def title(self) -> str:
        return f"{self.op} [{self.sample}] under {self.strategy}, vmap over B={self.batch} cotangents"


# ------------------------------------------------------------------------------ the measurements
def _per_call(fn: Callable[[], Any], calls: int) -> float:
    gc.disable()
    try:
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        return (time.thread_time() - t0) / calls
    finally:
        gc.enable()


def _python_share(fn: Callable[[], Any], calls: int) -> tuple[float, dict[str, float]]:
    """(share of funcbwd's own Python frames in a cProfile'd run, each frame's share)."""
    prof = cProfile.Profile(time.thread_time)  # CPU time: preemption by other processes is not ours
    prof.enable()
    try:
        for _ in range(calls):
            fn()
    finally:
        prof.disable()
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (cc, nc, tottime, cumtime, callers)
    total = sum(v[2] for v in stats.values())
    own: dict[str, float] = {}
    for (path, line, name), v in stats.items():
        if path.startswith(PACKAGE_DIR) or path.startswith("<funcbwd compiled"):
            where = Path(path).stem if path.startswith(PACKAGE_DIR) else path.strip("<>")
            key = f"{where}:{name}"
            own[key] = own.get(key, 0.0) + v[2] / calls
    share = sum(own.values()) * calls / total if total else 0.0
    return share, {k: v * calls / total for k, v in own.items()} if total else {}


def split_events(roots: Iterable[Any], fallback: set[str]) -> tuple[dict[str, float], dict[str, list]]:
    """Split profiler events (trees of objects with ``name``, ``self_cpu_time_total``,
    ``cpu_time_total``, ``cpu_children``) into kernel / dispatch / fallback time (us), without
    counting any time twice: self times for aten ops, whole subtrees for fallback ops."""
    sums = {"aten kernels": 0.0, "vmap dispatch": 0.0, "vmap fallback": 0.0}
    kernels: dict[str, list] = {}
    todo = list(roots)
    while todo:
        ev = todo.pop()
        if ev.name in fallback:
            sums["vmap fallback"] += ev.cpu_time_total
            continue
        children = list(ev.cpu_children)
        if ev.name.startswith("aten::"):
            if any(c.name.startswith("aten::") for c in children):
                sums["vmap dispatch"] += ev.self_cpu_time_total
            else:
                sums["aten kernels"] += ev.self_cpu_time_total
                entry = kernels.setdefault(ev.name, [0.0, 0])
                entry[0] += ev.self_cpu_time_total
                entry[1] += 1
        todo.extend(children)
    return sums, kernels


def _aten_shares(fn: Callable[[], Any], calls: int, fallback: set[str]
                 ) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        wall_us = (time.perf_counter() - t0) * 1e6
    roots = [e for e in prof.events() if e.cpu_parent is None]
    sums, kernels = split_events(roots, fallback)
    shares = {k: v / wall_us for k, v in sums.items()}
    return shares, {k: (v[0] / calls, v[1] / calls) for k, v in kernels.items()}


# ------------------------------------------------------------------------------ the entry point
def _cell(op: str, strategy: str, batch: int, sample: str | None):
    spec = registry.get_op(op)
    st = get_strategy(strategy)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise BadInputError(f"batch must be a positive int (the vmap batch size), got {batch!r}")
    smp = spec.sample(sample)
    reason = st.not_applicable(spec, "vmap_cotangents")
    if reason:
        raise NotApplicableError(f"cannot profile {spec.name} under {st.name}: {reason}")
    return spec, st, smp


def profile(op: str, strategy: str, batch: int = 64, sample: str | None = None, *,
            rounds: int = 7, target_s: float = 0.05) -> Breakdown:
    """Break one cell's batched backward into the parts of the module docstring.

    ``rounds`` timing rounds give the total (median); each profiled run and each round makes
    about ``target_s`` seconds of calls. Bad op / strategy / sample names raise
    :class:`funcbwd.errors.UnknownNameError`; a strategy that cannot run the cell raises
    :class:`funcbwd.errors.NotApplicableError` with the reason."""
    spec, st, smp = _cell(op, strategy, batch, sample)
    cts = cotangents(spec, smp, batch, seed=0)
    fn = batched_callables(spec, smp, st.name, cts)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()  # warm up: traces, registers, compiles
            fn()
        except Exception as e:  # noqa: BLE001 - the cell itself fails: nothing to profile
            raise NotApplicableError(f"cannot profile {spec.name} under {st.name}: vmap(vjp) "
                                     f"fails: {type(e).__name__}: {first_line(str(e))}") from e
    fallback = fallback_ops(caught)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback's performance warning, once per call
            calls = max(1, min(10_000, int(target_s / max(_per_call(fn, 2), 1e-7))))
            total = statistics.median(_per_call(fn, calls) for _ in range(max(1, rounds))) * 1e6
            py_share, frames = _python_share(fn, calls)
            aten_shares, kernels = _aten_shares(fn, calls, {f.split(".")[0] for f in fallback})
    finally:
        torch.set_num_threads(prev_threads)
    parts = {"funcbwd Python": py_share * total}
    parts.update({k: s * total for k, s in aten_shares.items()})
    measured = sum(parts.values())
    parts["other (torch Python, autograd engine)"] = max(0.0, total - measured)
    return Breakdown(spec.name, st.name, smp.name, batch, total,
                     {k: parts[k] for k in PARTS}, kernels,
                     dict(sorted(((k, v * total) for k, v in frames.items()), key=lambda kv: -kv[1])),
                     fallback, calls, overlap_us=max(0.0, measured - total))


# ------------------------------------------------------------------------------ views
def format_table(b: Breakdown, top: int = 8) -> str:
    """The breakdown for a terminal: parts, the largest kernels and funcbwd frames."""
    lines = [b.title, f"total {b.total_us:.1f} us per call (median, thread CPU time, 1 thread; "
                      f"profiled over {b.calls} calls)", ""]
    width = max(len(p) for p in PARTS)
    for name, us in b.parts.items():
        share = us / b.total_us if b.total_us else 0.0
        lines.append(f"  {name.ljust(width)}  {us:8.1f} us  {share:6.1%}")
    if b.overlap_us:
        lines.append(f"  (the measured parts exceed the total by {b.overlap_us:.1f} us: the two "
                     "profilers' shares overlap; read them as upper bounds)")
    if b.fallback_ops:
        lines.append(f"  vmap fallback ops: {', '.join(b.fallback_ops)}")
    lines += ["", "aten kernels (self time outside the fallback, per call):"]
    for name, (us, n) in sorted(b.kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {name:32s} {us:8.2f} us  x{n:g}")
    lines += ["", "funcbwd Python frames (own time, per call, under cProfile):"]
    for name, us in list(b.python_frames.items())[:top]:
        lines.append(f"  {name[:60]:60s} {us:8.2f} us")
    return "\n".join(lines)


def figure(b: Breakdown):
    """A plotly stacked bar of the parts (one bar: the cell), in microseconds per call."""
    import plotly.graph_objects as go

    label = f"{b.op} / {b.strategy} / B={b.batch}"
    fig = go.Figure([go.Bar(name=name, x=[label], y=[us],
                            hovertemplate=f"{name}: %{{y:.1f}} us<extra></extra>")
                     for name, us in b.parts.items()])
    fig.update_layout(barmode="stack", title=f"Where the time goes: {b.title}",
                      xaxis_title="cell (op / strategy / batch size)",
                      yaxis_title="time per batched backward call (µs)", legend_title="part")
    return fig
