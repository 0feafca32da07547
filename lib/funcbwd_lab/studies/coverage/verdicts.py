"""A computed verdict for every upstream expected failure (:mod:`funcbwd_lab.studies.coverage.upstream`)
from the sweep's float32 records of the same op and composition.

The verdicts (:data:`VERDICTS`): ``reproduced`` (fails on torch 2.13 as upstream expects),
``stale`` (passes on 2.13: upstream's entry is out of date), ``fixed`` (an in-place failure
on 2.13 that a functionalizing strategy fixes with its mechanism ran and no regression on the
op), ``torch_bug`` (a wrong result: a finding of ``python -m funcbwd_lab findings``), ``harness``
(not comparable, and why: the entry does not apply on a Linux CPU machine, the op is not in
torch 2.13's op_db, the sweep could not run it), ``unresolved`` (no failure, but the budget ran
out before every in_dims choice ran, or the worker running the op died: a memory limit or a hard
crash, which says nothing of torch's op). Each comes with its evidence: the records it read.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from funcbwd_lab.run.outcomes import is_inplace
from funcbwd_lab.studies.coverage import summary, upstream
from funcbwd_lab.studies.coverage.summary import BASELINE

VERDICTS = {
    "reproduced": "fails on torch 2.13 as upstream expects",
    "stale": "passes on torch 2.13: upstream's entry is out of date",
    "fixed": "an in-place failure on torch 2.13 that functionalization fixes",
    "torch_bug": "a wrong result on torch 2.13: a torch bug (see python -m funcbwd_lab findings)",
    "harness": "not comparable here (why given)",
    "unresolved": "no failure, but not everything ran: the budget ran out before every in_dims "
                  "choice, the sweep ran only the first samples (a cap), or the worker died",
}
#: upstream's test -> the sweep's composition (has_batch_rule: vmapvjp with the slow fallback
#: counted as a failure, as upstream disables it)
COMPOSITION_OF = {"test_vmapvjp": "vmapvjp", "test_vmapvjpvjp": "vmapvjpvjp",
                  "test_vmapjvpvjp": "vmapjvpvjp", "test_vmapjvpall": "vmapjvpall",
                  "test_vjpvmap": "vjpvmap", "test_vmapvjp_has_batch_rule": "vmapvjp"}
#: ops whose wrong results under vmap are torch bugs reported by ``python -m funcbwd_lab findings``
FINDING_OPS = {"roll": "roll_0d_samples", "cdist": "cdist_batched_cotangents",
               "masked_select": "masked_select_broadcast", "index_fill": "index_fill_batched_value"}
FUNCTIONALIZING = ("whole", "hooks", "traced_backward")


def op_id(entry: upstream.Entry) -> str:
    return entry.op + (f".{entry.variant}" if entry.variant else "")


def _crashed(r: dict[str, Any]) -> bool:
    """The worker died running the op (a memory limit or a hard crash): says nothing of torch."""
    return r["status"] == "fail" and r["reason"] == "crash"


def _failing(r: dict[str, Any], batch_rule: bool) -> bool:
    return (r["status"] in ("fail", "mismatch") and not _crashed(r)) or (
        batch_rule and r["status"] == "pass" and bool(r["fallback_ops"]))


def _evidence(rs: Sequence[dict]) -> str:
    def one(r: dict) -> str:
        why = r["reason"] or (r["message"][:70] if r["status"] != "pass" else "")
        return f"sample {r['sample']} {r['status']}" + (f" ({why})" if why else "")
    shown = [one(r) for r in rs[:3]]
    return "; ".join(shown) + (f"; +{len(rs) - 3} more" if len(rs) > 3 else "")


def _unrun_samples(ran: Sequence[dict], cap: int | None) -> str:
    """Why ``ran`` (builtin's records of one op and composition) are not every sample of the op,
    or "" when they are: a record's ``sample_cap`` (else ``cap``, the plan's, for records saved
    before records carried it) below its ``samples_total`` (unknown counts as more)."""
    caps = {r.get("sample_cap", cap) for r in ran}
    caps.discard(None)
    if not caps:
        return ""
    n = max(caps)
    totals = {r.get("samples_total") for r in ran}
    total = max(t for t in totals if t is not None) if totals - {None} else None
    if total is not None and total <= n:
        return ""
    return (f"the sweep ran the first {n} of {total if total is not None else 'an unknown number of'} "
            "samples (a cap): upstream's test loops over every sample")


def verdict(entry: upstream.Entry, cells: dict, cap: int | None = None) -> dict[str, Any]:
    """The verdict of one entry from the sweep's cells (:func:`summary.by_cell`); ``cap``: the
    plan's float32 sample cap of the entry's composition, for records that do not carry it."""
    comp, oid = COMPOSITION_OF[entry.test], op_id(entry)
    batch_rule = entry.test == "test_vmapvjp_has_batch_rule"
    out = {"test": entry.test, "op": entry.op, "variant": entry.variant, "kind": entry.kind,
           "reason": entry.reason, "source": f"{upstream.SOURCE['path']}@{upstream.SOURCE['commit'][:10]} "
                                            f"line {entry.line}", "composition": comp}
    if entry.on_linux_cpu() == "none":
        return {**out, "verdict": "harness", "evidence": "the entry does not apply on a Linux CPU "
                f"machine (device {entry.device_type}, decorator {entry.decorator})"}
    if (entry.op, entry.variant) in upstream.NOT_IN_TORCH_2_13:
        return {**out, "verdict": "harness", "evidence": upstream.NOT_IN_TORCH_2_13[(entry.op, entry.variant)]}
    mine = {k: v for k, v in cells.items() if k[0] == oid and k[2] == "float32" and k[3] == comp}
    base = [per[BASELINE] for per in mine.values() if BASELINE in per]
    if not base:
        why = ("not an op_db OpInfo (autograd_function_db)" if entry.op in upstream.AUTOGRAD_FUNCTION_OPS
               else "the sweep has no record of it")
        return {**out, "verdict": "harness", "evidence": why}
    ran = [r for r in base if r["status"] != "not_applicable"]
    if not ran:
        msg = base[0]["message"]
        if "fails without vmap too" in msg:
            return {**out, "verdict": "reproduced", "evidence": f"fails without vmap too: {msg[:160]}"}
        return {**out, "verdict": "harness", "evidence": f"not applicable in the sweep: {msg[:160]}"}
    bad = [r for r in ran if _failing(r, batch_rule)]
    if not bad:
        timeouts = [r for r in ran if r["status"] == "timeout" or _crashed(r)]
        if timeouts:
            return {**out, "verdict": "unresolved", "evidence": _evidence(timeouts)}
        passes = (f"builtin passes {len(ran)} of {len(ran)} samples run"
                  f"{' without the slow fallback' if batch_rule else ''}")
        unrun = _unrun_samples(ran, cap)
        if unrun:
            return {**out, "verdict": "unresolved", "evidence": f"{passes}; {unrun}"}
        return {**out, "verdict": "stale", "evidence": passes}
    if any(r["status"] == "mismatch" for r in bad) and entry.op in FINDING_OPS:
        return {**out, "verdict": "torch_bug", "evidence": f"finding {FINDING_OPS[entry.op]}: "
                + _evidence(bad)}
    fixed_by, not_fixed = [], []
    for st in FUNCTIONALIZING:
        theirs = [mine[summary.cell_of(r)].get(st) for r in bad]
        good = all(t is not None and t["status"] == "pass" and t["mechanism_ran"]
                   and not (batch_rule and t["fallback_ops"]) for t in theirs)
        regress = [c for c, per in mine.items()
                   if summary.compare_cell(per.get(BASELINE), per.get(st)) == "regression"]
        (fixed_by if good and not regress else not_fixed).append(st)
    inplace = any(is_inplace(r["reason"], r["message"]) for r in bad)
    if fixed_by and (inplace or batch_rule):
        return {**out, "verdict": "fixed", "fixed_by": fixed_by,
                "evidence": f"builtin: {_evidence(bad)}; passes under {', '.join(fixed_by)} "
                            "(mechanism ran, no regression on the op)"}
    return {**out, "verdict": "reproduced", "fixed_by": fixed_by,
            "evidence": f"builtin: {_evidence(bad)}"
                        + ("; in-place, not fixed by " + ", ".join(not_fixed) if inplace else "")}


def upstream_verdicts(records: Iterable[dict[str, Any]],
                      entries: Sequence[upstream.Entry] = upstream.ENTRIES,
                      meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One verdict per upstream entry (the data file's ``upstream_xfails``); ``meta``: the sweep's
    (its float32 sample caps count for records saved without ``sample_cap``)."""
    cells = summary.by_cell(records)
    caps = ((meta or {}).get("samples") or {}).get("float32") or {}
    return [verdict(e, cells, caps.get(COMPOSITION_OF[e.test])) for e in entries]


def of_document(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdicts of a saved sweep, recomputed from its records and meta (so a rule of the
    verdicts, e.g. that "stale" needs every sample, holds for data saved before it), or the saved
    ones for a document without records."""
    if not doc.get("records"):
        return doc.get("upstream_xfails") or []
    return upstream_verdicts(doc["records"], meta=doc.get("meta"))


def counts(verdicts: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """test -> verdict -> how many entries."""
    out: dict[str, dict[str, int]] = {}
    for v in verdicts:
        d = out.setdefault(v["test"], {k: 0 for k in VERDICTS})
        d[v["verdict"]] += 1
    return out
