"""Today's hand-written branches, rendered: the deletable-branches table of
:mod:`funcbwd.measure.deletable` as markdown (README) and HTML (report, notebooks).

Rendering only: the verdicts, counts and headlines are recomputed from the saved rows by
:func:`funcbwd.measure.deletable.headline` / :func:`~funcbwd.measure.deletable.counts`; nothing
here decides a verdict.
"""

from __future__ import annotations

import html
from typing import Any

from funcbwd.measure import deletable

LIVE_FILE_NAME = "live-deletable.json"
COMMAND = "python -m funcbwd deletable --out data/live-deletable.json"


def _short(verdict: str) -> str:
    return verdict.replace("not deletable: ", "").replace("undetermined: ", "undetermined: ")


def _blocked(result: dict[str, Any], strategy: str) -> list[tuple[str, str, str]]:
    """(site, kind, reason) for every counted in-place site not deletable under ``strategy``."""
    out = []
    for r in result["rows"]:
        v = r["strategies"].get(strategy)
        if v and r["kind"] != "control" and r["counted"] and v["verdict"] != "deletable":
            out.append((r["site"], r["kind"], _short(v["verdict"])))
    return out


def markdown(result: dict[str, Any], source: str = f"data/{LIVE_FILE_NAME}") -> str:
    """Headline per strategy, then the sites the first strategy does not clear, with the reason."""
    strategies = list(result["strategies"])
    lines = [f"- **{deletable.headline(result, st)}.**" for st in strategies]
    first = strategies[0]
    blocked = _blocked(result, first)
    if blocked:
        lines += ["", f"Not deletable under `{first}`, and why:", "",
                  "| site | kind | reason |", "|---|---|---|"]
        lines += [f"| `{s}` | {k} | {reason} |" for s, k, reason in blocked]
    lines += ["", f"_From `{source}`: every site of torch/csrc/autograd/FunctionsManual.cpp at "
              f"{result.get('core_commit', '?')[:12]} (docs/live-sites.md), fast path vs core's "
              f"out-of-place path, all applicable scenarios and samples, cost = batched time vs "
              f"the hand-written path (limit {result.get('cost_limit', deletable.COST_LIMIT)}x). "
              f"Recompute: `{COMMAND}`._"]
    return "\n".join(lines)


def html_block(result: dict[str, Any]) -> str:
    strategies = list(result["strategies"])
    parts = ["<ul>" + "".join(f"<li><b>{html.escape(deletable.headline(result, st))}</b></li>"
                              for st in strategies) + "</ul>"]
    rows = "".join(
        "<tr>" + f"<td><code>{html.escape(r['site'])}</code></td><td>{html.escape(r['kind'])}</td>"
        + "".join(f"<td>{html.escape(_cell(r['strategies'].get(st)))}</td>" for st in strategies)
        + "</tr>" for r in result["rows"])
    head = "<tr><th>site</th><th>kind</th>" + "".join(
        f"<th>{html.escape(st)}</th>" for st in strategies) + "</tr>"
    parts.append(f"<table class='live'><thead>{head}</thead><tbody>{rows}</tbody></table>")
    parts.append(f"<p>Recompute: <code>{html.escape(COMMAND)}</code></p>")
    return "\n".join(parts)


def _cell(v: dict[str, Any] | None) -> str:
    if not v:
        return ""
    ratio = "" if v.get("cost_ratio") is None else f" ({v['cost_ratio']:.2f}x)"
    return ("deletable" if v["verdict"] == "deletable" else _short(v["verdict"])) + ratio
