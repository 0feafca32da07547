"""What functionalizing every backward costs, per OpInfo op: the batched backward's time under
``whole`` (with the scoped batching rules) over its time under ``builtin``.

For each op whose first sample passes under both ``builtin`` and ``whole`` in the sweep, one
``vjp`` of the sample (primals fixed, forward not timed) and ``vmap(vjp_fn)`` over
:data:`N_COTANGENTS` distinct cotangents: the two arms are timed interleaved in one process
(:func:`funcbwd_lab.studies.bench.timing.run_interleaved`: warmed up and calibrated once, then
:data:`ROUNDS` rounds alternating the order) on the thread CPU clock with one torch thread; the
ratio is the ratio of the arms' medians. Before timing, the two arms' results are compared
(:func:`funcbwd.compare.check_close`): an op whose arms disagree gets no ratio. Each entry
says which ATen ops sent either arm to vmap's slow per-sample fallback. Timings are never
pass/fail: they are figures for the design review.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import warnings
from typing import Any, Sequence

import torch
from torch.func import vmap

from funcbwd_lab import batching
from funcbwd.errors import first_line
from funcbwd_lab.run.scenario import output_specs
from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.coverage import opinfo
from funcbwd.compare import check_close
from funcbwd_lab.run.outcomes import fallbacks_seen
from funcbwd_lab.strategies import get_strategy

#: the saved cost measurements, in the checkout's data/ (``coverage --load FILE --cost``)
COST_FILE = "coverage-cost.json"
N_COTANGENTS = 64
ROUNDS = 5
TARGET_S = 0.02
MAX_NUMBER = 50
WORST = 15


def eligible(records: Sequence[dict[str, Any]]) -> bool:
    """Both builtin and whole passed the op's first float32 sample of ``vmapvjp`` in the sweep."""
    first = {r["strategy"]: r["status"] for r in records if r["sample"] == "0"
             and r.get("composition", "vmapvjp") == "vmapvjp" and r.get("dtype", "float32") == "float32"}
    return first.get("builtin") == "pass" and first.get("whole") == "pass"


def op_cost(op: str, records: Sequence[dict[str, Any]], *, n: int = N_COTANGENTS,
            rounds: int = ROUNDS, seed: int = 0) -> dict[str, Any] | None:
    """The cost entry of one op (None if :func:`eligible` says it has none)."""
    if not eligible(records):
        return None
    entry: dict[str, Any] = {"op": op, "sample": "0", "cotangents": n, "rounds": rounds,
                             "clock": "thread_cpu", "ratio": math.nan, "error": ""}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = opinfo.op_by_id(op)
            p = opinfo.case_for(info, opinfo.samples(info, limit=1)[0], "0")
        if isinstance(p, str):
            entry["error"] = p
            return entry
        with timing.one_torch_thread():
            entry.update(_measure(p, n, rounds, seed))
    except Exception as e:  # noqa: BLE001 - a cost that cannot be measured is recorded, not fatal
        entry["error"] = f"{type(e).__name__}: {first_line(str(e), 200)}"
    return entry


def _measure(case: tuple, n: int, rounds: int, seed: int) -> dict[str, Any]:
    spec, smp = case
    g = torch.Generator().manual_seed(seed)
    cts = tuple(torch.randn((n, *sh), generator=g, dtype=dt) for sh, dt in output_specs(spec, smp))
    primals = [smp.args[d] for d in smp.diff]

    def f(*prims: torch.Tensor) -> tuple:
        full = list(smp.args)
        for d, v in zip(smp.diff, prims):
            full[d] = v
        return spec.torch_op(*full)

    whole = get_strategy("whole")
    _, vjp_builtin = torch.func.vjp(f, *primals)
    _, vjp_whole = whole.vjp(f, *primals)

    def run_builtin() -> Any:
        return vmap(vjp_builtin)(cts)

    def run_whole() -> Any:
        return vmap(vjp_whole)(cts)

    @contextlib.contextmanager
    def whole_ctx():
        with batching.scoped_rules():
            yield

    out: dict[str, Any] = {}
    for name, fn, ctx in (("builtin", run_builtin, contextlib.nullcontext), ("whole", run_whole, whole_ctx)):
        with fallbacks_seen() as seen, ctx():
            out[name] = fn()
        out[f"fallback_ops_{name}"] = seen.ops
    check_close([x for x in out.pop("whole") if x is not None],
                [x for x in out.pop("builtin") if x is not None], "whole vs builtin, 64 cotangents")
    series = [timing.Timed({"arm": "builtin"}, run_builtin, contextlib.nullcontext, rounds),
              timing.Timed({"arm": "whole"}, run_whole, whole_ctx, rounds)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing.run_interleaved(series, "thread_cpu", TARGET_S, MAX_NUMBER)
    b, w = series
    if b.error or w.error:
        out["error"] = b.error or w.error
        return out
    out.update(builtin_s=timing.median(b.samples), whole_s=timing.median(w.samples),
               builtin_samples=b.samples, whole_samples=w.samples, number=b.number,
               whole_number=w.number)
    out["ratio"] = timing.div(out["whole_s"], out["builtin_s"])
    return out


# ------------------------------------------------------------------------------ summary, figure
def _measured(costs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in costs if not c.get("error") and not math.isnan(c.get("ratio", math.nan))]


def _quantile(xs: Sequence[float], q: float) -> float:
    if not xs:
        return math.nan
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


def summarize_cost(costs: Sequence[dict[str, Any]], worst: int = WORST) -> dict[str, Any]:
    """Median and p90 of the whole / builtin ratio over the measured ops, and the ``worst`` ops
    (each with whether the slow fallback ran under either arm); the ops that could not be
    measured, with why."""
    ok = _measured(costs)
    ratios = sorted(c["ratio"] for c in ok)
    top = sorted(ok, key=lambda c: -c["ratio"])[:worst]
    return {
        "measured": len(ok),
        "unmeasured": [{"op": c["op"], "error": c.get("error", "")} for c in costs if c not in ok],
        "median": statistics.median(ratios) if ratios else math.nan,
        # the absolute extra time per batched backward: a fixed functionalize overhead shows here
        "median_extra_us": (statistics.median((c["whole_s"] - c["builtin_s"]) * 1e6 for c in ok)
                            if ok else math.nan),
        "p90": _quantile(ratios, 0.9),
        "worst": [{"op": c["op"], "ratio": round(c["ratio"], 2),
                   "builtin_us": round(c["builtin_s"] * 1e6, 1),
                   "whole_us": round(c["whole_s"] * 1e6, 1),
                   "fallback_whole": c.get("fallback_ops_whole", []),
                   "fallback_builtin": c.get("fallback_ops_builtin", [])} for c in top],
    }


def format_cost(summary: dict[str, Any]) -> str:
    lines = [f"cost of functionalizing every backward (whole with rules / builtin; vmap over "
             f"{N_COTANGENTS} cotangents, first sample): {summary['measured']} ops measured; "
             f"median {summary['median']:.2f}x, p90 {summary['p90']:.2f}x; median extra time "
             f"{summary['median_extra_us']:.0f} us per batched backward",
             f"worst {len(summary['worst'])}:"]
    for w in summary["worst"]:
        fb = ", ".join(w["fallback_whole"]) or "no"
        lines.append(f"  {w['op']:40s} {w['ratio']:7.2f}x  ({w['builtin_us']} -> {w['whole_us']} us; "
                     f"slow fallback under whole: {fb})")
    if summary["unmeasured"]:
        lines.append(f"not measured: {len(summary['unmeasured'])} (" + "; ".join(
            f"{u['op']}: {first_line(u['error'], 60)}" for u in summary["unmeasured"][:10]) + ")")
    return "\n".join(lines)


def cost_figure(costs: Sequence[dict[str, Any]]):
    """A plotly histogram of the per-op ratio (log x axis), median and p90 marked."""
    import plotly.graph_objects as go

    ok = _measured(costs)
    s = summarize_cost(costs)
    ratios = [c["ratio"] for c in ok]
    fig = go.Figure()
    fig.add_histogram(x=[math.log10(r) for r in ratios], nbinsx=40, name="ops",
                      hovertext=[c["op"] for c in ok], marker_color="#6c8ebf")
    for label, v in (("median", s["median"]), ("p90", s["p90"])):
        if not math.isnan(v):
            fig.add_vline(x=math.log10(v), line_dash="dash",
                          annotation_text=f"{label} {v:.2f}x", annotation_position="top")
    ticks = [0.5, 1, 2, 5, 10, 20, 50]
    fig.update_layout(
        title=f"Cost of functionalizing each backward: whole / builtin, {len(ok)} OpInfo ops",
        xaxis=dict(title=f"batched backward time ratio, whole / builtin (vmap over {N_COTANGENTS} "
                         "cotangents; log scale, 1 = same time)",
                   tickvals=[math.log10(t) for t in ticks], ticktext=[f"{t}x" for t in ticks]),
        yaxis_title="ops (count)", bargap=0.05)
    return fig
