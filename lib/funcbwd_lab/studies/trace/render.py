"""How a recorded dispatch-key trace reads: the records and their text and HTML renderings.

:mod:`funcbwd_lab.studies.trace.trace` records what a backward formula executes under a transform and fills
these records; this module only reads them (no torch import), so a saved or synthetic
:class:`Trace` renders the same way. ``Trace.text()`` is the terminal view (the failing call
marked ``>>>``); ``Trace.html()`` a self-contained page (no script, no external resource).
"""

from __future__ import annotations

import dataclasses
import html
import re


# ------------------------------------------------------------------------------ records
@dataclasses.dataclass
class TensorArg:
    """One tensor argument of a recorded call (``position`` like '0' or '1[2]' for list items)."""

    position: str
    chain: list[str]
    keys: str
    batched: bool

    @property
    def chain_text(self) -> str:
        return " > ".join(self.chain)


@dataclasses.dataclass
class TraceEvent:
    """One torch call the formula made, as the TorchFunctionMode saw it."""

    index: int
    call: int  # which formula call (see Trace.calls)
    op: str  # the Python-level callable, e.g. 'torch.Tensor.copy_'
    aten: str  # the operator it binds to, e.g. 'aten::copy_' or 'aten::scatter_.src'; '' if none
    stack: str  # functorch interpreter stack, e.g. 'Vmap(1) > Functionalize(2)'
    tls_include: str
    tls_exclude: str
    tensors: list[TensorArg]
    vmap_sees: str  # the operator that reaches the vmap level ('aten::copy' once functionalized)
    vmap_handling: str  # 'batching rule' | 'decomposition' | 'fallback' | why vmap is not involved
    inplace_into_unbatched: bool = False
    explanation: str = ""
    error: str = ""  # the exception this call raised (first line)
    #: the dispatcher calls this call made (torch.profiler), incl. functionalization and fallback loops
    dispatcher: list["DispatcherNode"] = dataclasses.field(default_factory=list)

    @property
    def fallback_loop(self) -> bool:
        """True if the profiler saw vmap's per-sample fallback loop inside this call."""
        return any(n.has_fallback_loop() for n in self.dispatcher)

    @property
    def name(self) -> str:
        """The bare op name ('copy_')."""
        return self.op.rsplit(".", 1)[-1]


@dataclasses.dataclass
class DispatcherNode:
    """One dispatcher call from torch.profiler, with its children."""

    name: str
    shapes: list[list[int]]
    children: list["DispatcherNode"]
    note: str = ""

    def has_fallback_loop(self) -> bool:
        return bool(self.note) or any(c.has_fallback_loop() for c in self.children)


@dataclasses.dataclass
class FormulaCall:
    """One call of the strategy's ``run_formula`` under a functorch transform."""

    index: int
    stack: str
    events: list[int] = dataclasses.field(default_factory=list)
    #: dispatcher calls outside any recorded call (e.g. the strategy tracing the formula)
    unattributed: list[DispatcherNode] = dataclasses.field(default_factory=list)
    error: str = ""


@dataclasses.dataclass
class Trace:
    """One matrix cell run with its formula calls recorded: the cell's result, every recorded
    torch call (``events``) grouped by formula call (``calls``), and what was left out."""

    op: str
    sample: str
    strategy: str
    scenario: str
    status: str = "pass"  # pass | fail | mismatch | not_applicable (as a matrix cell)
    reason: str = ""
    error: str = ""
    events: list[TraceEvent] = dataclasses.field(default_factory=list)
    calls: list[FormulaCall] = dataclasses.field(default_factory=list)
    fallback_ops: list[str] = dataclasses.field(default_factory=list)
    untransformed_calls: int = 0  # run_formula calls with no transform (the reference loop)
    #: torch calls inside a formula call with no transform active or while make_fx traced
    #: (a strategy tracing the formula on the side): counted, not recorded
    hidden_ops: int = 0

    @property
    def failing_event(self) -> TraceEvent | None:
        """The call that raised; else (if the run failed) the first in-place write of a batched
        value into an unbatched tensor."""
        raised = next((e for e in self.events if e.error), None)
        if raised is not None:
            return raised
        if self.status == "fail":
            return next((e for e in self.events if e.inplace_into_unbatched), None)
        return None

    def text(self) -> str:
        return _render_text(self)

    def html(self) -> str:
        return _render_html(self)

    def html_fragment(self) -> str:
        """The same as :meth:`html` as one ``<div>`` with styles scoped to it (to embed in a page
        or a notebook output: no document wrapper, no page-wide CSS, long cells wrap)."""
        return _render_html(self, document=False)


def strip_keyset(text: str) -> str:
    """'DispatchKeySet(CPU, ADInplaceOrView)' -> 'CPU, ADInplaceOrView'."""
    m = re.fullmatch(r"DispatchKeySet\((.*)\)", text.strip())
    return m.group(1) if m else text


# ------------------------------------------------------------------------------ rendering
_TREE_LIMIT = 300  # dispatcher lines per section (a fallback loop over a big batch is long)


def _short_tls(text: str) -> str:
    keys = [k.strip() for k in strip_keyset(text).split(",") if k.strip()]
    auto = [k for k in keys if k.startswith("Autocast")]
    keys = [k for k in keys if not k.startswith("Autocast")] + (["Autocast*"] if auto else [])
    return ", ".join(keys) or "(none)"


def _handling_text(ev: TraceEvent) -> str:
    kind = ev.vmap_handling
    if kind not in ("batching rule", "decomposition", "fallback", "fallthrough"):
        return f"vmap: {kind}"
    text = f"vmap: {kind} for {ev.vmap_sees}"
    if ev.aten and ev.vmap_sees != ev.aten:
        text = f"vmap sees {ev.vmap_sees} (functionalization rewrote {ev.aten}): {kind}"
    if kind == "fallback":
        text += " (slow per-sample loop" + (", seen by the profiler)" if ev.fallback_loop else ")")
    elif ev.fallback_loop:
        text += "; inside it vmap ran a per-sample fallback loop (profiler)"
    return text


def _header(tr: Trace) -> list[str]:
    lines = [f"trace: {tr.op} [{tr.sample}] x strategy {tr.strategy} x scenario {tr.scenario}",
             f"result: {tr.status}" + (f" ({tr.reason})" if tr.reason else "")
             + (f": {tr.error}" if tr.error else ""),
             "vmap fallback warnings: " + (", ".join(tr.fallback_ops) or "none")]
    if tr.untransformed_calls:
        lines.append(f"({tr.untransformed_calls} formula call(s) with no transform active, the "
                     "per-sample reference loop, are not shown)")
    if tr.hidden_ops:
        lines.append(f"({tr.hidden_ops} torch call(s) the strategy made with the transforms cleared "
                     "or under make_fx, i.e. tracing the formula, are not shown)")
    if tr.fallback_ops and not any(e.fallback_loop or e.vmap_handling == "fallback" for e in tr.events):
        lines.append("(the fallback warnings come from outside the recorded formula calls, e.g. "
                     "torch's built-in backward of the formula's own ops)")
    if not tr.calls and tr.status != "not_applicable":
        lines.append(f"no formula call was observed: strategy {tr.strategy!r} did not call "
                     "run_formula under a transform (e.g. torch's own C++ backward)")
    return lines


def _shapes(shapes: list[list[int]]) -> str:
    return ", ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)


def _tree_lines(nodes: list[DispatcherNode], depth: int, out: list[str], budget: list[int]) -> None:
    for n in nodes:
        if budget[0] <= 0:
            out.append("  " * depth + "...")
            return
        budget[0] -= 1
        note = f"   <- {n.note}" if n.note else ""
        out.append("  " * depth + f"{n.name} {_shapes(n.shapes)}".rstrip() + note)
        _tree_lines(n.children, depth + 1, out, budget)


def _arg_label(t: TensorArg) -> str:
    return "self" if t.position == "0" else f"arg {t.position}"


def _render_text(tr: Trace) -> str:
    lines = _header(tr)
    failing = tr.failing_event
    for call in tr.calls:
        lines += ["", f"formula call {call.index + 1} under {call.stack}"]
        if call.error and not any(tr.events[i].error == call.error for i in call.events):
            lines.append(f"  raised: {call.error}")
        for i in call.events:
            ev = tr.events[i]
            mark = ">>> " if ev is failing else "    "
            lines.append(f"{mark}#{ev.index + 1} {ev.op}" + (f"  [{ev.aten}]" if ev.aten else "")
                         + ("   <== FAILING CALL" if ev is failing else ""))
            lines.append(f"        stack: {ev.stack}")
            lines.append(f"        tls include: {_short_tls(ev.tls_include)} | exclude: "
                         f"{_short_tls(ev.tls_exclude)}")
            for t in ev.tensors:
                lines.append(f"        {_arg_label(t)}: {t.chain_text}   keys: {t.keys}")
            lines.append(f"        {_handling_text(ev)}")
            if ev.error:
                lines.append(f"        raised: {ev.error}")
            if ev.explanation:
                lines.append(f"        why: {ev.explanation}")
            if ev.dispatcher:
                lines.append("        dispatcher ops (torch.profiler):")
                _tree_lines(ev.dispatcher, 5, lines, [_TREE_LIMIT])
        if call.unattributed:
            lines.append(f"  dispatcher ops outside the recorded calls: {_count(call.unattributed)}"
                         " (e.g. the strategy tracing the formula; see the HTML view)")
    return "\n".join(lines)


def _count(nodes: list[DispatcherNode]) -> int:
    return sum(1 + _count(n.children) for n in nodes)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}
tr.failing td{background:#ffd9d9}
tr.failing td:first-child{border-left:4px solid #c00}
tr.why td{background:#fff0f0}
code,.mono{font-family:ui-monospace,monospace}
.fallback{color:#a05a00;font-weight:600}
.rule{color:#176b2c}
details ul{font-family:ui-monospace,monospace;font-size:12px;margin:0;padding-left:1.2em}
.note{color:#a05a00;font-weight:600}
"""


def _tree_html(nodes: list[DispatcherNode], budget: list[int]) -> str:
    items = []
    for n in nodes:
        if budget[0] <= 0:
            items.append("<li>...</li>")
            break
        budget[0] -= 1
        note = f' <span class="note">&larr; {html.escape(n.note)}</span>' if n.note else ""
        kids = _tree_html(n.children, budget) if n.children else ""
        items.append(f"<li>{html.escape(n.name)} {html.escape(_shapes(n.shapes))}{note}{kids}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _details(summary: str, nodes: list[DispatcherNode]) -> str:
    return (f"<details><summary>{html.escape(summary)}</summary>"
            f"{_tree_html(nodes, [_TREE_LIMIT])}</details>")


def _event_row(ev: TraceEvent, failing: bool) -> str:
    esc = html.escape
    args = "<br>".join(
        f"<b>{esc(_arg_label(t))}</b>: <span class='mono'>{esc(t.chain_text)}</span>"
        f"<br><small>{esc(t.keys)}</small>" for t in ev.tensors)
    cls = {"fallback": "fallback", "batching rule": "rule"}.get(ev.vmap_handling, "")
    tls = (f"<small>include: {esc(_short_tls(ev.tls_include))}<br>"
           f"exclude: {esc(_short_tls(ev.tls_exclude))}</small>")
    ops = _details(f"{_count(ev.dispatcher)} dispatcher ops", ev.dispatcher) if ev.dispatcher else ""
    row = (f"<tr{' class=failing' if failing else ''}><td>{ev.index + 1}</td>"
           f"<td><code>{esc(ev.op)}</code><br><small>{esc(ev.aten)}</small>"
           f"{'<br><b>FAILING CALL</b>' if failing else ''}</td>"
           f"<td class='mono'>{esc(ev.stack)}</td><td>{args}</td>"
           f"<td class='{cls}'>{esc(_handling_text(ev))}{ops}</td><td>{tls}</td></tr>")
    notes = [f"raised: {ev.error}" if ev.error else "", f"why: {ev.explanation}" if ev.explanation else ""]
    if any(notes):
        row += ("<tr class='why'><td></td><td colspan='5'>"
                + "<br>".join(esc(n) for n in notes if n) + "</td></tr>")
    return row


_FRAGMENT_CSS = (
    # columns sized by their content and wrapped only between words (a fixed layout with
    # overflow-wrap:anywhere cut op names mid-word); a trace wider than its box scrolls in it
    ".funcbwd-trace table{border-collapse:collapse;font-size:12px;width:100%;table-layout:auto}"
    ".funcbwd-trace th,.funcbwd-trace td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;"
    "text-align:left;overflow-wrap:normal}"
    ".funcbwd-trace th{background:#f0f0f0}.funcbwd-trace tr.failing td{background:#ffd9d9}"
    ".funcbwd-trace tr.failing td:first-child{border-left:4px solid #c00}"
    ".funcbwd-trace tr.why td{background:#fff0f0}"
    ".funcbwd-trace code,.funcbwd-trace .mono{font-family:ui-monospace,monospace}"
    ".funcbwd-trace .fallback{color:#a05a00;font-weight:600}.funcbwd-trace .rule{color:#176b2c}"
    ".funcbwd-trace details ul{font-family:ui-monospace,monospace;font-size:12px;margin:0;"
    "padding-left:1.2em;overflow-wrap:normal}.funcbwd-trace .note{color:#a05a00;font-weight:600}"
    ".funcbwd-trace th:first-child{width:2.5em}")


def _render_html(tr: Trace, document: bool = True) -> str:
    esc = html.escape
    header = _header(tr)
    failing = tr.failing_event
    if document:
        parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(header[0])}</title>"
                 f"<style>{_CSS}</style></head><body>", f"<h2>{esc(header[0])}</h2>"]
    else:
        parts = [f"<div class='funcbwd-trace'><style>{_FRAGMENT_CSS}</style>",
                 f"<h4>{esc(header[0])}</h4>"]
    parts += [f"<p>{esc(line)}</p>" for line in header[1:]]
    for call in tr.calls:
        parts.append(f"<h3>formula call {call.index + 1} under <code>{esc(call.stack)}</code></h3>")
        parts.append("<table><tr><th>#</th><th>op</th><th>interpreter stack</th>"
                     "<th>tensor args: wrapper chain / key set</th><th>vmap handling</th>"
                     "<th>dispatch TLS</th></tr>")
        parts += [_event_row(tr.events[i], tr.events[i] is failing) for i in call.events]
        parts.append("</table>")
        if call.unattributed:
            parts.append(_details(f"{_count(call.unattributed)} dispatcher ops outside the recorded "
                                  "calls (e.g. the strategy tracing the formula)", call.unattributed))
    parts.append("</body></html>" if document else "</div>")
    return "\n".join(parts)

