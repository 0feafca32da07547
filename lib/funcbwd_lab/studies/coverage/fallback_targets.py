"""The fallback-speedup study's arms beyond builtin and traced_backward, and its targets (issue 30).

* **The floor** (:func:`floor_function`): one batched out-of-place call of the same math
  without vmap: the composition's function (torch's own ``vjp`` of the op, then its ``vjp_fn``)
  called once on the batched tensors, batch dim first (else last), as if they were one sample.
  It is the same math only where the op treats that dim as a batch (elementwise ops, ops along
  another dim, ...): so it is used only where it equals the per-sample loop (the study's
  reference) at the study's tolerance; elsewhere the op has no floor, with why.
* **Large inputs** (:func:`large_inputs`): the bench's target ops (:data:`LARGE_OPS`) at the
  bench's "large" size (every dim of their first catalog sample x16,
  :func:`funcbwd_lab.studies.bench.inputs.resize`), torch's op (not the legacy formula) under
  ``vmap`` over the primal and the cotangent, at batches :data:`LARGE_BATCHES` (1 included):
  where traced_backward adds only its passthrough, or its graph.
* **Targets** (:data:`TARGETS`) each with a verdict from intervals: ``met`` when the interval
  is on the target's side, ``missed`` when it is on the other side, ``not resolved`` when it
  contains the target (the run's noise hides the answer). Per op the interval is the paired
  ratios' median interval; across ops (a median over ops) it is [median of the ops' lower
  bounds, median of their upper bounds], which holds the median whenever every op's interval
  holds its own value.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable, Sequence

import torch

from funcbwd.errors import first_line
from funcbwd.compare import compare

#: name -> (what, bound, "min" (at least) or "max" (at most))
TARGETS = {
    "speedup_b8_plus": ("traced_backward / builtin speedup at every batch >= 8, median over the "
                        "ops where builtin falls back", 1.0, "min"),
    "floor_b64": ("traced_backward / the floor (time) at batch 64, median over the ops with a "
                  "floor", 2.0, "max"),
    "fallbacks_left": ("fallback ops left in traced_backward's graphs (each named with why)", 0, "max"),
    "large_inputs": ("traced_backward / builtin (time) at large inputs, every batch (1 included), "
                     "worst op", 1.05, "max"),
}
LARGE_OPS = ("diag", "index_select", "topk", "sort", "mode")
LARGE_BATCHES = (1, 8)


def verdict(lo: float, hi: float, bound: float, kind: str) -> str:
    """'met', 'missed' or 'not resolved' for an interval [lo, hi] against ``bound``: ``kind``
    'min' wants the value >= bound, 'max' wants it <= bound."""
    if any(map(math.isnan, (lo, hi))):
        return "not resolved"
    if kind == "min":
        return "met" if lo >= bound else "missed" if hi < bound else "not resolved"
    return "met" if hi <= bound else "missed" if lo > bound else "not resolved"


def median_of(values: Sequence[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(median of the medians, median of the lower bounds, median of the upper bounds)."""
    if not values:
        return math.nan, math.nan, math.nan
    return tuple(statistics.median(v[i] for v in values) for i in range(3))  # type: ignore[return-value]


# ------------------------------------------------------------------------------ the floor
def floor_function(p: Any, in_dims: tuple) -> tuple[Callable[[], Any] | None, str]:
    """(a call of the floor on the study's batched args, how: 'batch first' or 'batch last') or
    (None, why there is none). Batch last: every batched tensor with its batch dim moved last
    (contiguous, outside the call), the grads' last dim moved back first (a view)."""
    if any(d not in (0, None) for d in in_dims):
        return None, f"in_dims {list(in_dims)}: the floor needs the batch dim first"
    args = p.batched(in_dims)
    f = p.composition.function()
    want = p.expected(in_dims)
    why = []
    for layout in ("batch first", "batch last"):
        if layout == "batch first":
            ins, back = args, (lambda t: t)
        else:
            ins = [a.detach().movedim(0, -1).contiguous().requires_grad_(a.requires_grad)
                   if isinstance(a, torch.Tensor) and d == 0 and a.dim() > 1 else a
                   for a, d in zip(args, in_dims)]
            back = (lambda t: t.movedim(-1, 0) if t.dim() > 1 else t)

        def call(ins: list = ins, back: Callable = back) -> Any:
            with torch.enable_grad():
                return tuple(back(t.detach()) for t in _leaves(f(*ins)))

        try:
            got = call()
        except Exception as e:  # noqa: BLE001 - the op does not take this batch dim
            why.append(f"{layout}: raises {type(e).__name__}: {first_line(str(e), 60)}")
            continue
        c = compare(got, want)
        if c.ok:
            return call, layout
        why.append(f"{layout}: not the same math ({first_line(c.detail, 60)})")
    return None, "; ".join(why)


def _leaves(out: Any) -> list:
    from torch.utils import _pytree as pytree
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


# ------------------------------------------------------------------------------ large inputs
def large_inputs(time_arms: Callable[..., dict], repeats: int, progress: Callable[[str], None]
                 ) -> list[dict[str, Any]]:
    """Rows (op, batch, ratio traced / builtin with interval, mechanism) for :data:`LARGE_OPS`
    at the "large" size; ``time_arms(arms, repeats)`` is the study's paired timing."""
    from funcbwd_lab.ops import registry
    from funcbwd_lab.studies.bench import inputs
    from funcbwd_lab.strategies import get_strategy, provenance
    from funcbwd_lab.strategies.traced_backward import TracedBackward

    rows = []
    for name in LARGE_OPS:
        spec = registry.get_op(name)
        smp = inputs.resize(spec, "large")
        pos = smp.diff[0]
        for batch in LARGE_BATCHES:
            g = torch.Generator().manual_seed(7)
            x = smp.args[pos]
            xs = torch.randn((batch, *x.shape), generator=g, dtype=x.dtype)

            def fn(t: torch.Tensor, spec: Any = spec, smp: Any = smp, pos: int = pos) -> tuple:
                args = list(smp.args)
                args[pos] = t
                return spec.diff_out(spec.torch_op(*args))

            with torch.no_grad():
                cts = tuple(torch.randn((batch, *o.shape), generator=g, dtype=o.dtype)
                            for o in fn(x))
            traced, builtin = TracedBackward(cost_gate=True).with_rules(), get_strategy("builtin")

            def arm(st: Any) -> Callable[[], Any]:
                def h(t: torch.Tensor, *c: torch.Tensor) -> Any:
                    return st.vjp(fn, t)[1](c)
                return lambda: torch.func.vmap(h)(xs, *cts)

            with provenance.collecting() as events:
                arm(traced)()
            mech = sorted({e.mechanism for e in events if e.strategy == traced.name})
            row = {"op": name, "batch": batch, "size": "large", "shape": list(x.shape),
                   "mechanism": mech}
            try:
                t = time_arms([arm(builtin), arm(traced)], repeats)
                ratios = [tr / b for b, tr in zip(t["samples"][0], t["samples"][1])]
                lo, hi = _interval(ratios)
                row.update(ratio=statistics.median(ratios), ratio_ci95=[lo, hi],
                           builtin_median_s=statistics.median(t["samples"][0]),
                           traced_median_s=statistics.median(t["samples"][1]),
                           repeats=t["repeats"])
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                row["error"] = f"{type(e).__name__}: {first_line(str(e), 100)}"
            rows.append(row)
            progress(f"large {name} B={batch}: "
                     + (f"{row['ratio']:.3f}x builtin [{row['ratio_ci95'][0]:.3f}, "
                        f"{row['ratio_ci95'][1]:.3f}]" if "ratio" in row else row["error"]))
    return rows


def _interval(xs: Sequence[float]) -> tuple[float, float]:
    from funcbwd_lab.studies.bench import timing
    return timing.median_interval(xs)


# ------------------------------------------------------------------------------ the targets
def targets(measured: Sequence[dict[str, Any]], batches: Sequence[int],
            large: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each of :data:`TARGETS` with its value, interval, verdict and basis."""
    out: dict[str, Any] = {}
    what, bound, kind = TARGETS["speedup_b8_plus"]
    per_batch = {}
    for b in batches:
        if b < 8:
            continue
        vals = [(r["by_batch"][str(b)]["speedup"], *r["by_batch"][str(b)]["speedup_ci95"])
                for r in measured if str(b) in r.get("by_batch", {})]
        m, lo, hi = median_of(vals)
        per_batch[str(b)] = {"median": m, "ci95": [lo, hi], "ops": len(vals),
                             "verdict": verdict(lo, hi, bound, kind),
                             "ops_met": sum(verdict(v[1], v[2], bound, kind) == "met" for v in vals),
                             "ops_missed": sum(verdict(v[1], v[2], bound, kind) == "missed" for v in vals)}
    verdicts = [v["verdict"] for v in per_batch.values()]
    out["speedup_b8_plus"] = {"what": what, "bound": bound, "by_batch": per_batch,
                              "verdict": _all(verdicts)}
    what, bound, kind = TARGETS["floor_b64"]
    with_floor = [r for r in measured if r.get("floor", {}).get("traced_over_floor") is not None]
    vals = [(r["floor"]["traced_over_floor"], *r["floor"]["traced_over_floor_ci95"]) for r in with_floor]
    m, lo, hi = median_of(vals)
    out["floor_b64"] = {"what": what, "bound": bound, "median": m, "ci95": [lo, hi],
                        "ops": len(vals), "verdict": verdict(lo, hi, bound, kind),
                        "no_floor": {r["op"]: r.get("floor", {}).get("why", "not measured")
                                     for r in measured if r not in with_floor}}
    what, bound, kind = TARGETS["fallbacks_left"]
    left = {r["op"]: r["graph_fallbacks_left"] for r in measured if r.get("graph_fallbacks_left")}
    unnamed = [op for op, ls in left.items() if any(not why for _, why in ls)]
    out["fallbacks_left"] = {"what": what, "bound": bound, "ops_with_left": len(left),
                             "left": left, "graphs": sum(1 for r in measured if r.get("graph_ran")),
                             "verdict": ("met" if not left else
                                         "met (each named with why)" if not unnamed else "missed")}
    what, bound, kind = TARGETS["large_inputs"]
    timed = [r for r in large if "ratio" in r]
    worst = max(timed, key=lambda r: r["ratio"], default=None)
    per = [verdict(*r["ratio_ci95"], bound, kind) for r in timed]
    out["large_inputs"] = {"what": what, "bound": bound, "rows": len(timed),
                           "worst": ({"op": worst["op"], "batch": worst["batch"], "ratio": worst["ratio"],
                                      "ci95": worst["ratio_ci95"]} if worst else None),
                           "met": per.count("met"), "missed": per.count("missed"),
                           "not_resolved": per.count("not resolved"),
                           "verdict": _all(per) if per else "not resolved"}
    return out


def _all(verdicts: Sequence[str]) -> str:
    """One verdict for targets that must all hold: missed if any is, met if all are."""
    if "missed" in verdicts:
        return "missed"
    return "met" if verdicts and all(v == "met" for v in verdicts) else "not resolved"


def format_targets(t: dict[str, Any]) -> list[str]:
    lines = ["targets (issue 30):"]
    s = t["speedup_b8_plus"]
    parts = [f"B={b}: {v['median']:.2f}x [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}] over {v['ops']} ops "
             f"({v['ops_met']} met, {v['ops_missed']} missed)" for b, v in s["by_batch"].items()]
    lines.append(f"  >= {s['bound']:g}x builtin at B >= 8 (median over ops): {s['verdict']}; " + "; ".join(parts))
    f = t["floor_b64"]
    lines.append(f"  <= {f['bound']:g}x the floor at B = 64 (median over {f['ops']} ops with a floor): "
                 f"{f['verdict']}; {f['median']:.2f}x [{f['ci95'][0]:.2f}, {f['ci95'][1]:.2f}]; "
                 f"{len(f['no_floor'])} ops without a floor")
    fl = t["fallbacks_left"]
    lines.append(f"  0 fallback ops left in the graphs (or named): {fl['verdict']}; "
                 f"{fl['ops_with_left']} of {fl['graphs']} graphs keep some: "
                 + "; ".join(f"{op}: {', '.join(o for o, _ in ls)}" for op, ls in fl["left"].items()))
    lg = t["large_inputs"]
    w = lg["worst"]
    lines.append(f"  <= {lg['bound']:g}x builtin at large inputs (B=1 included): {lg['verdict']}; "
                 f"{lg['met']} met, {lg['missed']} missed, {lg['not_resolved']} not resolved of "
                 f"{lg['rows']}" + (f"; worst {w['op']} B={w['batch']} {w['ratio']:.3f}x "
                                    f"[{w['ci95'][0]:.3f}, {w['ci95'][1]:.3f}]" if w else ""))
    return lines


def format_result(result: dict[str, Any]) -> str:
    s = result["summary"]
    meta = result["meta"]
    lines = [f"{s['measured']} ops measured, {s['failed']} failed (batches "
             f"{meta.get('batches', [meta.get('batch')])})"]
    if s["measured"]:
        lines.append(f"median speedup at B={s.get('batch', meta.get('batch'))} "
                     f"{s['median_speedup']:.2f}x; quartiles {s['q1']:.2f}x .. "
                     f"{s['q3']:.2f}x; worst {s['worst']['op']} {s['worst']['speedup']:.2f}x, "
                     f"best {s['best']['op']} {s['best']['speedup']:.2f}x")
        for k, ops in s["by_fallback_left"].items():
            vals = sorted(ops.values())
            lines.append(f"  traced_backward leaves {k} of builtin's fallback ops: {len(vals)} ops"
                         + (f", median {statistics.median(vals):.2f}x" if vals else ""))
    if "targets" in s:
        lines += format_targets(s["targets"])
    for r in result["ops"]:
        if r["status"] == "failed":
            lines.append(f"  failed {r['op']}: {first_line(r['reason'], 80)}")
    return "\n".join(lines)
