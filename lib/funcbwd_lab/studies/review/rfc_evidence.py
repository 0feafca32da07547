"""The RFC's evidence sections: the upstream entries the change retires (and those the small PRs
retire without it), and the hand-written branches it deletes, with what the other two choices for
a branch (keep it, rewrite it out of place) cost.

Corrected by issue 39: a ``_has_batch_rule`` entry the OpInfo sweep calls "fixed" is cross-checked
with the fallback-speedup study, which reads vmap's fallback warnings from torch's C++ stderr (the
sweep's ``traced_backward`` records predate that and see Python-side warnings only): an entry whose
graph keeps a falling-back op is withdrawn (index_fill: ``aten::_unique``). ``skip()`` entries are
not expected failures and are listed apart from the xfail entries, with upstream's reasons; every
verdict is CPU-only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from funcbwd_lab.studies.deletable import deletable
from funcbwd_lab.tables import WIDTH, paragraph

COVERAGE_FILE = "coverage.json.gz"
LIVE_FILE = "live-deletable.json"
NOT_MEASURED = "not yet measured"
#: the OpInfo sweep's strategy that runs the pick's mechanism on torch's own backward nodes
SWEEP_STRATEGY = {"traced": "traced_backward", "whole": "whole", "hooks": "hooks"}
UPSTREAM_TESTS = "test/functorch/test_ops.py"


def _p(text: str) -> list[str]:
    return [paragraph(text, WIDTH), ""]


def _b(text: str) -> str:
    return paragraph(f"- {text}", WIDTH, "", "  ")


def _op(v: Mapping[str, Any]) -> str:
    return v["op"] + (f".{v['variant']}" if v.get("variant") else "")


# ------------------------------------------------------------------------------ retired entries
def falls_back(fallback: Mapping[str, Any] | None, op: str) -> list[str]:
    """The ops the fallback-speedup study saw ``traced_backward``'s graph fall back on for ``op``
    (read from torch's C++ stderr); [] when none or not measured."""
    for row in (fallback or {}).get("ops", []):
        if row.get("op") == op:
            return list(row.get("traced_fallback_ops") or [])
    return []


def retired(coverage: Mapping[str, Any] | None, pick: str,
            fallback: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The upstream expected failures the pick retires (verdict "fixed" by the sweep's strategy
    for the pick, and no fallback left per the fallback-speedup study), those withdrawn by that
    check, the stale ones (pass already), and the counts per verdict; ``measured`` False without
    sweep data or when the pick has no sweep strategy."""
    strategy = SWEEP_STRATEGY.get(pick)
    if coverage is None or strategy is None:
        return {"measured": False, "strategy": strategy}
    from funcbwd_lab.studies.coverage import verdicts

    vs = verdicts.of_document(coverage)  # "stale" needs every sample (the caps in meta)
    fixed = [v for v in vs if v["verdict"] == "fixed" and strategy in v.get("fixed_by", [])]
    withdrawn = [{**v, "falls_back": falls_back(fallback, _op(v))} for v in fixed
                 if v["test"].endswith("_has_batch_rule") and falls_back(fallback, _op(v))]
    gone = {(v["test"], _op(v)) for v in withdrawn}
    counts = dict(Counter(v["verdict"] for v in vs))
    return {"measured": True, "strategy": strategy, "entries": len(vs), "counts": counts,
            "fixed": [v for v in fixed if (v["test"], _op(v)) not in gone],
            "withdrawn": withdrawn, "stale": [v for v in vs if v["verdict"] == "stale"],
            "torch": coverage.get("meta", {}).get("torch", "?")}


def entry_of(test: str, op: str) -> Any:
    """Upstream's entry deciding ``op`` (an OpInfo id, ``name.variant``) in ``test``."""
    from funcbwd_lab.studies.coverage import upstream, verdicts

    hits = [e for e in upstream.entries_for(test) if verdicts.op_id(e) == op]
    hits.sort(key=lambda e: e.on_linux_cpu() != "skip")  # a skip wins, as unittest runs it
    return hits[0] if hits else None


def split_kinds(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Stale rows split by what upstream's entry is (``skip`` or ``xfail``), each with its
    reason (upstream's comment, else its group's), deduplicated by (test, op)."""
    out: dict[str, list[dict[str, Any]]] = {"skip": [], "xfail": []}
    seen = set()
    for r in rows:
        op = _op(r) if "variant" in r else r["op"]
        key = (r["test"], op)
        if key in seen:
            continue
        seen.add(key)
        e = entry_of(*key)
        kind = e.on_linux_cpu() if e is not None else r.get("kind", "xfail")
        reason = (e.reason or e.group) if e is not None else r.get("reason", "")
        out.setdefault(kind, []).append({"test": r["test"], "op": op, "reason": reason,
                                         "line": e.line if e is not None else None})
    return out


def _reason(text: str, limit: int = 80) -> str:
    """Upstream's comment, cut at a word boundary."""
    text = " ".join(text.strip("# ").split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " ..."


def _entries(xs: Sequence[Mapping[str, Any]], why: bool = False) -> str:
    if not xs:
        return "none"
    return "; ".join(f"`{x['test'].removeprefix('test_')}` `{x['op']}` (line {x['line']}"
                     + ((f": \"{_reason(x['reason'])}\"" if x["reason"] else ": no comment")
                        if why else "") + ")" for x in xs)


def tests_section(inputs: Mapping[str, Any], pick: str) -> list[str]:
    coverage = inputs.get("coverage")
    r = retired(coverage, pick, (inputs.get("cpp") or {}).get("fallback"))
    out = ["## The tests it retires", ""]
    if not r["measured"]:
        why = (f"`data/{COVERAGE_FILE}` (the OpInfo sweep) is not there yet" if coverage is None
               else f"the sweep has no strategy for `{pick}`")
        return out + _p(f"**{NOT_MEASURED}**: {why}.")
    out += _p(f"Of {r['entries']} upstream entries ({UPSTREAM_TESTS} at 28a580b0d2; verdicts on "
              f"torch {r['torch']}, CPU only: CUDA is not measured; "
              + ", ".join(f"{k} {n}" for k, n in sorted(r["counts"].items())) + "), the sweep "
              f"calls {len(r['fixed']) + len(r['withdrawn'])} \"fixed\" by `{r['strategy']}`, "
              f"{sum(v['test'].endswith('_has_batch_rule') for v in r['fixed'] + r['withdrawn'])} "
              "of them `_has_batch_rule` entries (speed, not in-place fixes: objection 1). "
              + (f"{len(r['withdrawn'])} of them withdrawn: "
                 + "; ".join(f"`{_op(v)}` (its graph still falls back in "
                             f"{', '.join(v['falls_back'])}, data/fallback-speedup.json, which "
                             "reads the fallback from torch's C++ stderr; the sweep's records of "
                             "traced_backward saw Python-side warnings only)"
                             for v in r["withdrawn"]) + ". " if r["withdrawn"] else "")
              + "The rest:")
    out += [_b(f"`{v['test']}` {_op(v)} ({v['kind']}, line {v['source'].rsplit(' ', 1)[-1]}; "
               f"fixed by {', '.join(v['fixed_by'])})") for v in r["fixed"]] or ["- none"]
    out.append("")
    pu = inputs.get("prs_upstream")
    if pu is not None:
        rows = [x for x in pu["rows"] if x["pr"] != "control"]
        gone = {(x["test"], x["op"]) for x in rows if x["retired"]}
        mine = [v for v in r["fixed"] if (v["test"], v["op"]) in gone]
        ctrl = [x for x in pu["rows"] if x["pr"] == "control"]
        from funcbwd_lab.studies.prs.effects import describe

        out += _p(
            f"{len(mine)} of these {len(r['fixed'])} need no mechanism: run on torch "
            f"{pu['torch']} through unittest with their `xfail` in place, the small PRs' kernels "
            f"built out of tree turn {sum(x['retired'] for x in rows)} of {len(rows)} entries "
            "from expected failures into unexpected successes ("
            + "; ".join(f"`{x['test'].removeprefix('test_')}` `{x['op']}` by "
                        f"[{x['pr']}](prs/{x['pr']}.md)" for x in rows if x["retired"])
            + "), while the control entries stay expected failures with every kernel ("
            + "; ".join(f"`{x['op']}`: still {describe(x['with']['message'])}" for x in ctrl)
            + "). data/prs-upstream.json"
            + ("; the tests ran as a verbatim excerpt of upstream's files (the machine that ran "
               "them could not download them; the study runs the whole files when it can)."
               if any(f["excerpt"] for f in pu["files"].values()) else "."))
    kinds = split_kinds(r["stale"])
    dup = len(r["stale"]) - len(kinds["skip"]) - len(kinds["xfail"])
    again = (inputs.get("objections") or {}).get("stale_reruns") or []
    kinds2 = split_kinds([{**x, "kind": "xfail", "reason": ""} for x in again])
    out += _p(
        f"Independently of the change, {len(r['stale'])} entries pass on every sample on torch "
        f"{r['torch']} (CPU only). {len(kinds['xfail'])} of them are expected failures that can "
        f"go: {_entries(kinds['xfail'])}. {len(kinds['skip'])} are `skip()` entries, which are "
        "not expected failures: unittest never runs them, and a pass here says nothing of why "
        f"upstream skips them: {_entries(kinds['skip'], why=True)}."
        + (f" ({dup} of the {len(r['stale'])} is listed twice by upstream for one test, as "
           "xfail and as skip; the skip decides, as unittest never runs a skipped test.)"
           if dup else ""))
    if again:
        out += _p(
            f"The every-sample re-runs of the later compositions find {len(again)} more: "
            f"{len(kinds2['xfail'])} xfail ({_entries(kinds2['xfail'])}) and "
            f"{len(kinds2['skip'])} `skip()` ({_entries(kinds2['skip'], why=True)}).")
    return out


# ------------------------------------------------------------------------------ deleted branches
def deleted(live: Mapping[str, Any] | None, pick: str) -> dict[str, Any]:
    """The sites the pick deletes by the criterion, the ones it does not (with their blockers),
    and the headline; ``measured`` False without the table or the pick in it."""
    if live is None or pick not in live.get("strategies", []):
        return {"measured": False}
    deletable.check_schema(dict(live))
    rows = [r for r in live["rows"] if r["kind"] in ("backward", "jvp") and r["counted"]]
    gone = [(r["site"], r["kind"], r["strategies"][pick]["cost_ratio"]) for r in rows
            if r["strategies"][pick]["verdict"] == "deletable"]
    timed = [r["strategies"][pick]["cost_ratio"] for r in rows
             if r["strategies"][pick]["cost_ratio"] is not None]
    return {"measured": True, "deleted": gone, "timed": len(timed),
            "worst_timed": max(timed, default=None), "kept": deletable.not_cleared(dict(live), pick),
            "headline": deletable.headline(dict(live), pick),
            "counts": deletable.counts(dict(live), pick), "commit": live.get("core_commit", "")}


def deletes_section(inputs: Mapping[str, Any], pick: str) -> list[str]:
    d = deleted(inputs.get("live"), pick)
    out = ["## The hand-written branches it deletes", ""]
    if not d["measured"]:
        return out + _p(f"**{NOT_MEASURED}**: no `data/{LIVE_FILE}` with `{pick}`.")
    out += _p(d["headline"] + " (Python re-creations of the C++ sites; see the last paragraph).")
    out += _p(f"Criterion: {deletable.CRITERION}")
    out += _p(f"Deleted under `{pick}` (torch/csrc/autograd/FunctionsManual.cpp at "
              f"{d['commit'][:12]}; cost: batched time of the fast path under `{pick}` over the "
              "hand-written path):")
    out += ["| site | kind | cost |", "|---|---|---|"]
    out += [f"| `{s}` | {k} | {'-' if c is None else f'{c:.2f}x'} |" for s, k, c in d["deleted"]]
    out += ["", "Kept, and why (the first blocker found per site; controls are data-dependent):", ""]
    for b in d["kept"]:
        why = deletable.BLOCKERS.get(b["reason"], b["reason"])
        where = f" in {b['where']}" if b.get("where") else ""
        ops = f" ({', '.join(b['ops'])})" if b.get("ops") else ""
        cost = f"; cost {b['cost_ratio']:.2f}x" if b.get("cost_ratio") is not None else ""
        out.append(_b(f"`{b['site']}` ({b['kind']}): {why}{where}{ops}{cost}"))
    out.append("")
    br = inputs.get("branches")
    if br is not None:
        from funcbwd_lab.studies.review import branches

        s = branches.summary(br)
        out += _p(
            "What these rows rest on: the fast paths here are Python re-creations. torch's own "
            f"C++ formula of the site's op makes the site's in-place call eagerly in "
            f"{s['eager_takes_fast']} of {s['recorded']} ops (torch.profiler, no dispatch mode), "
            f"and in {s['trace_takes_fast']} of {s['recorded']} under make_fx (the count is by "
            "op name, so a call of that name elsewhere in the formula counts too): a dispatch "
            "mode makes `isTensorSubclassLike` true for every tensor, so the prototype's "
            "recorder, itself a dispatch mode, never recorded a fast path of torch's own code. "
            "The `traced_backward` results of the OpInfo sweep are evidence for torch's "
            "out-of-place branches, not for deleting them (data/review-branches.json).")
    return out
