"""A bench result read back: save/load, and every ratio, target and summary computed from it.

Everything here is recomputed from the raw samples in the result (stored medians are never
trusted), so a saved run and a fresh one give the same tables. What was not measured stays
missing (NaN in Python, ``null`` in the JSON), never extrapolated.

* :func:`ratios`: per op x size x batch x label, time vs ``handfixed`` (what functionalizing
  costs), vs ``builtin`` (what it costs over torch's C++ formula), vs the cheaper of the two
  (:data:`FLOOR`), and speedups vs the loops;
* :func:`reference_check`: where ``handfixed`` is not the floor it is taken for (a functional
  formula or torch's own runs in less time beyond the run's noise);
* :func:`overhead_rows`, :func:`memory_rows`, :func:`copy_rows`: the other sections as rows;
* :func:`headline`, :func:`targets`, :func:`hooks_claim_result`: the answers, as data;
* :func:`cost_summary`: per strategy, the numbers a ranking needs.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Sequence

from funcbwd.errors import BadInputError
from funcbwd_lab.studies.bench.config import NO_STRATEGY, NOOP_HOOK, SCHEMA, TARGET_OPS, variant
from funcbwd_lab.studies.bench.timing import div, median, paired_difference, rel_iqr

#: older results stay readable (what they lack is reported as not measured)
READABLE_SCHEMAS = (SCHEMA, "funcbwd-bench/1")
REFERENCE, BUILTIN = "handfixed", "builtin"
#: the cheaper of the two references at the same op x size x batch (``ratio_vs_floor``). At large
#: inputs ``handfixed`` can do more work than a functional formula needs (under vmap
#: ``grad.new_zeros`` is batched zeros that ``diagonal_scatter`` / ``index_add`` then copy whole),
#: so ``x handfixed`` there flatters what it divides; :func:`reference_check` says where.
FLOOR = "min(handfixed, builtin)"


# ------------------------------------------------------------------------------ files
def strict_json(x: Any) -> Any:
    """NaN/inf (what was not measured) as null: browsers' JSON.parse rejects NaN."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict_json(v) for v in x]
    return x


def save(results: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(strict_json(results), f, allow_nan=False, separators=(",", ":"))
        f.write("\n")


def load(path: str) -> dict[str, Any]:
    """Read a result written by :func:`save`; rejects files that are not bench results."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise BadInputError(f"no bench result at {path!r}; "
                            f"run `python -m funcbwd_lab bench --quick --out {path}`") from None
    except json.JSONDecodeError as e:
        raise BadInputError(f"{path!r} is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("schema") not in READABLE_SCHEMAS:
        raise BadInputError(f"{path!r} is not a funcbwd bench result (schema {SCHEMA!r})")
    return data


# ------------------------------------------------------------------------------ rows
def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _medians(records: Iterable[dict[str, Any]], key: Callable[[dict], tuple]) -> dict[tuple, float]:
    """Medians recomputed from the raw samples (never trusted from the file)."""
    return {key(r): median(r["samples"]) for r in records if r.get("samples")}


def ratios(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per op x size x batch x label timed under vmap: its median and

    * ``ratio_vs_handfixed``: / handfixed's vmap median (the cost of functionalizing; lower is
      better, 1.0 = as fast as the modern formula run through the same machinery),
    * ``ratio_vs_builtin``: / builtin's vmap median (1.0 = as fast as torch's C++ formula),
    * ``ratio_vs_floor``: / the cheaper of handfixed's and builtin's medians (:data:`FLOOR`;
      ``floor_label`` names which; NaN unless both were timed),
    * ``speedup_vs_loop``: the same label's per-sample loop / its vmap median (higher is better),
    * ``speedup_vs_builtin_loop``: the builtin op's loop / this label's vmap median."""
    key = lambda r: (r["op"], r["size"], r["batch"], r["label"], r["mode"])  # noqa: E731
    med = _medians(results["batched"], key)
    noise = {key(r): rel_iqr(r["samples"]) for r in results["batched"]}
    rows = []
    for (op, size, batch, label, mode), m in med.items():
        if mode != "vmap":
            continue
        at = lambda lbl, md="vmap": med.get((op, size, batch, lbl, md), math.nan)  # noqa: E731
        ref, hf, loop, bloop = at(BUILTIN), at(REFERENCE), at(variant(label).loop_label, "loop"), \
            at(BUILTIN, "loop")
        floor = math.nan if math.isnan(hf) or math.isnan(ref) else min(hf, ref)
        rows.append({"op": op, "size": size, "batch": batch, "label": label,
                     "median_s": m, "loop_median_s": loop, "builtin_median_s": ref,
                     "handfixed_median_s": hf, "ratio_vs_handfixed": div(m, hf),
                     "ratio_vs_builtin": div(m, ref), "ratio_vs_floor": div(m, floor),
                     "floor_label": "" if math.isnan(floor) else REFERENCE if hf <= ref else BUILTIN,
                     "speedup_vs_loop": div(loop, m),
                     "speedup_vs_builtin_loop": div(bloop, m),
                     "rel_iqr": noise[(op, size, batch, label, mode)]})
    return rows


def failures(results: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """(op, size, label) -> why the label was not timed (its vmap_cotangents cell did not pass)."""
    return {(a["op"], a["size"], a["label"]): (a.get("reason") or a["status"])
            for a in results.get("applicability", []) if a["status"] != "pass"}


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
        rows.append({"op": op, "label": label, "nodes": n, "median_s": m, "ratio_vs_none": div(m, base),
                     "us_per_node_vs_none": (m - base) / n * 1e6,
                     "us_per_node_vs_noop_hook": (m - floor) / n * 1e6,
                     "rel_iqr": noise[(op, label)]})
    return rows


def memory_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Memory rows with ratios to builtin and to handfixed at the same op x size x batch."""
    refs = {(r["op"], r["size"], r["batch"], r["label"]): r for r in results["memory"]}
    rows = []
    for r in results["memory"]:
        out = dict(r)
        for ref in (BUILTIN, REFERENCE):
            b = refs.get((r["op"], r["size"], r["batch"], ref))
            for f in ("peak", "allocated"):
                out[f"{f}_vs_{ref}"] = div(r[f"{f}_bytes"], b[f"{f}_bytes"]) if b else math.nan
        rows.append(out)
    return rows


def copy_rows(results: dict[str, Any], vmap: bool = True) -> list[dict[str, Any]]:
    """The copy section's rows (``vmap`` mode) with ``extra_copy_bytes_vs_handfixed``: this
    label's copy bytes minus handfixed's for the same op (None where either failed to capture)."""
    copies = results.get("copies") or {}
    if copies.get("status") != "ok":
        return []
    rows = [r for r in copies["rows"] if r.get("vmap") == vmap]
    hf = {r["op"]: r for r in rows if r["label"] == REFERENCE}
    out = []
    for r in rows:
        h = hf.get(r["op"])
        both = h is not None and r.get("copy_bytes") is not None and h.get("copy_bytes") is not None
        out.append({**r, "extra_copy_bytes_vs_handfixed": r["copy_bytes"] - h["copy_bytes"] if both else None,
                    "extra_copies_vs_handfixed": r["copies"] - h["copies"] if both else None})
    return out


# ------------------------------------------------------------------------------ answers
def _finite_max(xs: Iterable[float]) -> float:
    """Max over the measured values (NaN marks what was not measured); NaN if none were."""
    vals = [x for x in xs if not math.isnan(x)]
    return max(vals) if vals else math.nan


def _or_inf(x: float) -> float:
    """For ranking: what was not measured ranks after every measured value."""
    return math.inf if math.isnan(x) else x


def headline(results: dict[str, Any], ops: Sequence[str] = TARGET_OPS, min_batch: int = 64,
             size: str = "small") -> dict[str, Any]:
    """Per op, the best strategy at batch >= ``min_batch`` (lowest worst-case ratio vs handfixed
    over those batches; the references are not candidates) with its worst ratios vs handfixed
    and vs builtin and its smallest speedup vs the loop; ``all`` holds every label's."""
    rows = [r for r in ratios(results) if r["size"] == size and r["batch"] >= min_batch
            and r["label"] not in (BUILTIN, REFERENCE) and r["op"] in ops]
    per_op: dict[str, Any] = {}
    for op in ops:
        by_label: dict[str, list[dict]] = {}
        for r in rows:
            if r["op"] == op:
                by_label.setdefault(r["label"], []).append(r)
        if not by_label:
            per_op[op] = {"best": None, "reason": "no strategy measured/passing"}
            continue
        scores = {lbl: {"worst_ratio_vs_handfixed": _finite_max(r["ratio_vs_handfixed"] for r in rs),
                        "worst_ratio_vs_builtin": _finite_max(r["ratio_vs_builtin"] for r in rs),
                        "worst_ratio_vs_floor": _finite_max(r["ratio_vs_floor"] for r in rs),
                        "min_speedup_vs_loop": -_finite_max(-r["speedup_vs_loop"] for r in rs)}
                  for lbl, rs in by_label.items()}
        best = min(scores, key=lambda lbl: (_or_inf(scores[lbl]["worst_ratio_vs_handfixed"]),
                                            _or_inf(scores[lbl]["worst_ratio_vs_builtin"]), lbl))
        per_op[op] = {"best": best, **scores[best],
                      "batches": sorted({r["batch"] for r in by_label[best]}),
                      "all": dict(sorted(scores.items()))}
    return {"criteria": f"size={size}, batch>={min_batch}; best = lowest worst-case ratio vs "
            "handfixed", "size": size, "min_batch": min_batch, "per_op": per_op,
            "elapsed_s": results.get("elapsed_s")}


#: (name, label, metric, sizes (None: all), min batch, threshold, text)
RATIO_TARGETS = (
    ("traced_vs_handfixed", "traced", "ratio_vs_handfixed", ("small",), 8, 1.1,
     "traced <= 1.1x handfixed, small inputs, batch >= 8"),
    # at large inputs handfixed is not always the floor (reference_check): the cheaper of the two
    ("traced_vs_floor_large", "traced", "ratio_vs_floor", ("large",), 8, 1.1,
     "traced <= 1.1x the cheaper of handfixed and builtin, large inputs, batch >= 8"),
    ("traced_vs_builtin_small", "traced", "ratio_vs_builtin", ("small",), 64, 1.2,
     "traced <= 1.2x builtin, small inputs, batch >= 64"),
    ("traced_vs_builtin_large", "traced", "ratio_vs_builtin", ("large",), 1, 1.0,
     "traced <= 1.0x builtin, large inputs, every batch"),
)


def _status(value: float, threshold: float, ran: bool, missing: Sequence[str]) -> str:
    if not ran or (math.isnan(value) and not missing):
        return "not measured"
    return "met" if not missing and value <= threshold else "missed"


def targets(results: dict[str, Any], ops: Sequence[str] = TARGET_OPS) -> list[dict[str, Any]]:
    """Each target as data: its worst value over ``ops`` (the number it is judged on), where that
    worst case is, per op, and ``met`` / ``missed`` / ``not measured``. An op where the label
    was run but not timed (it failed its correctness check) counts as missed and is named in
    ``missing``; an op whose reference was not timed is named in ``no_reference`` and not judged."""
    rows = ratios(results)
    measured_sizes = set(results["config"]["sizes"])
    ops = [op for op in ops if op in results["config"]["ops"]]
    ran_labels = {a["label"] for a in results.get("applicability", [])}
    out = []
    for name, label, metric, sizes, min_batch, threshold, text in RATIO_TARGETS:
        want = [s for s in (sizes or sorted(measured_sizes)) if s in measured_sizes]
        mine = [r for r in rows if r["label"] == label and r["op"] in ops and r["size"] in want
                and r["batch"] >= min_batch]
        sel = [r for r in mine if not math.isnan(r[metric])]
        per_op = {op: _finite_max(r[metric] for r in sel if r["op"] == op) for op in ops}
        ran = (label in ran_labels and bool(want)
               and any(b >= min_batch for b in results["config"]["batch_sizes"]))
        missing = [op for op in ops if ran and not any(r["op"] == op for r in mine)]
        no_ref = [op for op in ops if math.isnan(per_op[op]) and op not in missing]
        worst = max(sel, key=lambda r: r[metric], default=None)
        value = worst[metric] if worst else math.nan
        out.append({"name": name, "text": text, "threshold": threshold, "value": value,
                    "status": _status(value, threshold, ran, missing), "per_op": per_op,
                    "missing": missing, "no_reference": no_ref,
                    "where": ({k: worst[k] for k in ("op", "size", "batch", "rel_iqr")}
                              if worst else None)})
    crows = [r for r in copy_rows(results) if r["label"] == "traced" and r["op"] in ops]
    per_op = {r["op"]: _num(r["extra_copy_bytes_vs_handfixed"]) for r in crows}
    missing = [r["op"] for r in crows if r.get("copy_bytes") is None]  # traced's graph not captured
    no_ref = [op for op, v in per_op.items() if math.isnan(v) and op not in missing]
    value = _finite_max(per_op.values())
    out.append({"name": "traced_copy_bytes_vs_handfixed", "text": "extra copy bytes, traced vs "
                "handfixed, under vmap = 0", "threshold": 0, "value": value,
                "status": _status(value, 0, bool(per_op), missing), "per_op": per_op,
                "missing": missing, "no_reference": no_ref, "where": None})
    return out


def reference_check(results: dict[str, Any], min_batch: int = 64,
                    challengers: Sequence[str] = ("traced", BUILTIN)) -> list[dict[str, Any]]:
    """Per op x size: is ``handfixed`` the floor that ``x handfixed`` takes it for? Each of
    ``challengers`` (a functionalized formula; torch's C++ formula) is compared with handfixed at
    every batch >= ``min_batch``; it *beats* handfixed when it is faster beyond the run's noise
    at every such batch (ratio < 1 - the two series' IQR/median added). Rows: ``op``, ``size``,
    ``batches``, ``<label>_vs_handfixed`` (median over those batches), ``beaten_by`` and
    ``handfixed_is_floor`` (beaten by nobody), and ``text``. Beaten by builtin alone is what
    running any formula in Python costs (small inputs); beaten by a functionalized formula means
    handfixed does work a functional formula does not, so ``x handfixed`` there is not the cost of
    functionalizing: compare with :data:`FLOOR` instead."""
    rows = [r for r in ratios(results) if r["batch"] >= min_batch]
    noise = {(r["op"], r["size"], r["batch"], r["label"]): r["rel_iqr"] for r in rows}
    out = []
    for op in results["config"]["ops"]:
        for size in results["config"]["sizes"]:
            mine = [r for r in rows if r["op"] == op and r["size"] == size]
            batches = sorted({r["batch"] for r in mine if r["label"] == REFERENCE})
            if not batches:
                continue
            row: dict[str, Any] = {"op": op, "size": size, "batches": batches, "beaten_by": []}
            for label in challengers:
                pts = {r["batch"]: r for r in mine if r["label"] == label
                       and not math.isnan(r["ratio_vs_handfixed"])}
                ratios_ = [pts[b]["ratio_vs_handfixed"] for b in batches if b in pts]
                row[f"{label}_vs_handfixed"] = median(ratios_) if ratios_ else math.nan
                beats = bool(ratios_) and all(
                    b in pts and pts[b]["ratio_vs_handfixed"]
                    < 1 - (noise[(op, size, b, label)] + noise.get((op, size, b, REFERENCE), 0.0))
                    for b in batches)
                if beats:
                    row["beaten_by"].append(label)
            row["handfixed_is_floor"] = not row["beaten_by"]
            row["text"] = _reference_text(row, challengers, min_batch)
            out.append(row)
    return out


def _reference_text(row: dict[str, Any], challengers: Sequence[str], min_batch: int) -> str:
    vs = ", ".join(f"{lbl} {row[f'{lbl}_vs_handfixed']:.2f}x" for lbl in challengers
                   if not math.isnan(row[f"{lbl}_vs_handfixed"]))
    head = f"{row['op']}, {row['size']}: {vs or 'nothing to compare'} handfixed (batch >= {min_batch})"
    functional = [lbl for lbl in row["beaten_by"] if lbl != BUILTIN]
    if functional:
        return (f"{head}: handfixed is NOT the floor ({' and '.join(row['beaten_by'])} faster beyond "
                f"the noise at every batch): it does work a functional formula does not; compare "
                f"with {FLOOR}")
    if row["beaten_by"]:
        return f"{head}: builtin is faster beyond the noise; no functional formula is faster"
    return f"{head}: none faster beyond the noise"


def hooks_claim_result(results: dict[str, Any]) -> dict[str, Any]:
    """The hooks strategy's vmap-off cost per node over no-op hooks, per graph, from the paired
    raw samples: the median per-pair difference in microseconds per node and its 95% interval;
    ``verdict`` is the number when the interval excludes zero, else "not resolved at this noise"."""
    claim = results.get("hooks_claim") or {}
    if claim.get("status") != "ok":
        return {"status": claim.get("status", "missing"),
                "reason": claim.get("reason", "no hooks claim in this result")}
    graphs = []
    for g in claim["graphs"]:
        if g.get("error"):
            graphs.append({"graph": g["graph"], "error": g["error"]})
            continue
        d = paired_difference(g["samples"]["hooks"], g["samples"][NOOP_HOOK], scale=1e6 / g["nodes"])
        verdict = (f"{d['median']:.2f} us/node" if d["resolved"] else "not resolved at this noise")
        graphs.append({"graph": g["graph"], "nodes": g["nodes"], "us_per_node": d, "verdict": verdict})
    return {"status": "ok", "graphs": graphs}


# ------------------------------------------------------------------------------ ranking input
def _median_over_ops(rows: Sequence[dict], field: str) -> tuple[float, list[str]]:
    """Median over ops of each op's median of ``field`` (NaNs skipped), and the ops used."""
    per_op: dict[str, list[float]] = {}
    for r in rows:
        v = r.get(field)
        if v is not None and not math.isnan(v):
            per_op.setdefault(r["op"], []).append(v)
    return median([median(v) for v in per_op.values()]), sorted(per_op)


def cost_summary(results: dict[str, Any], min_batch: int = 64) -> dict[str, dict[str, Any]]:
    """Per label of the run, the costs a ranking weighs (lower is better for every number):

    * ``batched_vs_handfixed`` / ``batched_vs_builtin`` / ``batched_vs_floor`` (:data:`FLOOR`):
      median over ops of the op's median ratio
      at batch >= ``min_batch`` over every size (``..._by_size`` per size); ``ops_timed`` the ops
      it covers, ``ops_failing`` those where the label failed the correctness check (a failing op
      is not in the median: rank it separately);
    * ``vmap_off_ratio`` / ``vmap_off_us_per_node``: median over ops of a plain backward with the
      label installed vs none (1.0 = free);
    * ``extra_copy_bytes_vs_handfixed`` / ``..._vs_builtin``: sum over ops of the copy bytes
      beyond the reference (under vmap; ops whose graph was not captured are in ``copy_uncaptured``);
    * for ``hooks``, ``hooks_claim``: the paired per-node cost over no-op hooks (or why not)."""
    every = ratios(results)
    rows = [r for r in every if r["batch"] >= min_batch]
    fails = failures(results)
    ov = overhead_rows(results)
    cr = copy_rows(results)
    labels = list(dict.fromkeys([r["label"] for r in every] + [k[2] for k in fails]))
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        mine = [r for r in rows if r["label"] == label]
        s: dict[str, Any] = {}
        s["batched_vs_floor"] = _median_over_ops(mine, "ratio_vs_floor")[0]
        for ref in (REFERENCE, BUILTIN):
            s[f"batched_vs_{ref}"], ops_timed = _median_over_ops(mine, f"ratio_vs_{ref}")
            s[f"batched_vs_{ref}_by_size"] = {
                size: _median_over_ops([r for r in mine if r["size"] == size], f"ratio_vs_{ref}")[0]
                for size in results["config"]["sizes"]}
        s["ops_timed"] = ops_timed
        s["ops_failing"] = sorted({op for (op, _, lbl) in fails if lbl == label})
        strategy_ov = [r for r in ov if r["label"] == variant(label).strategy
                       or (label == "plain" and r["label"] == NO_STRATEGY)]
        s["vmap_off_ratio"] = _median_over_ops(strategy_ov, "ratio_vs_none")[0]
        s["vmap_off_us_per_node"] = _median_over_ops(strategy_ov, "us_per_node_vs_none")[0]
        mine_c = [r for r in cr if r["label"] == label]
        for ref, field in ((REFERENCE, "extra_copy_bytes_vs_handfixed"), (BUILTIN, "extra_copy_bytes")):
            vals = [r[field] for r in mine_c if r.get(field) is not None]
            s[f"extra_copy_bytes_vs_{ref}"] = sum(vals) if vals else None
        s["copy_uncaptured"] = sorted(r["op"] for r in mine_c if r.get("copy_bytes") is None)
        if label == "hooks":
            claim = hooks_claim_result(results)
            s["hooks_claim"] = ([{"graph": g["graph"], "verdict": g.get("verdict", g.get("error"))}
                                 for g in claim["graphs"]] if claim["status"] == "ok"
                                else claim.get("reason"))
        out[label] = s
    return out
