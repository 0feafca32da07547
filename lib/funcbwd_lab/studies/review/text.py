"""The decision's three sentences, written from the numbers of :mod:`funcbwd_lab.studies.review.review`.

Every value in a sentence is read from the evidence; every choice of words follows from a value
(e.g. "no wrong result" only when the count is 0). :func:`value_text` is the one formatter of a
criterion's value (``41/45``, ``1.49x``, ``2.3 µs/node``), used by the sentences and the views.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from funcbwd_lab.run.outcomes import REASONS

# Criterion and Evidence are funcbwd_lab.studies.review.review's (which imports this module): annotated Any.
Criterion = Evidence = Any


NOT_MEASURED = "–"
#: where the cost of a strategy the bench does not time is measured instead (its own study)
from funcbwd_lab.studies.bench.config import COSTS_ELSEWHERE  # noqa: E402  (re-exported)


def value_text(c: Criterion, value: Any, details: Mapping[str, Any] | None = None) -> str:
    """A criterion's value as a table cell (the unit is in the column header): counts as ``n/of``
    when the denominator is known, ratios as ``1.49x``, microseconds as ``2.3``; not measured
    (None) as :data:`NOT_MEASURED`."""
    if value is None:
        return NOT_MEASURED
    if c.unit == "x time":
        return f"{value:.2f}x"
    if c.unit == "µs/node":
        return f"{value:.1f}"
    of = (details or {}).get(c.of) if c.of else None
    return f"{int(value)}/{int(of)}" if of is not None else f"{int(value)}"


def _number(c: Criterion, v: Any) -> str:
    """A value inside a sentence, without its denominator or unit."""
    if v is None:
        return "not measured"
    return f"{v:.2f}x" if c.unit == "x time" else f"{v:.1f}" if c.unit == "µs/node" else f"{int(v)}"


def _unit(c: Criterion) -> str:
    return "" if c.unit == "x time" else f" {c.unit}"


def _join(xs: Sequence[str]) -> str:
    xs = list(xs)
    return "".join(xs) if len(xs) <= 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def _names(sts: Sequence[str]) -> str:
    return _join([f"`{s}`" for s in sts])


def reason_text(reason: str) -> str:
    """A failure reason's short description (without its parenthesised examples)."""
    return REASONS.get(reason, reason).split(" (")[0] or reason


def pick_sentence(pick: str, d: Mapping[str, Any], others: Sequence[Mapping[str, Any]],
                  samples: str) -> str:
    """What the pick does: fixes, wrong results, leaks, cells free of the slow fallback, operators."""
    over = {"all": "all samples", "first": "the first sample of each op"}.get(samples, "some samples")
    parts = [f"Pick `{pick}`: over {over}, "
             f"it fixes {d['fixes']} of the {d['plain_failures']} cells where the legacy formula fails"]
    own = d["wrong"] - d.get("wrong_inherited", 0)
    inherited = d.get("wrong_inherited", 0)
    parts.append((", with no wrong result" if own == 0 else f", with {own} WRONG results")
                 + (f" of its own ({inherited} more cells inherit the legacy formula's own error)"
                    if inherited else ""))
    if d.get("leaks") is not None:
        parts.append(f", leaves no state behind after {d['checked']} raising backwards" if d["leaks"] == 0
                     else f", leaks state after {d['leaks']} of {d['checked']} raising backwards")
    most = all(d["no_fallback"] > o["no_fallback"] for o in others)
    parts.append(f", and passes {d['no_fallback']} of {d['applicable']} cells without vmap's slow "
                 f"per-sample fallback{', the most of any candidate' if most and others else ''}")
    if d.get("new_ops") is not None:
        n = d["new_ops"]
        parts.append(", while adding no operator" if n == 0 else f", while adding {n} operator{'s' if n != 1 else ''}")
    return "".join(parts) + "."


def others_sentence(ranked: Sequence[Mapping[str, Any]], criteria: Sequence[Criterion]) -> str:
    """Why each other candidate is behind the pick (grouped by the criterion that decides), and
    what puts the runner-up ahead of the third."""
    by = {c.name: c for c in criteria}
    pick = ranked[0]
    if len(ranked) == 1:
        return f"`{pick['strategy']}` is the only candidate in the evidence."
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in ranked[1:]:
        groups.setdefault(row["behind_on"], []).append(row)
    parts = []
    for name, rows in groups.items():
        sts = [r["strategy"] for r in rows]
        if not name:
            parts.append(f"{_names(sts)} tie{'s' if len(sts) == 1 else ''} with it on every criterion "
                         "(the order is by name)")
            continue
        c = by[name]
        vals = _join([_number(c, r[name]) for r in rows])
        parts.append(f"{_names(sts)} {c.worse[1 if len(sts) > 1 else 0]} "
                     f"({vals} vs {_number(c, pick[name])}{_unit(c)})")
    text = "The others are behind it: " + "; ".join(parts)
    if len(ranked) > 2 and ranked[1]["ahead_of_next_by"]:
        c = by[ranked[1]["ahead_of_next_by"]]
        a, b = ranked[1], ranked[2]
        text += (f". `{a['strategy']}` ranks second, ahead of `{b['strategy']}` on {c.label} "
                 f"({_number(c, a[c.name])} vs {_number(c, b[c.name])}{_unit(c)})")
    return text + "."


def cost_and_unsolved_sentence(pick: str, d: Mapping[str, Any], unsolved: Sequence[Mapping[str, Any]]) -> str:
    """What the pick costs (batched and with vmap off) and which cells no candidate solves."""
    hf, bi, off = d.get("cost_vs_handfixed"), d.get("cost_vs_builtin"), d.get("vmap_off_us")
    if hf is None and bi is None and off is None:
        cost = f"`{pick}`'s cost was not measured (no saved bench result)"
    else:
        ratios = [f"{v:.2f}x {name}'s time" for v, name in ((hf, "the hand-fixed formula"), (bi, "builtin"))
                  if v is not None]
        cost = f"Batched, `{pick}` takes {' and '.join(ratios) or 'an unmeasured time'}"
        notes = [f"median over {len(d['ops_timed'])} ops, batch >= 64"] if d.get("ops_timed") else []
        notes += ["handfixed not in the bench result"] if hf is None else []
        cost += f" ({'; '.join(notes)})" if notes else ""
        if off is not None:
            noise = d.get("vmap_off_noise_us")
            if noise is not None and abs(off) <= noise:
                cost += (f"; with vmap off its cost per backward node is within the run's spread "
                         f"({off:.1f} µs, spread {noise:.1f} µs)")
            else:
                cost += (f"; with vmap off it adds {off:.1f} µs per backward node"
                         + (f" (run spread {noise:.1f} µs)" if noise is not None else ""))
    if not unsolved:
        return cost + "; every cell is passed by some candidate."
    n = sum(len(u["scenarios"]) for u in unsolved)
    items = []
    for u in unsolved:
        b = len(u["builtin_passes"])
        items.append(f"{u['op']} ({reason_text(u['reason'])}: {', '.join(u['scenarios'])}"
                     + (f"; torch's builtin passes {b} of them" if b else "") + ")")
    return cost + f"; no candidate passes {n} cell{'s' if n != 1 else ''}: " + "; ".join(items) + "."


def sentences(ranked: Sequence[Mapping[str, Any]], criteria: Sequence[Criterion],
              evidence: Evidence) -> tuple[str, str, str]:
    """The decision's three sentences: the pick, the others, its cost and what stays unsolved."""
    pick = ranked[0]["strategy"]
    d = evidence.strategies[pick]
    others = [evidence.strategies[r["strategy"]] for r in ranked[1:]]
    return (pick_sentence(pick, d, others, evidence.basis["samples"]),
            others_sentence(ranked, criteria),
            cost_and_unsolved_sentence(pick, d, evidence.unsolved))


def untimed_note(rows: Sequence[Mapping[str, Any]], timing: Sequence[str]) -> list[str]:
    """Why a row's timing columns (``timing``: criterion names) are all not measured while other
    rows have them (a bench result was read): the strategy is not in the bench, and why (a slow
    strategy, :attr:`funcbwd_lab.strategies.base.Strategy.slow`, is left out of the bench), and where
    its cost is measured instead (:data:`COSTS_ELSEWHERE`). [] when no row or every row is timed."""
    from funcbwd_lab.strategies import get_strategy, names

    untimed = [r["strategy"] for r in rows if all(r.get(n) is None for n in timing)]
    if not timed_any(rows, timing) or not untimed:
        return []
    out = []
    for st in untimed:
        slow = st in names() and get_strategy(st).slow
        why = ("a slow strategy (its cells take seconds each), which the bench does not time"
               if slow else "not in the bench result")
        where = COSTS_ELSEWHERE.get(st)
        out.append(f"`{st}`'s timings are not measured ({NOT_MEASURED}): {why}"
                   + (f"; {where}." if where else "."))
    return out


def timed_any(rows: Sequence[Mapping[str, Any]], timing: Sequence[str]) -> bool:
    return any(r.get(n) is not None for r in rows for n in timing)


def notes(rows: Sequence[Mapping[str, Any]], timing: Sequence[str] = ()) -> list[str]:
    """Explanations of values a reader would otherwise stop at, each written only when such a
    value is in ``rows`` (candidates and references); ``timing``: the timing criteria's names
    (for :func:`untimed_note`)."""
    out = untimed_note(rows, timing)
    def spread(r: Mapping[str, Any]) -> float:
        return r.get("details", {}).get("vmap_off_noise_us") or 0.0

    below = [r for r in rows if (r.get("vmap_off_us") or 0) < 0]
    beyond = [r["strategy"] for r in below if r["vmap_off_us"] < -spread(r)]
    expected = [s for s in beyond if s in ("builtin", "handfixed")]
    if expected:
        out.append(f"A vmap-off cost below zero beyond the run's spread ({_names(expected)}) means "
                   "faster than the baseline, which runs the legacy formula as a Python "
                   "autograd.Function: builtin runs torch's C++ formula, handfixed the modern one.")
    if [s for s in beyond if s not in expected]:
        out.append(f"{_names([s for s in beyond if s not in expected])}: vmap-off cost below zero "
                   "beyond the run's spread, not explained by what the strategy does.")
    within = [r["strategy"] for r in below if r["strategy"] not in beyond]
    if within:
        out.append(f"The negative vmap-off costs of {_names(within)} are within the run's spread "
                   "(noise).")
    inherited = {r["strategy"]: r["details"]["wrong_inherited"] for r in rows
                 if r.get("details", {}).get("wrong_inherited")}
    if inherited:
        counts = sorted(set(inherited.values()))
        which = ", ".join(f"{n} of {_names([s for s, k in inherited.items() if k == n])}'s"
                          for n in counts)
        clean = [r["strategy"] for r in rows if r["strategy"] not in inherited
                 and r["strategy"] in ("builtin", "handfixed")]
        out.append("Wrong results count cells whose result differs from torch's own gradient "
                   f"(computed per sample with torch.func); {which} are the legacy formula's own "
                   "error (it is wrong there: the result agrees with its per-sample loop, reason "
                   "legacy_wrong), which every strategy running it inherits"
                   + (f" and {_names(clean)} {'does' if len(clean) == 1 else 'do'} not." if clean else "."))
    unused = [r["strategy"] for r in rows if r.get("details", {}).get("without_mechanism")]
    if unused:
        out.append(f"{_names(unused)} also pass cells without their own mechanism running (ok* in the "
                   "matrix: nothing to functionalize there); those are not counted as fixes.")
    return out
