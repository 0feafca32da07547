""""Doesn't torch.compile already do this?": the answer, computed from the compiled study's data.

Input: the document :func:`funcbwd_lab.studies.compiled.report.collect` saves (``data/compiled.json``).
Everything returned is read or counted from it; the words for a cell's kind are the study's own
(:data:`funcbwd_lab.studies.compiled.report.CODES`, chosen by :func:`~funcbwd_lab.studies.compiled.report.code`
from each row's fields), and each failure kind's reason is put together from what the rows
recorded: the stage that raised, where dynamo broke the graph (inside the transform or outside
it) with dynamo's own reason, and the error's first line.

* :func:`cell_kinds`: per backend, how many cells of each kind (:data:`~report.CODES`);
* :func:`failure_kinds`: one entry per kind of failure, with its cells per backend and reason;
* :func:`drop_control`: the control: did the custom backward run eagerly, and compiled?
* :func:`vjp_fn_variant`: ``torch.compile(vmap(vjp_fn))``: statuses and where dynamo broke;
* :func:`cost`: per variant and backend, the median compiled / eager ratio and compile time;
* :func:`answer`: the short answer as sentences; :func:`text`: all of it, lines <= 100 columns.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Mapping, Sequence

from funcbwd_lab.studies.compiled.report import CODES, code
from funcbwd_lab.tables import WIDTH, paragraph, table

#: short words for the passing cell codes (:data:`~funcbwd_lab.studies.compiled.report.CODES` says more)
PASS_WORDS = {"PASS": "ran the legacy formula compiled", "torch": "on torch's own formula",
              "eager": "in an eager fallback"}
#: a difference below this is "the same numbers" for the control (float32 gradients of O(1))
CONTROL_ATOL = 1e-5


def cell_kinds(data: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """backend -> cell code -> cells (first sample of each op, every scenario)."""
    out: dict[str, Counter] = {}
    for r in data["outcomes"]:
        out.setdefault(r["backend"], Counter())[code(r)] += 1
    return {b: dict(sorted(c.items(), key=lambda kv: list(CODES).index(kv[0]))) for b, c in out.items()}


def _break(r: Mapping[str, Any]) -> tuple[str, str, str]:
    """(inside/outside the transform, where, dynamo's reason) of the row's deciding graph break."""
    for field, what in (("first_break_inside_transform", "inside the transform"),
                        ("first_break", "outside the transform")):
        if r.get(field):
            where, _, why = r[field].partition(": ")
            return what, where, why
    return "", "", ""


def failure_kinds(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per kind of failing cell (its code, error class and first line), most cells
    first: ``code``, ``meaning`` (the study's words for the code), ``error``, ``cells`` (backend
    -> count), ``example`` (op / scenario), ``breaks`` ([(inside/outside, where, reason, cells)],
    most first) and ``reason``: a sentence from those fields."""
    kinds: dict[tuple[str, str], dict[str, Any]] = {}
    for r in data["outcomes"]:
        if r["status"] in ("pass", "not_applicable"):
            continue
        c = code(r)
        error = first_sentence(r["error"] or r["message"])
        k = kinds.setdefault((c, error), {
            "code": c, "meaning": CODES[c], "error": error, "cells": Counter(), "breaks": Counter(),
            "example": f"{r['op']} / {r['scenario']}"})
        k["cells"][r["backend"]] += 1
        k["breaks"][_break(r)] += 1
    out = []
    for k in sorted(kinds.values(), key=lambda k: (-sum(k["cells"].values()), k["code"], k["error"])):
        breaks = [(*b, n) for b, n in sorted(k["breaks"].items(), key=lambda kv: (-kv[1], kv[0])) if b[0]]
        out.append({**k, "cells": dict(k["cells"]), "breaks": breaks, "reason": _reason(k["code"], k["error"], breaks)})
    return out


def _reason(c: str, error: str, breaks: Sequence[tuple[str, str, str, int]]) -> str:
    stage = {"dynamo": "dynamo raised while tracing", "backend": "the backend raised on dynamo's graph",
             "c:fail": "the compiled graph raised", "mism": "the result differs from the loop"}.get(
        c, "the call ran eagerly (no graph holds the transform) and raised")
    text = stage
    if breaks:
        what, where, why, n = breaks[0]
        text += f"; dynamo broke the graph {what} at {where} ({why})"
    return f"{text}: {error}"


def first_sentence(error: str, limit: int = 110) -> str:
    """An error's first line up to its first sentence's end, at most ``limit`` characters."""
    line = error.splitlines()[0] if error else ""
    head, dot, _ = line.partition(". ")
    head = head + ("." if dot else "")
    return head if len(head) <= limit else head[:limit - 3].rstrip() + "..."


def drop_control(data: Mapping[str, Any], atol: float = CONTROL_ATOL) -> list[dict[str, Any]]:
    """Per probe row (backward kind x backend): which gradient eager and compiled returned
    (``"torch's"``, ``"twice torch's"`` (the custom backward ran), or the error), and
    ``dropped``: compiled returned torch's own gradient where eager ran the custom backward or
    raised (the Function's backward was not run: pytorch#193279)."""
    def which(d: Mapping[str, Any]) -> str:
        if "error" in d:
            return "error: " + d["error"].split(": ", 1)[0]
        if d["err_vs_torch"] <= atol:
            return "torch's"
        return "twice torch's" if d["err_vs_twice_torch"] <= atol else "neither"

    out = []
    for p in data["drop_probe"]:
        eager, compiled = which(p["eager"]), which(p["compiled"])
        out.append({"backward": p["backward"], "backend": p["backend"], "eager": eager,
                    "compiled": compiled,
                    "dropped": compiled == "torch's" and eager != "torch's"})
    return out


def vjp_fn_variant(data: Mapping[str, Any]) -> dict[str, Any]:
    """``torch.compile(vmap(vjp_fn))``: backend -> status -> ops, how many rows a graph held the
    transform, and the first graph breaks' reasons (reason -> rows)."""
    rows = data["vjp_fn_outcomes"]
    by: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        by.setdefault(r["backend"], {}).setdefault(r["status"], []).append(r["op"])
    reasons = Counter(r["first_break"].partition(": ")[2] or "(no graph break)" for r in rows)
    return {"rows": len(rows), "by_backend": by,
            "in_graph": sum(bool(r["transform_in_graph"]) for r in rows),
            "first_breaks": dict(reasons.most_common())}


def cost(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per variant x backend over the timed cases: median compiled / eager ratio, its range,
    median first-call (compile) seconds, and in how many cases a graph held the transform; and
    the cases whose compiled result was wrong (``wrong``, not timed: never counted as a speed-up),
    with the known torch bugs that explain them (``wrong_why``)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in data["cost"]:
        groups.setdefault((r["variant"], r["backend"]), []).append(r)
    out = []
    for (variant, backend), rs in groups.items():
        timed = [r for r in rs if "ratio" in r]
        ratios = [r["ratio"] for r in timed]
        wrong = [r for r in rs if "wrong" in r]
        out.append({"variant": variant, "backend": backend, "cases": len(rs), "timed": len(timed),
                    "wrong": len(wrong), "wrong_cases": [f"{r['op']} {r['size']}" for r in wrong],
                    "wrong_why": sorted({r["wrong"].partition(": known torch bug ")[2] for r in wrong} - {""}),
                    "median_ratio": statistics.median(ratios) if ratios else None,
                    "min_ratio": min(ratios, default=None), "max_ratio": max(ratios, default=None),
                    "median_compile_s": statistics.median(r["compile_s"] for r in rs),
                    "in_graph": sum(bool(r.get("transform_in_graph")) for r in timed)})
    return out


def answer(data: Mapping[str, Any]) -> list[str]:
    """The short answer, one sentence per finding, each computed from the data."""
    rows, meta = data["outcomes"], data["meta"]
    kinds = cell_kinds(data)
    ran = sum(r["mechanism_ran"] for r in rows)
    out = [f"No, not on torch {meta['torch']}: in {ran} of {len(rows)} cells ({len(kinds)} backends x "
           f"{len(rows) // max(1, len(kinds))} op x scenario cells, first sample) did a compiled "
           "graph run the legacy formula."]
    passes = {b: {c: n for c, n in k.items() if c in PASS_WORDS} for b, k in kinds.items()}
    out.append("Its passes are not compile's: " + "; ".join(
        f"{b}: " + ", ".join(f"{n} {PASS_WORDS[c]}" for c, n in p.items()) for b, p in passes.items())
        + ".")
    drops = drop_control(data)
    dropped = [d for d in drops if d["dropped"]]
    out.append(f"The control ({meta.get('drop_issue', '')}) shows why a compiled pass can be torch's "
               f"formula: in {len(dropped)} of {len(drops)} probe runs the compiled call returned "
               "torch's own gradient where eager ran the custom backward (twice the gradient) or "
               "raised vmap's in-place error: dynamo dropped the Function's backward.")
    fk = failure_kinds(data)
    if fk:
        top = fk[0]
        out.append(f"The failures come in {len(fk)} kinds; the commonest ({sum(top['cells'].values())} "
                   f"cells): {top['reason']}.")
    v = vjp_fn_variant(data)
    fails = sum(len(s.get("fail", [])) + len(s.get("mismatch", [])) for s in v["by_backend"].values())
    first = next(iter(v["first_breaks"]), "")
    out.append(f"Compiling only vmap(vjp_fn) does not help: {v['in_graph']} of {v['rows']} rows put the "
               f"transform in a graph (first graph break: {first}); {fails} of {v['rows']} fail as the "
               "legacy formula does eagerly.")
    whole = [c for c in cost(data) if c["variant"] == "whole call" and c["median_ratio"] is not None]
    if whole:
        out.append("Where it can compile (torch's own ops and formulas), compiling the whole call is "
                   "faster once compiled: " + "; ".join(
                       f"{c['backend']} median {c['median_ratio']:.2f}x eager's time after a "
                       f"{c['median_compile_s']:.1f} s first call" for c in whole)
                   + " (per call signature; data/compiled.json's cost section).")
    wrong = [c for c in cost(data) if c["wrong"]]
    if wrong:
        out.append("Where it compiles it is not always right: " + "; ".join(
            f"{c['backend']} ({c['variant']}) returned wrong values in {c['wrong']} of {c['cases']} "
            f"cases ({', '.join(c['wrong_cases'])})" + (f", a known torch bug: {'; '.join(c['wrong_why'])}"
                                                       if c["wrong_why"] else "")
            for c in wrong) + "; those cases are not timed.")
    return out


def text(data: Mapping[str, Any], width: int = WIDTH) -> str:
    """The answer, the cell kinds per backend, the failure kinds with their reasons, the control,
    the vmap(vjp_fn) variant and the cost, in lines of at most ``width`` columns."""
    out = [paragraph(s, width) for s in answer(data)]
    kinds = cell_kinds(data)
    codes = [c for c in CODES if any(c in k for k in kinds.values())]
    out += ["", table(["backend", *codes], [[b, *(k.get(c, 0) for c in codes)] for b, k in kinds.items()],
                      width=width, align="l" + "r" * len(codes))]
    out += ["", "failure kinds (cells per backend), and why:"]
    for k in failure_kinds(data):
        cells = ", ".join(f"{b} {n}" for b, n in k["cells"].items())
        out.append(paragraph(f"[{k['code']}] {cells}; e.g. {k['example']}: {k['reason']}", width, "  ", "      "))
    out += ["", "control: which gradient the probe's vmap(vjp) returned"]
    out.append(table(["backward", "backend", "eager", "compiled", "backward dropped"],
                     [[d["backward"], d["backend"], d["eager"], d["compiled"], "yes" if d["dropped"] else "no"]
                      for d in drop_control(data)], width=width))
    out += ["", "cost on torch's own ops (compiled / eager time, median over cases; compile = first call):"]
    out.append(table(["variant", "backend", "cases", "wrong", "median", "range", "compile s", "in graph"],
                     [[c["variant"], c["backend"], c["cases"], c["wrong"],
                       "-" if c["median_ratio"] is None else f"{c['median_ratio']:.2f}x",
                       "-" if c["min_ratio"] is None else f"{c['min_ratio']:.2f}-{c['max_ratio']:.2f}x",
                       f"{c['median_compile_s']:.1f}", f"{c['in_graph']}/{c['timed']}"] for c in cost(data)],
                     width=width, align="llrrrrrr"))
    return "\n".join(out) + "\n"
