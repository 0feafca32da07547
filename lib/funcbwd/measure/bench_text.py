"""Plain-text tables of a bench result (terminal, report, notebooks), all computed by
:mod:`funcbwd.measure.bench_results` from the raw samples; "-" marks what was not measured."""

from __future__ import annotations

import math
from typing import Any

from funcbwd.measure import bench_results


def fmt(x: Any, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def format_ratios(results: dict[str, Any], size: str = "small") -> str:
    rows = [r for r in bench_results.ratios(results) if r["size"] == size]
    lines = [f"{size} inputs: time under vmap as ratios (lower is better), and the speedup over the "
             "per-sample loop; x floor = x the cheaper of handfixed and builtin",
             f"{'op':14s} {'B':>4s} {'label':24s} {'x handfixed':>11s} {'x builtin':>10s} "
             f"{'x floor':>8s} {'x loop':>7s}"]
    for r in sorted(rows, key=lambda r: (r["op"], r["batch"], r["label"])):
        lines.append(f"{r['op']:14s} {r['batch']:4d} {r['label']:24s} "
                     f"{fmt(r['ratio_vs_handfixed']):>11s} {fmt(r['ratio_vs_builtin']):>10s} "
                     f"{fmt(r['ratio_vs_floor']):>8s} {fmt(r['speedup_vs_loop'], 1):>7s}")
    return "\n".join(lines)


def format_reference_check(results: dict[str, Any]) -> str:
    """Where handfixed is (not) the floor, per op and size (:func:`bench_results.reference_check`)."""
    rows = bench_results.reference_check(results)
    head = ("is handfixed the floor? (traced and builtin vs handfixed; not the floor where a "
            "functional formula is faster beyond the noise)")
    return "\n".join([head] + [f"  {r['text']}" for r in rows])


def format_headline(h: dict[str, Any]) -> str:
    """The best strategy per op, from :func:`funcbwd.measure.bench_results.headline`."""
    lines = [f"headline ({h['criteria']}):"]
    for op, d in h["per_op"].items():
        if not d.get("best"):
            lines.append(f"  {op:14s} {d.get('reason', '')}")
            continue
        vs = (f"{fmt(d['worst_ratio_vs_floor'])}x {bench_results.FLOOR}" if h.get("size") == "large"
              else f"{fmt(d['worst_ratio_vs_handfixed'])}x handfixed")
        lines.append(f"  {op:14s} best={d['best']:22s} {vs}, "
                     f"{fmt(d['worst_ratio_vs_builtin'])}x builtin, "
                     f"{fmt(d['min_speedup_vs_loop'], 1)}x faster than the loop")
    return "\n".join(lines)


def target_line(t: dict[str, Any]) -> str:
    """One target: status, the number it is judged on and where that worst case is."""
    if t["status"] == "not measured":
        return f"{t['text']}: not measured"
    unit = " B" if "copy" in t["name"] else "x"
    where = t.get("where") or {}
    at = (f" (worst: {where['op']}, {where['size']}, B={where['batch']}; noise IQR/median "
          f"{fmt(where['rel_iqr'])})" if where else "")
    missing = f"; not timed for {', '.join(t['missing'])}" if t.get("missing") else ""
    value = fmt(t["value"], 0 if unit == " B" else 2)
    return f"{t['text']}: {t['status'].upper()}, {value}{unit}{at}{missing}"


def format_targets(results: dict[str, Any]) -> str:
    return "\n".join(["targets:"] + [f"  {target_line(t)}" for t in bench_results.targets(results)])


def hooks_claim_line(g: dict[str, Any]) -> str:
    if g.get("error"):
        return f"{g['graph']}: not measured ({g['error']})"
    d = g["us_per_node"]
    interval = f"95% interval [{fmt(d['ci_low'])}, {fmt(d['ci_high'])}] us/node, {d['pairs']} pairs"
    return f"{g['graph']} ({g['nodes']} nodes): {g['verdict']} ({interval})"


def format_hooks_claim(results: dict[str, Any]) -> str:
    claim = bench_results.hooks_claim_result(results)
    head = "hooks with vmap off, per node over no-op Python hooks (paired):"
    if claim["status"] != "ok":
        return f"{head} not measured ({claim.get('reason')})"
    return "\n".join([head] + [f"  {hooks_claim_line(g)}" for g in claim["graphs"]])


def format_summary(results: dict[str, Any]) -> str:
    """Headline (small, and large when measured), targets and the hooks claim."""
    parts = [format_headline(bench_results.headline(results))]
    if "large" in results["config"]["sizes"]:
        parts.append(format_headline(bench_results.headline(results, size="large")))
    parts += [format_reference_check(results), format_targets(results), format_hooks_claim(results),
              f"elapsed: {results.get('elapsed_s')} s (config {results['config'].get('name')})"]
    return "\n".join(parts)
