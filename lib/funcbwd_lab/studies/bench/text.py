"""Plain-text tables of a bench result (terminal, report, notebooks), all computed by
:mod:`funcbwd_lab.studies.bench.results` from the raw samples; "-" marks what was not measured."""

from __future__ import annotations

import math
from typing import Any

from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.tables import WIDTH, paragraph, table


def fmt(x: Any, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def format_ratios(results: dict[str, Any], size: str = "small", width: int = WIDTH) -> str:
    rows = [r for r in bench_results.ratios(results) if r["size"] == size]
    rows = [[r["op"], r["batch"], r["label"], fmt(r["ratio_vs_handfixed"]),
             fmt(r["ratio_vs_builtin"]), fmt(r["ratio_vs_floor"]), fmt(r["speedup_vs_loop"], 1)]
            for r in sorted(rows, key=lambda r: (r["op"], r["batch"], r["label"]))]
    head = (f"{size} inputs: time under vmap as ratios (lower is better), and the speedup over the "
            "per-sample loop; x floor = x the cheaper of handfixed and builtin")
    return paragraph(head, width) + "\n" + table(
        ["op", "B", "label", "x handfixed", "x builtin", "x floor", "x loop"], rows, width=width,
        align="lrlrrrr")


def format_reference_check(results: dict[str, Any], width: int = WIDTH) -> str:
    """Where handfixed is (not) the floor, per op and size (:func:`bench_results.reference_check`)."""
    rows = bench_results.reference_check(results)
    head = ("is handfixed the floor? (traced and builtin vs handfixed; not the floor where a "
            "functional formula is faster beyond the noise)")
    return "\n".join([paragraph(head, width)] + [paragraph(r["text"], width, "  ", "    ")
                                                  for r in rows])


def format_headline(h: dict[str, Any], width: int = WIDTH) -> str:
    """The best strategy per op, from :func:`funcbwd_lab.studies.bench.results.headline`."""
    rows = []
    for op, d in h["per_op"].items():
        if not d.get("best"):
            rows.append([op, "-", d.get("reason", ""), "", "", ""])
            continue
        large = h.get("size") == "large"
        rows.append([op, d["best"], "",
                     fmt(d["worst_ratio_vs_floor"] if large else d["worst_ratio_vs_handfixed"]),
                     fmt(d["worst_ratio_vs_builtin"]), fmt(d["min_speedup_vs_loop"], 1)])
    vs = f"x {bench_results.FLOOR}" if h.get("size") == "large" else "x handfixed"
    if all(not r[2] for r in rows):  # no op without a best: no "why not" column
        rows = [r[:2] + r[3:] for r in rows]
        header = ["op", "best", vs, "x builtin", "x faster than loop"]
        align = "llrrr"
    else:
        header = ["op", "best", "why none", vs, "x builtin", "x faster than loop"]
        align = "lllrrr"
    return (paragraph(f"headline ({h['criteria']}):", width) + "\n"
            + table(header, rows, width=width, align=align, indent="  "))


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


def format_targets(results: dict[str, Any], width: int = WIDTH) -> str:
    return "\n".join(["targets:"] + [paragraph(target_line(t), width, "  ", "      ")
                                      for t in bench_results.targets(results)])


def hooks_claim_line(g: dict[str, Any]) -> str:
    if g.get("error"):
        return f"{g['graph']}: not measured ({g['error']})"
    d = g["us_per_node"]
    interval = f"95% interval [{fmt(d['ci_low'])}, {fmt(d['ci_high'])}] us/node, {d['pairs']} pairs"
    return f"{g['graph']} ({g['nodes']} nodes): {g['verdict']} ({interval})"


def format_hooks_claim(results: dict[str, Any], width: int = WIDTH) -> str:
    claim = bench_results.hooks_claim_result(results)
    head = "hooks with vmap off, per node over no-op Python hooks (paired):"
    if claim["status"] != "ok":
        return paragraph(f"{head} not measured ({claim.get('reason')})", width)
    return "\n".join([head] + [paragraph(hooks_claim_line(g), width, "  ", "      ")
                               for g in claim["graphs"]])


def format_untimed(results: dict[str, Any], width: int = WIDTH) -> str:
    """The registered slow strategies this run did not time (the bench leaves them out,
    :func:`funcbwd_lab.studies.bench.config.strategy_labels`), each with where its cost is measured
    instead (:data:`funcbwd_lab.studies.bench.config.COSTS_ELSEWHERE`); "" when there are none."""
    from funcbwd_lab.studies.bench.config import COSTS_ELSEWHERE
    from funcbwd_lab.strategies import available, get_strategy

    timed = set(results["config"].get("strategies", []))
    slow = [s for s in available() if s not in timed and get_strategy(s).slow]
    return "\n".join(paragraph(f"not timed here: {s} (a slow strategy: its cells take seconds each)"
                               + (f"; {COSTS_ELSEWHERE[s]}" if s in COSTS_ELSEWHERE else ""),
                               width, "", "    ") for s in slow)


def format_summary(results: dict[str, Any], width: int = WIDTH) -> str:
    """Headline (small, and large when measured), targets, the hooks claim, and the slow
    strategies not timed (:func:`format_untimed`)."""
    parts = [format_headline(bench_results.headline(results), width)]
    if "large" in results["config"]["sizes"]:
        parts.append(format_headline(bench_results.headline(results, size="large"), width))
    parts += [format_reference_check(results, width), format_targets(results, width),
              format_hooks_claim(results, width), format_untimed(results, width),
              f"elapsed: {results.get('elapsed_s')} s (config {results['config'].get('name')})"]
    return "\n".join(p for p in parts if p)


def targets_summary(results: dict[str, Any]) -> str:
    """The bench's targets in one phrase, for beside any headline ratio of the same run, e.g.
    ``4 of 5 bench targets missed, each judged on its worst case over 5 ops; worst 1.54x at mode,
    small, B=8``: a median that looks fine must not hide a missed target."""
    ts = [t for t in bench_results.targets(results) if t["status"] != "not measured"]
    missed = [t for t in ts if t["status"] == "missed"]
    n_ops = len([op for op in bench_results.TARGET_OPS if op in results["config"]["ops"]])
    text = (f"{len(missed)} of {len(ts)} bench targets missed, each judged on its worst case over "
            f"{n_ops} ops")
    ratios = [t for t in missed if "copy" not in t["name"] and not math.isnan(t["value"])]
    if ratios:
        w = max(ratios, key=lambda t: t["value"])
        at = w.get("where") or {}
        text += f"; worst {w['value']:.2f}x" + (f" at {at['op']}, {at['size']}, B={at['batch']}" if at else "")
    return text
