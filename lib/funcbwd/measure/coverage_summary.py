"""The coverage sweep's records summarized: counts per strategy, regressions and fixes against
``builtin``, slow-fallback ATen ops, the text summary, the saved file, and the HTML table and
figure shown by the coverage notebook and the report.

A *regression* is an (op, sample) where ``builtin`` passes and a functionalizing strategy fails or
mismatches; a *fix* the reverse. Each regression carries :func:`explain`'s reading of why (the
known mechanisms in :data:`EXPLANATIONS`).
"""

from __future__ import annotations

import csv
import gzip
import html
import io
import json
import re
import textwrap
from typing import Any, Sequence

from funcbwd.errors import BadInputError, first_line
from funcbwd.measure.coverage_sweep import RECORD_KEYS, SCENARIO
from funcbwd.run.outcomes import STATUSES
from funcbwd.tables import WIDTH, paragraph, shorten, table

# Known reasons a functionalizing strategy fails where builtin passes: (pattern in the record's
# status, reason or message; explanation). First match wins.
EXPLANATIONS = [
    ("leaked_state", "the strategy left functorch/dispatch state changed"),
    ("functionalization_assert", "functionalization met a non-functional tensor: the backward "
     "mutates or views a tensor built outside the functionalized region (from saved tensors) "
     "with a functional one"),
    ("doesn't work on out= or view ops", "the functionalized backward calls a view/out= op that "
     "has no batching rule, and vmap's fallback cannot run views"),
    ("requires special handling, and does not yet have a batching rule", "functionalization "
     "rewrites the backward's in-place write through an as_strided view into "
     "aten::as_strided_scatter, which has no batching rule (run with the scoped rules: --rules)"),
    ("no_batch_rule", "functionalization emits an op with no batching rule that the fallback "
     "cannot run"),
    ("vmap_inplace", "an in-place op still meets a batched operand: the tensor it writes into is "
     "not functionalized (e.g. created inside a node the strategy does not reach)"),
    ("data_dependent", "data-dependent shape or control flow under the functional wrapper"),
    ("timeout", "the op exceeded the per-op time budget (its worker was restarted)"),
    ("crash", "the op's worker process died"),
    ("mismatch", "wrong numbers: the functionalized backward differs from the per-sample loop "
     "(e.g. a mutation through an aliasing view that functionalization replays differently)"),
]


def explain(rec: dict[str, Any]) -> str:
    hay = " ".join(str(rec.get(k, "")) for k in ("status", "reason", "message"))
    for pattern, text in EXPLANATIONS:
        if pattern in hay:
            return text
    return f"{rec.get('error_class') or rec['status']}: {rec.get('message', '')}"


def row_key(r: dict[str, Any]) -> tuple[str, str]:
    """(op, sample label): records of one row are compared with each other. A record of another
    scenario than the sweep's (``vmap_cotangents``: a strategy that cannot batch primals, and
    builtin's baseline for it) gets its own row, labelled with the scenario."""
    scenario = r.get("scenario", SCENARIO)
    return r["op"], r["sample"] if scenario == SCENARIO else f"{r['sample']} ({scenario})"


def label(r: dict[str, Any]) -> str:
    """The strategy, with the scenario when it is not the sweep's (counts are per label)."""
    scenario = r.get("scenario", SCENARIO)
    return r["strategy"] if scenario == SCENARIO else f"{r['strategy']} ({scenario})"


def by_key(records: Sequence[dict]) -> dict[tuple[str, str], dict[str, dict]]:
    """(op, sample label) -> strategy -> record (see :func:`row_key`)."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for r in records:
        out.setdefault(row_key(r), {})[r["strategy"]] = r
    return out


def _failed(r: dict) -> bool:
    return r["status"] in ("fail", "mismatch")


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts per strategy (per status, slow fallback, budget cut, passes without the strategy's
    mechanism), failure reasons, regressions (with :func:`explain`), fixes, slow-fallback ATen
    ops per strategy, and the ops whose fallback functionalization removes or introduces."""
    strategies = list(dict.fromkeys(label(r) for r in records))
    keys = (*STATUSES, "fallback", "timed_out", "passed_without_mechanism")
    counts = {s: {k: 0 for k in keys} for s in strategies}
    reasons: dict[str, dict[str, int]] = {s: {} for s in strategies}
    fb_ops: dict[str, dict[str, int]] = {s: {} for s in strategies}
    for r in records:
        c = counts[label(r)]
        c[r["status"]] = c.get(r["status"], 0) + 1
        c["fallback"] += bool(r["fallback_ops"])
        c["timed_out"] += bool(r.get("timed_out"))
        c["passed_without_mechanism"] += r["status"] == "pass" and not r.get("mechanism_ran")
        if r["status"] == "fail":
            rs = reasons[label(r)]
            rs[r["reason"]] = rs.get(r["reason"], 0) + 1
        for f in r["fallback_ops"]:
            fb_ops[label(r)][f] = fb_ops[label(r)].get(f, 0) + 1
    regressions, fixes = [], []
    others = list(dict.fromkeys(r["strategy"] for r in records if r["strategy"] != "builtin"))
    removed: dict[str, list[str]] = {s: [] for s in others}
    introduced: dict[str, list[str]] = {s: [] for s in others}
    for (op, sample), per in by_key(records).items():
        base = per.get("builtin")
        if base is None:
            continue
        for s, r in per.items():
            if s == "builtin" or r["status"] == "not_applicable":
                continue
            item = {"op": op, "sample": sample, "strategy": s, "status": r["status"],
                    "reason": r["reason"], "message": r["message"]}
            if base["status"] == "pass" and _failed(r):
                regressions.append({**item, "explanation": explain(r)})
            elif _failed(base) and r["status"] == "pass":
                fixes.append({**item, "builtin_reason": base["reason"] or base["status"],
                              "builtin_message": base["message"]})
            if base["status"] == "not_applicable":
                continue
            gone = sorted(set(base["fallback_ops"]) - set(r["fallback_ops"]))
            new = sorted(set(r["fallback_ops"]) - set(base["fallback_ops"]))
            if gone and r["status"] == "pass":
                removed[s].append(f"{op}[{sample}] ({', '.join(gone)})")
            if new:
                introduced[s].append(f"{op}[{sample}] ({', '.join(new)})")
    return {
        "strategies": strategies,
        "ops": len({r["op"] for r in records}),
        "records": len(records),
        "counts": counts,
        "fail_reasons": reasons,
        "regressions": regressions,
        "fixes": fixes,
        "fallback_ops": {s: dict(sorted(v.items(), key=lambda kv: -kv[1])) for s, v in fb_ops.items()},
        "fallback_removed": removed,
        "fallback_introduced": introduced,
        "seconds": {s: round(sum(r["seconds"] or 0 for r in records if label(r) == s), 1)
                    for s in strategies},
        "tracing": tracing(records),
    }


_TRACES = re.compile(r"(\d+) trace\(s\), ([\d.]+) s tracing")


def tracing(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Trace cost of a tracing strategy (traced_backward), read from its records' detail:
    traces, total seconds, median and max seconds per trace."""
    per = []
    for r in records:
        m = _TRACES.search(r.get("detail", ""))
        if m and int(m.group(1)):
            per += [float(m.group(2)) / int(m.group(1))] * int(m.group(1))
    if not per:
        return {}
    per.sort()
    return {"traces": len(per), "seconds": round(sum(per), 1),
            "median_s": round(per[len(per) // 2], 4), "max_s": round(per[-1], 3)}


def _some(items: Sequence[str], limit: int) -> str:
    """The first ``limit`` items joined, and how many more."""
    more = f"; ... and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def format_summary(summary: dict[str, Any], limit: int = 40, width: int = WIDTH) -> str:
    """The summary as text fitting ``width`` columns: counts per strategy (a table), failure
    reasons, tracing cost, up to ``limit`` regressions and fixes, and the slow-fallback lists
    (their first ``limit // 3`` entries each)."""
    some = max(1, limit // 3)
    out = [f"{summary['ops']} OpInfo ops, {summary['records']} records"]
    keys = [*STATUSES, "fallback", "timed_out", "passed_without_mechanism"]
    rows = [[s, *[summary["counts"][s].get(k, 0) for k in keys], summary["seconds"][s]]
            for s in summary["strategies"]]
    out.append(table(["strategy", *(k.replace("_", " ") for k in keys), "seconds"], rows,
                     width=width, align="l" + "r" * (len(keys) + 1)))
    para = lambda text: paragraph(text, width, "", "    ")  # noqa: E731
    item = lambda text: paragraph(text, width, "  ", "      ")  # noqa: E731
    for s, rs in summary["fail_reasons"].items():
        if rs:
            out.append(para(f"{s} failure reasons: "
                            + ", ".join(f"{k or 'other'}={v}" for k, v in rs.items())))
    if summary.get("tracing"):
        t = summary["tracing"]
        out.append(para(f"tracing: {t['traces']} traces, {t['seconds']} s in all, median "
                        f"{t['median_s']} s, max {t['max_s']} s per trace"))
    regs = summary["regressions"]
    out.append(f"\nregressions (builtin passes, strategy fails): {len(regs)}")
    for r in regs[:limit]:
        out.append(item(f"{r['strategy']} {r['op']}[{r['sample']}] {r['status']} {r['reason']}: "
                        f"{r['explanation']} | {shorten(first_line(r['message'], 10_000), 140)}"))
    if len(regs) > limit:
        out.append(f"  ... {len(regs) - limit} more (see the JSON)")
    out.append(f"\nfixes (builtin fails, strategy passes): {len(summary['fixes'])}")
    for r in summary["fixes"][:limit]:
        out.append(item(f"{r['strategy']} {r['op']}[{r['sample']}] (builtin: {r['builtin_reason']})"))
    for s, ops in summary["fallback_ops"].items():
        if ops:
            out.append("\n" + para(f"{s} slow-fallback ATen ops (records): "
                                   + _some([f"{k}={v}" for k, v in ops.items()], some)))
    for s, items in summary["fallback_removed"].items():
        out.append("\n" + para(f"{s} turns {len(items)} builtin slow-fallback records (partly) into "
                               "batched execution" + (": " + _some(items, some) if items else "")))
    for s, items in summary["fallback_introduced"].items():
        if items:
            out.append(para(f"{s} introduces the fallback in {len(items)} records: "
                            + _some(items, some)))
    return "\n".join(out)


# ------------------------------------------------------------------------------ files
def to_json(records: Sequence[dict], meta: dict | None = None,
            cost: Sequence[dict] | None = None) -> str:
    return json.dumps({"meta": meta or {}, "records": list(records), "cost": list(cost or [])},
                      indent=1)


def to_csv(records: Sequence[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(RECORD_KEYS))
    w.writeheader()
    for r in records:
        w.writerow({**r, "fallback_ops": ";".join(r["fallback_ops"]), "rules": ";".join(r["rules"])})
    return buf.getvalue()


def write(path: str, records: Sequence[dict], meta: dict | None = None,
          cost: Sequence[dict] | None = None) -> None:
    """Save a sweep as JSON: gzip-compressed and compact if ``path`` ends in ``.gz`` (an
    all-samples sweep is ~30 MB of JSON, ~0.6 MB compressed), else indented."""
    if path.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            json.dump({"meta": meta or {}, "records": list(records), "cost": list(cost or [])}, f,
                      separators=(",", ":"))
        return
    with open(path, "w") as f:
        f.write(to_json(records, meta, cost))


def _read(path: str) -> str:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt") as f:
                return f.read()
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise BadInputError(f"cannot read coverage results {path!r}: {e.strerror or e}") from e


def load(path: str) -> list[dict[str, Any]]:
    """Records from a JSON (``{"meta", "records", "cost"}``; ``.json.gz`` compressed) or CSV file
    of a sweep."""
    text = _read(path)
    if path.endswith(".csv"):
        out = []
        for row in csv.DictReader(io.StringIO(text)):
            row["fallback_ops"] = [x for x in row["fallback_ops"].split(";") if x]
            row["rules"] = [x for x in row["rules"].split(";") if x]
            row["timed_out"] = row["timed_out"] == "True"
            row["mechanism_ran"] = row["mechanism_ran"] == "True"
            for k in ("in_dims_tried", "in_dims_total"):
                row[k] = int(row[k] or 0)
            row["seconds"] = float(row["seconds"] or 0)
            row["max_abs_err"] = float(row["max_abs_err"]) if row["max_abs_err"] else None
            out.append(row)
        return out
    records = _json(path, text).get("records")
    if not isinstance(records, list) or (records and "strategy" not in records[0]):
        raise BadInputError(f"{path!r} holds no coverage records")
    return records


def _json(path: str, text: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInputError(f"{path!r} is not a coverage JSON or CSV file: {e}") from e
    if not isinstance(data, dict):
        raise BadInputError(f"{path!r} holds no coverage records (expected an object with "
                            "'meta' and 'records')")
    return data


def load_meta(path: str) -> dict[str, Any]:
    return _json(path, _read(path)).get("meta", {})


def load_cost(path: str) -> list[dict[str, Any]]:
    """The per-op cost entries saved with a sweep run with ``--cost`` ([] if none)."""
    return _json(path, _read(path)).get("cost", []) or []


# ------------------------------------------------------------------------------ views
_COLORS = {"pass": "#d4edda", "fail": "#f8d7da", "mismatch": "#fde2b8", "timeout": "#d6d8f5",
           "not_applicable": "#eeeeee"}


def change(per: dict[str, dict]) -> str:
    """Tags for one (op, sample): regression:S, fix:S, batched:S (fallback removed)."""
    base = per.get("builtin")
    if base is None:
        return ""
    tags = []
    for s, r in per.items():
        if s == "builtin":
            continue
        if base["status"] == "pass" and _failed(r):
            tags.append(f"regression:{s}")
        elif _failed(base) and r["status"] == "pass":
            tags.append(f"fix:{s}")
        if r["status"] == "pass" and set(base["fallback_ops"]) - set(r["fallback_ops"]):
            tags.append(f"batched:{s}")
    return " ".join(tags)


def differing(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the rows (:func:`row_key`) where some strategy does not simply pass: a
    failure, a wrong result, a slow fallback or a change against builtin."""
    return [r for per in by_key(records).values()
            if any(x["status"] not in ("pass", "not_applicable") or x["fallback_ops"]
                   for x in per.values())
            for r in per.values()]


#: the coverage table's sorter: a click on a header sorts the rows by that column's text (again:
#: the other way); no external script
SORT_SCRIPT = """\
<script>
function funcbwdSort(th) {
  const table = th.closest('table'), body = table.tBodies[0];
  const i = Array.from(th.parentNode.children).indexOf(th);
  const asc = th.dataset.asc !== '1';
  th.dataset.asc = asc ? '1' : '0';
  const text = row => row.cells[i].textContent;
  const rows = Array.from(body.rows);
  rows.sort((a, b) => text(a).localeCompare(text(b)) * (asc ? 1 : -1));
  rows.forEach(row => body.appendChild(row));
}
</script>"""
#: the width the generated HTML's source lines fit
HTML_WIDTH = 100


def _html_lines(start: str, text: str, end: str, indent: str = "    ") -> list[str]:
    """``start + text + end`` as source lines of at most :data:`HTML_WIDTH` columns, broken at
    the spaces of ``text`` (already escaped; inside an attribute a line break shows as one)."""
    lines = textwrap.wrap(start + text + end, HTML_WIDTH, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False)
    return lines or [start + end]


def _cell_html(r: dict[str, Any] | None) -> list[str]:
    if r is None:
        return ["  <td></td>"]
    text = r["status"] + (f" {r['reason']}" if r["reason"] else "")
    text += " +fb" if r["fallback_ops"] else ""
    text += "*" if r["status"] == "pass" and not r.get("mechanism_ran") else ""
    text += " (budget)" if r.get("timed_out") else ""
    tip = "; ".join(x for x in (r["message"], ", ".join(r["fallback_ops"]), r.get("detail", ""),
                                r.get("mechanism", "")) if x)
    start = f'  <td style="background:{_COLORS.get(r["status"], "")}"'
    if not tip:
        return [f"{start}>{html.escape(text)}</td>"]
    # the tooltip's lines continue without indent: an indent would show in the tooltip
    return [start] + _html_lines('    title="', html.escape(tip), f'">{html.escape(text)}</td>', "")


def table_html(records: Sequence[dict[str, Any]]) -> str:
    """A self-contained sortable HTML table (click a header; :data:`SORT_SCRIPT`), one row per
    op x sample, one column per strategy; no external scripts. Its source is readable: one
    cell per line, no line over :data:`HTML_WIDTH` columns (long tooltips wrap)."""
    strategies = list(dict.fromkeys(r["strategy"] for r in records))
    head = ["op", "sample", *strategies, "change", "builtin fallback ops"]
    lines = ['<table class="funcbwd-coverage" style="border-collapse:collapse;font-size:12px">',
             "<thead><tr>"]
    lines += [f'  <th onclick="funcbwdSort(this)" style="cursor:pointer">{html.escape(h)}</th>'
              for h in head]
    lines += ["</tr></thead>", "<tbody>"]
    for (op, sample), per in by_key(records).items():
        lines += ["<tr>", f"  <td>{html.escape(op)}</td>", f"  <td>{html.escape(sample)}</td>"]
        for s in strategies:
            lines += _cell_html(per.get(s))
        base = per.get("builtin", {})
        lines += _html_lines("  <td>", html.escape(change(per)), "</td>")
        lines += _html_lines("  <td>", html.escape(", ".join(base.get("fallback_ops", []))), "</td>")
        lines.append("</tr>")
    lines += ["</tbody>", "</table>", SORT_SCRIPT,
              "<p>* passed without the strategy's mechanism running; +fb: vmap's slow per-sample "
              "fallback ran</p>"]
    return "\n".join(lines)


def summary_figure(records: Sequence[dict[str, Any]]):
    """A plotly stacked bar per strategy: records by status, plus records with a slow fallback."""
    import plotly.graph_objects as go

    summary = summarize(records)
    strategies = summary["strategies"]
    fig = go.Figure()
    for status in STATUSES:
        fig.add_bar(name=status, x=strategies,
                    y=[summary["counts"][s].get(status, 0) for s in strategies],
                    marker_color=_COLORS[status].replace("#eeeeee", "#bbbbbb"),
                    offsetgroup="status")
    fig.add_bar(name="slow fallback", x=strategies,
                y=[summary["counts"][s]["fallback"] for s in strategies],
                marker_color="#6c8ebf", offsetgroup="fallback")
    fig.update_layout(barmode="stack", title=f"vmap(vjp) over {summary['ops']} OpInfo ops",
                      yaxis_title="op samples (records)", xaxis_title="strategy")
    return fig
