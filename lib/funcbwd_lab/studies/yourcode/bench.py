"""Measurements for the public cases and the tool: cost vs the hand rewrite, first-call latency,
cache memory. Nothing here passes or fails a test; :func:`render` states each target met/missed.

* **cost** (:func:`cost`): per case, ``vmap(vjp)`` (per-sample gradients; the cotangent and the
  batched argument batched) of the wrapped function vs the same transform of the out-of-place
  hand rewrite, at each batch size; paired interleaved timings
  (:func:`funcbwd_lab.studies.bench.timing.run_paired`, thread CPU clock), the ratio the median of per-pair
  ratios with a distribution-free 95% interval. Target: <= 1.1x at batch >= 64.
* **first call** (:func:`first_calls`): a fresh ``python`` process per row, after
  ``import funcbwd, torch`` (and building the args, untimed): the first call of the wrapped
  formula under ``vmap`` (trace, check, compile, run), for every formula of the 8 test ops and
  each case; compared with the same process running ``make_fx(functionalize(formula))`` (the
  trace before this tool existed) and torch's own ``vmap(functionalize(formula))``, and with
  ``TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE=1``. No target: after torch's own one-time
  imports (which a hand rewrite pays as well) the tool's first call is milliseconds.
* **memory** (:func:`memory`): the process's resident memory while one wrapper is called
  under ``vmap`` with ``n`` distinct shapes (default bound 256 signatures).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.func import vjp, vmap

from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.yourcode import issue_cases as cases

BATCHES = (64, 256)
TEST_OPS = ("masked_select", "clamp", "diag", "index_select", "topk", "prod", "mode", "sort")
COST_TARGET, LATENCY_TARGET_MS = 1.1, 50.0


def _progress(msg: str) -> None:
    print(f"yourcode-bench: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ cost
def _vmap_vjp(fn: Callable, case: cases.Case, args: tuple, bs, cts) -> Callable[[], Any]:
    return lambda: cases.transformed("vmap_vjp", fn, args, case, bs, cts)


def cost(batches=BATCHES, pairs: int = 15, target_s: float = 0.02) -> list[dict[str, Any]]:
    rows = []
    for case in cases.CASES.values():
        wrapped = cases.wrapped_fn(case)
        for b in batches:
            _progress(f"cost {case.name} batch {b}")
            args = case.make_args()
            bs = cases.samples(case, args, 1, batch=b)
            with torch.no_grad():
                out = cases.transformed("vmap", case.rewrite, args, case, bs[:1], None)[0]
            cts = torch.randn((b, *out.shape))
            arms = [_vmap_vjp(wrapped, case, args, bs, cts), _vmap_vjp(case.rewrite, case, args, bs, cts)]
            current = [arms[0]]

            def arm(i):
                class _Arm:
                    def __enter__(self):
                        current[0] = arms[i]

                    def __exit__(self, *exc):
                        return False
                return _Arm

            number, (a, r) = timing.run_paired(lambda: current[0](), [arm(0), arm(1)], pairs,
                                                target_s, max_number=200)
            ratios = [x / y for x, y in zip(a, r) if y > 0]
            lo, hi = timing.median_interval(ratios)
            rows.append({"case": case.name, "batch": b, "calls_per_sample": number, "pairs": pairs,
                         "wrapped_us": 1e6 * statistics.median(a),
                         "rewrite_us": 1e6 * statistics.median(r),
                         "ratio": statistics.median(ratios), "ratio_ci95": [lo, hi],
                         "target_met": statistics.median(ratios) <= COST_TARGET})
    return rows


# ------------------------------------------------------------------------------ first call
_OP_SCRIPT = r"""
import os, sys, time, json
import torch, funcbwd
from funcbwd_lab.ops import get_op
from funcbwd.fx.formula_graphs import formula_args_for
op = get_op(sys.argv[1]); mode = sys.argv[2]
args = formula_args_for(op, op.sample())
g = torch.stack([args[0]] * 4)
rest = args[1:]
if mode == "make_fx":
    from torch.fx.experimental.proxy_tensor import make_fx
    t = time.perf_counter()
    try:
        make_fx(torch.func.functionalize(lambda gg: op.formula(gg, *rest)), tracing_mode="fake")(args[0])
        res = "traced"
    except Exception as e:
        res = type(e).__name__
elif mode == "torch":
    t = time.perf_counter()
    torch.func.vmap(torch.func.functionalize(lambda gg: op.formula(gg, *rest)))(g)
    res = "ran"
else:
    import warnings
    warnings.simplefilter("ignore")
    if mode == "tool_after_torch":  # torch's own one-time costs paid first: the tool's share
        try:
            torch.func.vmap(torch.func.functionalize(lambda gg: op.formula(gg, *rest)))(g)
        except Exception:
            pass
    t = time.perf_counter()
    w = funcbwd.functionalized(op.formula)
    torch.func.vmap(lambda gg: w(gg, *rest))(g)
    res = type(w.functionalizer.cache.values()[0]).__name__
ms = 1e3 * (time.perf_counter() - t)
print(json.dumps({"ms": ms, "result": res}))
"""

_CASE_SCRIPT = r"""
import sys, time, json, warnings
import torch, funcbwd
from funcbwd_lab.studies.yourcode import issue_cases as cases
warnings.simplefilter("ignore")
case = cases.CASES[sys.argv[1]]
args = case.make_args()
bs = cases.samples(case, args, 1, batch=8)
with torch.no_grad():
    out = cases.transformed("vmap", case.rewrite, args, case, bs[:1], None)[0]
cts = torch.randn((8, *out.shape))
if sys.argv[2] == "warm":  # torch.func's own one-time imports paid first (the rewrite)
    cases.transformed("vmap_vjp", case.rewrite, args, case, bs, cts)
t = time.perf_counter()
w = cases.wrapped_fn(case)
cases.transformed("vmap_vjp", w, args, case, bs, cts)
first = time.perf_counter() - t
t = time.perf_counter()
cases.transformed("vmap_vjp", w, args, case, bs, cts)
print(json.dumps({"ms": 1e3 * first, "second_ms": 1e3 * (time.perf_counter() - t)}))
"""


def _fresh(script: str, argv: list[str], env_extra: dict | None = None) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    out = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True,
                         env=env, timeout=300)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_calls(ops=TEST_OPS) -> dict[str, Any]:
    rows = []
    for name in ops:
        row: dict[str, Any] = {"op": name}
        no_meta = {"TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE": "1"}
        for mode, env in (("tool", None), ("torch", None), ("make_fx", None),
                          ("tool_after_torch", None), ("tool_no_meta_reference", no_meta)):
            _progress(f"first call {name} ({mode})")
            row[mode] = _fresh(_OP_SCRIPT, [name, "tool" if mode == "tool_no_meta_reference"
                                             else mode], env)
        rows.append(row)
    case_rows = []
    for name in cases.CASES:
        _progress(f"first call {name}")
        case_rows.append({"case": name, "fresh": _fresh(_CASE_SCRIPT, [name, "fresh"]),
                          "after_torch": _fresh(_CASE_SCRIPT, [name, "warm"])})
    return {"ops": rows, "cases": case_rows}


# ------------------------------------------------------------------------------ memory
def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _shape(i: int) -> tuple[int, int]:
    """The i-th of 10,000 distinct shapes, all at most 102 x 102 from the start: tensor sizes do
    not grow with i (growing ones raise the allocator's high-water mark, not the cache's)."""
    a = i % 100
    return 3 + a, 3 + (i // 100 + 37 * a) % 100


def memory(n: int) -> dict[str, Any]:
    _progress(f"cache memory over {n} shapes (one trace each)")
    w = cases.functionalized(cases.zeros_then_item_assignment)
    samples = []
    for i in range(n):
        x = torch.randn(2, *_shape(i))
        vmap(w)(x, x)
        if (i + 1) % max(1, n // 10) == 0:
            samples.append({"shapes": i + 1, "rss_mb": round(_rss_mb(), 1),
                            "cached": w.cache_info().currsize})
            _progress(f"  {i + 1} shapes, rss {samples[-1]['rss_mb']} MB")
    info = w.cache_info()
    bound = next((s for s in samples if s["shapes"] >= info.maxsize), samples[0])
    return {"n": n, "maxsize": info.maxsize, "misses": info.misses, "samples": samples,
            "growth_after_bound_mb": round(samples[-1]["rss_mb"] - bound["rss_mb"], 1)}


# ------------------------------------------------------------------------------ the run
def run(quick: bool = False) -> dict[str, Any]:
    batches = BATCHES[:1] if quick else BATCHES
    pairs = 7 if quick else 21
    t0 = time.perf_counter()
    result = {
        "meta": {"torch": torch.__version__, "batches": list(batches), "pairs": pairs,
                 "quick": quick, "clock": "thread_cpu", "cost_target": COST_TARGET,
                 "latency_target_ms": LATENCY_TARGET_MS},
        "cost": cost(batches, pairs),
        "first_call": first_calls(TEST_OPS[:3] if quick else TEST_OPS),
        "memory": memory(1000 if quick else 10_000),
    }
    result["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def save(result: dict[str, Any], path: str | Path = "data/yourcode-bench.json") -> Path:
    path = Path(path)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return path


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render(result: dict[str, Any]) -> str:
    """Text of a :func:`run` result: each target met/missed with its number (fits 100 columns)."""
    m = result["meta"]
    lines = [f"yourcode bench (torch {m['torch']}, batches {m['batches']}, {m['pairs']} pairs, "
             f"{'quick' if m['quick'] else 'full'})", "",
             f"cost: vmap(vjp) wrapped / out-of-place rewrite (target <= {m['cost_target']}x)"]
    for r in result["cost"]:
        lo, hi = r["ratio_ci95"]
        lines.append(f"  {r['case']:<28} batch {r['batch']:>4}: {r['ratio']:.2f}x "
                     f"[{lo:.2f}, {hi:.2f}] ({r['wrapped_us']:.0f} vs {r['rewrite_us']:.0f} us) "
                     f"{_met(r['target_met'])}")
    lines += ["", "first call in a fresh process, ms (no target: torch's one-time imports, paid by",
              "a hand rewrite too, are most of it; the 'tool after torch's' column is the tool's own):",
              "  op: tool | torch's vmap(functionalize) | make_fx (before) | tool after torch's"
              " | no meta ref"]

    def ms(d):
        return f"{d['ms']:7.0f}" if "ms" in d else "  error"

    for r in result["first_call"]["ops"]:
        tool, own = r["tool"], r["tool_after_torch"]
        lines.append(f"  {r['op']:<13} {ms(tool)} | {ms(r['torch'])} | {ms(r['make_fx'])} | "
                     f"{ms(own)} | {ms(r['tool_no_meta_reference'])} "
                     f"{'graph' if tool.get('result') == 'FormulaGraph' else 'untraced'}")
    lines.append("  case (vmap(vjp)): fresh | after torch.func's own first call | second call")
    for r in result["first_call"]["cases"]:
        f, w = r["fresh"], r["after_torch"]
        lines.append(f"  {r['case']:<28} {ms(f)} | {ms(w)} | "
                     f"{w.get('second_ms', float('nan')):7.1f} ms")
    mem = result["memory"]
    lines += ["", f"cache memory: {mem['n']} shapes, bound {mem['maxsize']}: "
                  f"rss {mem['samples'][0]['rss_mb']} -> {mem['samples'][-1]['rss_mb']} MB, "
                  f"+{mem['growth_after_bound_mb']} MB after the bound;",
              f"  {mem['samples'][-1]['cached']} graphs cached"]
    return "\n".join(lines)
