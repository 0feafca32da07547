""""What would it cost in C++?": per candidate, what core would pay if it implemented it, estimated
from what this workbench has already measured on C++ code (torch's own backward nodes) and from
runs where the Python floor cancels, each figure with its basis, assumptions and what would
falsify it.

Two costs are kept apart everywhere:

* the **Python floor**: running any backward formula in Python instead of C++ (``handfixed``, core's
  modern out-of-place formula written in Python, against ``builtin``, torch's C++ formula). Core
  would not pay it, so no estimate below includes it;
* **functionalization's own cost**: what the mechanism adds over the same formula written out of
  place. It is measured two ways: on torch's own C++ nodes (the OpInfo sweep's cost entries:
  ``whole`` functionalizing every backward at run time, :mod:`funcbwd_lab.studies.coverage.cost`;
  ``traced_backward``'s graphs, :mod:`funcbwd_lab.studies.coverage.fallback_speedup`), and in runs whose
  two arms are both Python (``x handfixed`` in the bench; the live sites' fast path under a
  strategy vs the hand-written path, :mod:`funcbwd_lab.studies.deletable.deletable`), where the floor cancels.

:func:`load_inputs` reads the saved files (a missing one is None, and every figure that needs it
says "not measured"); :func:`estimates` is a deterministic function of them (no timing runs);
:func:`text` (lines <= 100 columns) and :func:`markdown` render the result. What is not measured
in C++ anywhere (a C++ hook's check, a C++ dispatcher call per formula) is said so, not guessed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.coverage import cost as coverage_cost
from funcbwd_lab.studies.deletable import deletable
from funcbwd_lab.studies.review import review
from funcbwd_lab.tables import WIDTH, paragraph

#: the saved files read, in a data directory (the checkout's ``data/``)
FILES = {"bench": "bench-quick.json", "coverage_cost": coverage_cost.COST_FILE,
         "fallback": "fallback-speedup.json", "live": "live-deletable.json"}
CANDIDATES = ("traced", "per_formula", "whole", "hooks", "composite")
MIN_BATCH = 64


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One figure: ``value`` (None: not measured) in ``unit``, a range ``low``..``high`` of kind
    ``range_kind`` (e.g. "q1 to p90") when there is one, and its ``basis``, ``assumptions`` and
    ``falsified_by``."""

    candidate: str
    figure: str
    value: float | None
    unit: str
    basis: str
    assumptions: tuple[str, ...]
    falsified_by: str
    low: float | None = None
    high: float | None = None
    range_kind: str = ""

    def value_text(self) -> str:
        if self.value is None:
            return "not measured"
        fmt = {"x": "{:.2f}x", "us": "{:.1f} µs", "us/node": "{:.2f} µs/node", "s": "{:.2f} s",
               "ops": "{:.0f}"}[self.unit]
        rng = (f" ({self.range_kind} {fmt.format(self.low)} to {fmt.format(self.high)})"
               if self.low is not None and self.high is not None else "")
        return fmt.format(self.value) + rng


# ------------------------------------------------------------------------------ inputs
def load_inputs(data_dir: str | Path) -> dict[str, Any]:
    """The saved inputs (:data:`FILES`) of ``data_dir``; a missing file is None."""
    d = Path(data_dir)
    out: dict[str, Any] = {"sources": dict(FILES)}
    for key, name in FILES.items():
        p = d / name
        if not p.exists():
            out[key] = None
        elif key == "bench":
            out[key] = bench_results.load(str(p))
        elif key == "coverage_cost":
            out[key] = json.loads(p.read_text()).get("cost") or None
        else:
            out[key] = json.loads(p.read_text())
    return out


def _bench_rows(bench: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in bench_results.ratios(dict(bench)):
        if r["batch"] >= MIN_BATCH:
            rows.setdefault(r["label"], []).append(r)
    return rows


def _med(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else None


def _q1(xs: Sequence[float]) -> float | None:
    return statistics.quantiles(xs, n=4, method="inclusive")[0] if len(xs) > 1 else None


def _extra_us(rows: Sequence[dict[str, Any]], vs: str) -> float | None:
    return _med([(r["median_s"] - r[f"{vs}_median_s"]) * 1e6 for r in rows])


# ------------------------------------------------------------------------------ the figures
def python_floor(bench: Mapping[str, Any] | None) -> Estimate:
    """handfixed / builtin, batched: what any Python formula costs over C++ (not a candidate)."""
    basis = "bench: handfixed / builtin, median over ops, batch >= 64"
    if bench is None:
        return Estimate("python floor", "batched, Python formula / C++ formula", None, "x", basis, (), "")
    c = bench_results.cost_summary(dict(bench))["handfixed"]
    by = [v for v in c["batched_vs_builtin_by_size"].values() if not math.isnan(v)]
    extra = _extra_us(_bench_rows(bench).get("handfixed", []), "builtin")
    checks = bench_results.reference_check(dict(bench))
    beaten = [r for r in checks if [b for b in r["beaten_by"] if b != "builtin"]]
    return Estimate(
        "python floor", "batched, Python formula / C++ formula", c["batched_vs_builtin"], "x",
        f"{basis}; {extra:.0f} µs more per batched backward (median over op x size x batch)",
        ("handfixed is core's modern out-of-place formula run in Python through the same "
         "machinery as every candidate, so handfixed / builtin is what running a formula in "
         "Python costs, and candidate / handfixed is what the mechanism adds",),
        f"a functional formula faster than handfixed beyond the noise (handfixed not the floor): "
        f"found at {len(beaten)} of {len(checks)} op x size (bench_results.reference_check)",
        min(by, default=None), max(by, default=None), "per input size")


def runtime_functionalization(candidate: str, costs: Sequence[dict] | None,
                              bench: Mapping[str, Any] | None, how: str) -> Estimate:
    """Functionalizing at run time, measured on torch's own C++ nodes (the sweep's cost entries)."""
    figure = "batched, vs torch's C++ backward"
    if not costs:
        return Estimate(candidate, figure, None, "x", "no cost entries in the saved sweep", (), "")
    s = coverage_cost.summarize_cost(costs)
    cross = f"; Python cross-check: {_python_split(bench, candidate)}" if bench else ""
    return Estimate(
        candidate, figure, s["median"], "x",
        f"whole on torch's own C++ nodes / builtin, vmap over {coverage_cost.N_COTANGENTS} "
        f"cotangents, median over {s['measured']} OpInfo ops; median "
        f"{s['median_extra_us']:.0f} µs more per batched backward{cross}",
        (how, "the entry (torch.func.functionalize: wrapping inputs, syncing outputs) ran in "
         "Python once per backward, so the figure includes a Python entry a C++ entry would "
         "replace; the per-op functionalization is C++ already (the Functionalize key)"),
        "a C++ run-time functionalization of the same backwards at a median above the p90 here, or "
        "at no extra cost (the entry and the per-op wrappers are then not the cost)",
        _q1([c["ratio"] for c in costs if not c.get("error") and not math.isnan(c.get("ratio", math.nan))]),
        s["p90"], "q1 to p90")


def _python_split(bench: Mapping[str, Any], candidate: str) -> str:
    """The candidate's bench medians, the Python floor apart: x builtin, x handfixed."""
    c = bench_results.cost_summary(dict(bench))
    mine, hf = c.get(candidate), c.get("handfixed")
    if not mine or not hf:
        return f"{candidate} not in the bench"
    return (f"in Python {candidate} takes {mine['batched_vs_builtin']:.2f}x builtin's time: the "
            f"Python floor (handfixed {hf['batched_vs_builtin']:.2f}x builtin) and the mechanism "
            f"({mine['batched_vs_handfixed']:.2f}x handfixed; medians over ops, not a product)")


def _traced(bench: Mapping[str, Any] | None, live: Mapping[str, Any] | None) -> Estimate:
    figure = "batched, vs the C++ out-of-place formula"
    if bench is None:
        return Estimate("traced", figure, None, "x", "no saved bench result", (), "")
    rows = _bench_rows(bench).get("traced", [])
    c = bench_results.cost_summary(dict(bench))["traced"]
    worst = max((r["ratio_vs_handfixed"] for r in rows if not math.isnan(r["ratio_vs_handfixed"])),
                default=None)
    copies = next((t for t in bench_results.targets(dict(bench))
                   if t["name"] == "traced_copy_bytes_vs_handfixed"), None)
    sites = ""
    if live is not None:
        k = deletable.counts(dict(live), "traced")
        every = [r["strategies"]["traced"]["cost_ratio"] for r in live["rows"]
                 if r["counted"] and r["kind"] != "control" and r["strategies"]["traced"]["cost_ratio"]]
        if k["median_cost"] is not None:
            sites = (f"; the live sites (fast path under traced / the hand-written path, both "
                     f"Python): median {k['median_cost']:.2f}x, worst {k['worst_cost']:.2f}x over "
                     f"the {k['deletable']} deletable, worst {max(every):.2f}x over all "
                     f"{len(every)} timed in-place sites")
    copy_text = ("" if copies is None or copies["status"] == "not measured" else
                 f" (extra copy bytes traced vs handfixed under vmap: {copies['value']:.0f} B, "
                 f"target {copies['status']})")
    return Estimate(
        "traced", figure, c["batched_vs_handfixed"], "x",
        f"bench: traced / handfixed, median over ops, batch >= {MIN_BATCH} (the worst: over op x "
        f"size x batch); it adds a median {_extra_us(rows, 'handfixed'):.1f} µs per batched "
        f"backward; {_python_split(bench, 'traced')}{sites}",
        ("both arms run the formula in Python, so the Python floor cancels",
         "the replayed graph runs the out-of-place formula's kernels" + copy_text + "; a C++ "
         "replay runs the same ATen ops without Python",
         "the rest is per-call bookkeeping (signature key, cache lookup), measured here in Python: "
         "at most that in C++"),
        "a C++ replay of the cached graph slower than the C++ out-of-place formula by more than the "
        "worst here, or a graph that copies more bytes than the hand-written formula",
        c["batched_vs_handfixed"], worst, "median to worst")


def _traced_nodes(fallback: Mapping[str, Any] | None) -> Estimate:
    figure = "batched, traced graphs of torch's own backward (or of the forward) vs builtin"
    if fallback is None:
        return Estimate("traced", figure, None, "x", "no saved fallback-speedup result", (), "")
    s = fallback["summary"]
    inv = lambda x: 1 / x if x else None  # noqa: E731 - speedup (builtin / traced) -> time ratio
    return Estimate(
        "traced", figure, inv(s["median_speedup"]), "x",
        f"traced_backward / builtin on the {s['measured']} OpInfo ops where builtin takes vmap's "
        f"slow fallback (data/{FILES['fallback']}{_at_batch(s)}); slower on "
        f"{s['slower']}, worst {inv(s['worst']['speedup']):.2f}x ({s['worst']['op']}); the "
        f"{s['target']:g}x speedup target: {_verdict(s)} ({s['at_least_target']} ops at it)",
        ("the graphs (make_fx of the functionalized backward, copies elided; where the forward "
         "falls back instead, of the forward, its fallback ops decomposed) run from Python "
         "calling ATen: a C++ replay pays no Python per op, so the figure bounds it from above",
         "only ops where builtin falls back: builtin's time includes its per-sample loop"),
        "a C++ replay of the same graphs slower than builtin at the median",
        inv(s["q3"]), inv(s["q1"]), "quartiles")


def _at_batch(s: Mapping[str, Any]) -> str:
    return f", batch {s['batch']}" if s.get("batch") else ""


def _verdict(s: Mapping[str, Any]) -> str:
    """The speedup target's verdict: from the study's intervals where it saved them (met, missed,
    not resolved), else from the median alone."""
    t = s.get("targets", {}).get("speedup_b8_plus")
    if t:
        return f"{t['verdict']}, median over the ops at every batch >= 8, from 95% intervals"
    return "met" if s["met"] else "missed"


def _trace_time(fallback: Mapping[str, Any] | None) -> Estimate:
    figure = "first call per signature (trace, elide, check)"
    ts = [o["trace_s"] for o in (fallback or {}).get("ops", []) if o.get("trace_s") is not None]
    if not ts:
        return Estimate("traced", figure, None, "s", "no traced graph timed", (), "")
    return Estimate(
        "traced", figure, statistics.median(ts), "s",
        f"traced_backward's trace seconds over the {len(ts)} OpInfo ops where it traced a graph",
        ("paid once per signature and cached (bounded LRU); graphs generated at build time "
         "would pay it never at run time", "tracing here is Python (make_fx over functionalize)"),
        "a run-time trace that must be repeated per call (signatures that never repeat)",
        min(ts), max(ts), "min to max")


def _vmap_off(candidate: str, bench: Mapping[str, Any] | None, cpp: str) -> Estimate:
    figure = "vmap off, per backward node"
    if bench is None:
        return Estimate(candidate, figure, None, "us/node", "no saved bench result", (), "")
    ev = review.cost_evidence(bench)[0].get(candidate, {})
    off, noise = ev.get("vmap_off_us"), ev.get("vmap_off_noise_us")
    if off is None:
        return Estimate(candidate, figure, None, "us/node", f"{candidate} not in the bench", (), "")
    within = noise is not None and abs(off) <= noise
    return Estimate(
        candidate, figure, off, "us/node",
        f"bench: a plain backward with {candidate} installed vs none, median over ops "
        + (f"(within the run's spread of {noise:.1f} µs/node: not resolved)" if within
           else f"(run spread {noise:.1f} µs/node)"),
        (cpp,), "a C++ check that costs more than the spread here",
        -noise if noise is not None else None, noise, "the run's spread")


def _hooks_off(bench: Mapping[str, Any] | None) -> Estimate:
    figure = "vmap off, per node, Python hook over a no-op Python hook"
    claim = bench_results.hooks_claim_result(dict(bench)) if bench else {"status": "missing"}
    graphs = [g for g in claim.get("graphs", []) if not g.get("error")]
    if not graphs:
        return Estimate("hooks", figure, None, "us/node", "no hooks claim in the bench", (), "")
    g = graphs[0]
    d = g["us_per_node"]
    rest = "; ".join(f"{h['graph']}: {h['verdict']}" for h in graphs[1:])
    return Estimate(
        "hooks", figure, d["median"], "us/node",
        f"bench, paired samples on {g['graph']} ({g['nodes']} nodes, {d['pairs']} pairs)"
        f"{'; ' + rest if rest else ''}",
        ("the hooks' check (is vmap active?) runs in a Python hook on C++ nodes here; a C++ hook "
         "checks a thread-local: not measured in C++, at most this figure",),
        "a C++ hook costing more than the interval's low end per node",
        d["ci_low"], d["ci_high"], "95% interval")


def _composite_ops(evidence: Mapping[str, Any] | None) -> Estimate:
    figure = "new operators (FC/BC surface)"
    n = ((evidence or {}).get("strategies", {}).get("composite") or {}).get("new_ops")
    return Estimate(
        "composite", figure, n, "ops",
        "review evidence: operators the dispatcher learns while composite runs the corpus "
        "(review_probes.operator_growth)",
        ("one private operator per formula, so in core about one per in-place formula",),
        "a composite design that registers no operator per formula")


def estimates(inputs: Mapping[str, Any], evidence: Mapping[str, Any] | None = None) -> list[Estimate]:
    """Every figure, the Python floor first, then per candidate (:data:`CANDIDATES` order)."""
    bench, costs = inputs.get("bench"), inputs.get("coverage_cost")
    one_node = ("an OpInfo sample's vjp is mostly one backward node, so functionalizing the whole "
                "backward there is functionalizing one formula")
    return [
        python_floor(bench),
        _traced(bench, inputs.get("live")), _traced_nodes(inputs.get("fallback")),
        _trace_time(inputs.get("fallback")),
        _vmap_off("traced", bench, "with vmap off the formula runs as written after a check of the "
                  "transform stack's depth: a thread-local read in C++"),
        runtime_functionalization("per_formula", costs, bench, "per_formula functionalizes each "
                                  "formula at call time under vmap; " + one_node),
        _vmap_off("per_formula", bench, "the same check as traced's"),
        runtime_functionalization("whole", costs, bench, "this is whole itself, on C++ nodes"),
        runtime_functionalization("hooks", costs, bench, "hooks functionalize each node at run "
                                  "time, the same work as whole on a one-node backward; " + one_node),
        _hooks_off(bench),
        runtime_functionalization("composite", costs, bench, "composite's batching kernel runs "
                                  "the formula functionalized at call time, plus one dispatcher "
                                  "call per formula, which is not measured in C++ here"),
        _composite_ops(evidence),
    ]


# ------------------------------------------------------------------------------ rendering
def _sources(inputs: Mapping[str, Any]) -> str:
    have = [f"data/{n}" for k, n in FILES.items() if inputs.get(k) is not None]
    missing = [f"data/{n}" for k, n in FILES.items() if inputs.get(k) is None]
    return ("From " + ", ".join(have) + "." + (f" Not found (not measured): {', '.join(missing)}."
                                                if missing else ""))


def text(ests: Sequence[Estimate], inputs: Mapping[str, Any], width: int = WIDTH) -> str:
    """Per candidate, each figure with its basis, assumptions and falsifier (lines <= ``width``)."""
    out = [paragraph("What would it cost in C++? Estimates from what is measured on torch's own C++ "
                     "nodes and from runs where the Python floor cancels. " + _sources(inputs), width)]
    last = None
    for e in ests:
        if e.candidate != last:
            out += ["", e.candidate.upper() if e.candidate == "python floor" else e.candidate]
            last = e.candidate
        out.append(paragraph(f"{e.figure}: {e.value_text()}", width, "  ", "      "))
        out.append(paragraph(f"basis: {e.basis}", width, "    ", "      "))
        for a in e.assumptions:
            out.append(paragraph(f"assumes: {a}", width, "    ", "      "))
        if e.falsified_by:
            out.append(paragraph(f"falsified by: {e.falsified_by}", width, "    ", "      "))
    return "\n".join(out) + "\n"


def markdown(ests: Sequence[Estimate], inputs: Mapping[str, Any], heading: str = "###",
             width: int = WIDTH) -> str:
    """The same as Markdown: one heading per candidate, one bullet per figure (lines wrapped to
    ``width``; a bullet's continuation lines are indented, so they stay in the bullet)."""
    out = [paragraph(_sources(inputs), width)]
    last = None
    for e in ests:
        if e.candidate != last:
            out += ["", f"{heading} {'The Python floor (not a candidate)' if e.candidate == 'python floor' else '`' + e.candidate + '`'}", ""]
            last = e.candidate
        out.append(paragraph(f"- **{e.figure}: {e.value_text()}**. Basis: {e.basis}."
                             + "".join(f" Assumes: {a}." for a in e.assumptions)
                             + (f" Falsified by: {e.falsified_by}." if e.falsified_by else ""),
                             width, "", "  "))
    return "\n".join(out) + "\n"
