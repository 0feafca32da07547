"""FX graphs of a backward formula in each form, diffs between forms, and copy accounting.

Forms of one op's backward for one sample (cotangent of the output's shape):

* ``plain``: the legacy formula as written (``make_fx`` without functionalize: in-place ops stay);
* ``functionalized``: ``make_fx(torch.func.functionalize(formula))`` (what per_formula runs);
* ``traced``: functionalized, then :func:`funcbwd.fx.elide.elide_copies` (what the traced strategy runs);
* ``builtin``: torch's modern backward, ``make_fx`` of the ``vjp_fn`` of ``op.torch_op``.

With ``vmap=True`` each form is captured as ``make_fx(vmap(form))`` over a batch of cotangents, so
the graph shows what vmap turned it into: batched ops, or vmap's slow fallback as a per-sample
loop of ``select`` / op / ``stack``; ``plain`` under vmap fails and the capture shows the error.
This answers "the copies seem scary" (functorch#241) with counted copies and bytes.
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
import html
import inspect
import keyword
import re
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from funcbwd.fx import elide
from funcbwd_lab.ops import registry
from funcbwd_lab.run.scenario import torch_bind
from funcbwd.errors import BadInputError, UnknownNameError, first_line
from funcbwd.fx.formula_graphs import flatten_args, formula_args_for, trace_formula
from funcbwd_lab.tables import WIDTH, paragraph, shorten, table

FORMS = ("plain", "functionalized", "traced", "builtin")
#: strategy name -> the form of the formula graph it runs under vmap (for bench's copy section).
#: whole/hooks/composite functionalize the formula too (whole/hooks also torch's own nodes,
#: which these graphs do not include).
STRATEGY_FORMS = {"plain": "plain", "builtin": "builtin", "per_formula": "functionalized",
                  "traced": "traced", "whole": "functionalized", "hooks": "functionalized",
                  "composite": "functionalized"}


def check_form(form: str) -> str:
    if form in FORMS:
        return form
    if form in STRATEGY_FORMS:
        return STRATEGY_FORMS[form]
    raise UnknownNameError("form", form, list(FORMS) + [s for s in STRATEGY_FORMS if s not in FORMS])


# ------------------------------------------------------------------------------ capture
@dataclasses.dataclass
class GraphCapture:
    """One captured graph (or the error that prevented it)."""

    op: str
    form: str
    sample: str
    vmap: bool
    graph_module: torch.fx.GraphModule | None
    code: str
    nodes: list[tuple[str, list[tuple[int, ...]]]]  # (aten op name, output shapes) per call
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.graph_module is not None

    @property
    def title(self) -> str:
        return f"{self.op} [{self.sample}] {self.form}{' under vmap' if self.vmap else ''}"

    def op_names(self) -> list[str]:
        return [n for n, _ in self.nodes]

    def count(self, name: str) -> int:
        """Calls of ``name`` (an overload packet like 'copy' or 'aten::copy')."""
        name = name.split("::")[-1]
        return sum(1 for n in self.op_names() if n.split("::")[-1].split(".")[0] == name)


def _target_name(node: torch.fx.Node) -> str:
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    return getattr(node.target, "__name__", str(node.target))


def _shapes(val: Any) -> list[tuple[int, ...]]:
    vals = val if isinstance(val, (tuple, list)) else [val]
    return [tuple(v.shape) for v in vals if isinstance(v, torch.Tensor)]


def _rename_inputs(gm: torch.fx.GraphModule, names: Sequence[str]) -> None:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, names):
        if name == "self" or keyword.iskeyword(name) or hasattr(builtins, name):
            name += "_"  # clamp's `self`, `min`, `max` must not shadow Python names in the code
        node._rename(name)
        node.target = node.name
    gm.recompile()


def _make_capture(op, form, sample, vmap, gm, names) -> GraphCapture:
    _rename_inputs(gm, names)
    nodes = [(_target_name(n), _shapes(n.meta.get("val"))) for n in gm.graph.nodes
             if n.op == "call_function"]
    return GraphCapture(op.name, form, sample.name, vmap, gm, gm.code.strip("\n"), nodes)


def _leaf_names(formula: Callable, args: tuple) -> list[str]:
    """A name per tensor leaf of ``args``: the formula's parameter name (``grad``, ``indices``)."""
    params = list(inspect.signature(formula).parameters)
    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        leaves = flatten_args((a,)).tensors
        names += [base] if len(leaves) == 1 else [f"{base}{j}" for j in range(len(leaves))]
    return names


def _cotangents(op, sample, batch: int | None, seed: int = 0) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        outs = op.diff_out(op.torch_op(*sample.args))
    g = torch.Generator().manual_seed(seed)
    lead = (batch,) if batch else ()
    return tuple(torch.randn(lead + tuple(o.shape), generator=g, dtype=o.dtype) for o in outs)


def _capture_formula(op, form: str, sample, vmap: bool, batch: int) -> tuple[torch.fx.GraphModule, list[str]]:
    cts = _cotangents(op, sample, None)
    args = formula_args_for(op, sample, cts)
    if form in ("functionalized", "traced"):
        gm = trace_formula(op.formula, args, functionalize=True, elide_copies=form == "traced")
    else:
        gm = trace_formula(op.formula, args, functionalize=False)
    flat = flatten_args(args)
    if not vmap:
        return gm, _leaf_names(op.formula, args)
    # vmap over the cotangents only: the leaves that *are* the cotangents get in_dim 0.
    in_dims = tuple(0 if any(t is c for c in cts) else None for t in flat.tensors)
    if 0 not in in_dims:
        raise BadInputError(f"{op.name}: formula_args does not pass the cotangent through as a "
                            "tensor arg, so the graph cannot be vmapped over it")
    batched = _cotangents(op, sample, batch)
    inputs, k = [], 0
    for t, d in zip(flat.tensors, in_dims):
        inputs.append(batched[k] if d == 0 else t)
        k += d == 0
    vgm = make_fx(torch.func.vmap(gm, in_dims=in_dims), tracing_mode="fake")(*inputs)
    return vgm, _leaf_names(op.formula, args)


def _capture_builtin(op, sample, vmap: bool, batch: int) -> tuple[torch.fx.GraphModule, list[str]]:
    primals = [sample.args[p] for p in sample.diff]

    f = torch_bind(op, sample.args, sample.diff)
    # The forward runs eagerly; only the backward is traced (saved tensors become constants).
    _, vjp_fn = torch.func.vjp(f, *primals)
    cts = _cotangents(op, sample, batch if vmap else None)
    fn = (lambda *c: vjp_fn(c))
    gm = make_fx(torch.func.vmap(fn) if vmap else fn, tracing_mode="real")(*cts)
    names = ["grad"] if len(cts) == 1 else [f"grad{i}" for i in range(len(cts))]
    return gm, names


def capture(op: str | registry.OpSpec, form: str, sample: str | registry.Sample | None = None,
            vmap: bool = False, batch: int = 4) -> GraphCapture:
    """The FX graph of ``op``'s backward in ``form`` for ``sample`` (default: the first).

    A form that cannot be captured (plain under vmap, a data-dependent formula) gives a capture
    with ``error`` set and no graph, so views can show the error instead of hiding the form."""
    spec = registry.get_op(op) if isinstance(op, str) else op
    form = check_form(form)
    smp = sample if isinstance(sample, registry.Sample) else spec.sample(sample)
    if not isinstance(batch, int) or batch < 1:
        raise BadInputError(f"batch must be a positive int, got {batch!r}")
    try:
        if form == "builtin":
            gm, names = _capture_builtin(spec, smp, vmap, batch)
        else:
            gm, names = _capture_formula(spec, form, smp, vmap, batch)
    except BadInputError:
        raise
    except Exception as e:  # noqa: BLE001 - shown, not hidden: the form cannot be captured
        msg = str(e).strip().splitlines()
        err = f"{type(e).__name__}: {msg[0] if msg else ''}"
        return GraphCapture(spec.name, form, smp.name, vmap, None, f"# capture failed: {err}", [], err)
    return _make_capture(spec, form, smp, vmap, gm, names)


# ------------------------------------------------------------------------------ diffs
_DEALLOC = re.compile(r";\s+[\w\s=]+= None\s*$")


def normalize_code(code: str) -> list[str]:
    """Graph code lines without blank lines and the ``; x = y = None`` deallocation tails."""
    out = []
    for line in code.splitlines():
        line = _DEALLOC.sub("", line.rstrip())
        if line.strip():
            out.append(line)
    return out


@dataclasses.dataclass
class GraphDiff:
    a: GraphCapture
    b: GraphCapture

    def lines(self) -> tuple[list[str], list[str]]:
        return normalize_code(self.a.code), normalize_code(self.b.code)

    def unified(self, context: int = 3) -> str:
        la, lb = self.lines()
        return "\n".join(difflib.unified_diff(la, lb, self.a.title, self.b.title, lineterm="",
                                              n=context))

    def added(self) -> list[str]:
        return [ln[1:] for ln in self.unified(0).splitlines()[2:] if ln.startswith("+")]

    def removed(self) -> list[str]:
        return [ln[1:] for ln in self.unified(0).splitlines()[2:] if ln.startswith("-")]

    def html(self) -> str:
        """Side-by-side table, removed lines red, added lines green; self-contained HTML."""
        la, lb = self.lines()
        rows = []
        sm = difflib.SequenceMatcher(a=la, b=lb, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            left, right = la[i1:i2], lb[j1:j2]
            for k in range(max(len(left), len(right))):
                lt = left[k] if k < len(left) else ""
                rt = right[k] if k < len(right) else ""
                lc = "" if tag == "equal" or not lt else "del"
                rc = "" if tag == "equal" or not rt else "add"
                rows.append(f"<tr><td class='{lc}'>{html.escape(lt)}</td>"
                            f"<td class='{rc}'>{html.escape(rt)}</td></tr>")
        return (
            "<div class='funcbwd-graphdiff'><style>"
            ".funcbwd-graphdiff table{border-collapse:collapse;font:12px monospace;width:100%;"
            "table-layout:fixed}"
            # long graph lines wrap inside their half, so the "after" column is never cut off
            ".funcbwd-graphdiff td{white-space:pre-wrap;overflow-wrap:anywhere;vertical-align:top;"
            "padding:1px 6px;border-right:1px solid #ccc;width:50%}"
            ".funcbwd-graphdiff th{text-align:left;padding:2px 6px;background:#eee}"
            ".funcbwd-graphdiff td.del{background:#fdd}.funcbwd-graphdiff td.add{background:#dfd}"
            "</style><table>"
            f"<tr><th>{html.escape(self.a.title)}</th><th>{html.escape(self.b.title)}</th></tr>"
            + "".join(rows) + "</table></div>"
        )

    def _repr_html_(self) -> str:
        return self.html()


def diff(op: str | registry.OpSpec, a: str, b: str, vmap: bool = False,
         sample: str | registry.Sample | None = None, batch: int = 4) -> GraphDiff:
    """Diff of ``op``'s backward graph in form ``a`` against form ``b``."""
    return GraphDiff(capture(op, a, sample, vmap, batch), capture(op, b, sample, vmap, batch))


def formula_diff(op: str, a: str = "plain", b: str = "traced", vmap: bool = False) -> GraphDiff:
    """The default view: the formula as written against what the traced strategy runs."""
    return diff(op, a, b, vmap)


# ------------------------------------------------------------------------------ copy accounting
_COPY_PACKETS = ("copy", "copy_", "clone")


def copy_kind(name: str, vmap: bool) -> str | None:
    """Why an aten op counts as a copy, or None: copy/copy_/clone, ``*_scatter`` (a full-size
    rewrite of a base), or ``stack`` under vmap (vmap's slow fallback stacks per-sample results)."""
    packet = name.split("::")[-1].split(".")[0]
    if packet in _COPY_PACKETS:
        return packet
    if packet.endswith("_scatter") and packet != "masked_scatter":
        return "*_scatter"
    if vmap and packet == "stack":
        return "stack (fallback loop)"
    return None


@dataclasses.dataclass
class CopyStats:
    """Copy-like ops of one capture and the bytes they write (from fake-tensor metadata)."""

    op: str
    form: str
    label: str
    sample: str
    vmap: bool
    copies: int
    copy_bytes: int
    written_bytes: int  # every non-view op's output bytes, copies included
    by_op: dict[str, list[int]]  # aten name -> [count, bytes]
    error: str = ""


def _is_view_node(node: torch.fx.Node) -> bool:
    return elide._is_view(node)


def _nbytes(val: Any) -> int:
    vals = val if isinstance(val, (tuple, list)) else [val]
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def stats_of(cap: GraphCapture, label: str | None = None) -> CopyStats:
    stats = CopyStats(cap.op, cap.form, label or cap.form, cap.sample, cap.vmap, 0, 0, 0, {},
                      cap.error)
    if not cap.ok:
        return stats
    for node in cap.graph_module.graph.nodes:
        if node.op != "call_function" or _is_view_node(node):
            continue
        name = _target_name(node)
        nbytes = _nbytes(node.meta.get("val"))
        stats.written_bytes += nbytes
        if copy_kind(name, cap.vmap):
            stats.copies += 1
            stats.copy_bytes += nbytes
            entry = stats.by_op.setdefault(name, [0, 0])
            entry[0] += 1
            entry[1] += nbytes
    return stats


def copy_accounting(op: str | registry.OpSpec, form: str, sample: str | registry.Sample | None = None,
                    vmap: bool = False, batch: int = 4) -> CopyStats:
    """Copy counts and bytes of ``op``'s backward in ``form`` (a form or a strategy name)."""
    return stats_of(capture(op, form, sample, vmap, batch), label=form)


def copy_table(ops: Iterable[str] | None = None, forms: Sequence[str] = ("plain", "functionalized", "traced"),
               vmap: bool = False, batch: int = 4) -> list[dict[str, Any]]:
    """One row per op x form (first sample): copies and bytes, and the excess over builtin."""
    names = list(ops) if ops is not None else registry.op_names("test")
    rows = []
    for name in names:
        base = copy_accounting(name, "builtin", vmap=vmap, batch=batch)
        for form in list(forms) + ["builtin"]:
            s = base if form == "builtin" else copy_accounting(name, form, vmap=vmap, batch=batch)
            ok = not s.error and not base.error
            rows.append({
                "op": name, "form": s.form, "vmap": vmap, "sample": s.sample,
                "copies": s.copies if not s.error else None,
                "copy_bytes": s.copy_bytes if not s.error else None,
                "written_bytes": s.written_bytes if not s.error else None,
                "extra_copies": s.copies - base.copies if ok else None,
                "extra_copy_bytes": s.copy_bytes - base.copy_bytes if ok else None,
                "extra_written_bytes": s.written_bytes - base.written_bytes if ok else None,
                "copy_ops": ", ".join(f"{k} x{v[0]}" for k, v in s.by_op.items()),
                "error": s.error,
            })
    return rows


def format_copy_table(rows: Sequence[dict[str, Any]], width: int = WIDTH) -> str:
    """The rows of :func:`copy_table` as a text table fitting ``width`` columns (``-``: not
    counted; copy ops without their ``aten::`` namespace); a row whose capture failed says
    ``error (k)`` in its copy ops column, the error's first line is footnote k under the table."""
    cols = ["op", "form", "copies", "copy_bytes", "extra_copies", "extra_copy_bytes",
            "written_bytes", "extra_written_bytes", "copy_ops"]
    notes: list[str] = []
    text = []
    for r in rows:
        note = shorten(first_line(r["error"], 10_000), 300) if r["error"] else ""
        if note and note not in notes:
            notes.append(note)
        text.append([(f"error ({notes.index(note) + 1})" if note else r[c].replace("aten::", ""))
                     if c == "copy_ops" else ("-" if r[c] is None else str(r[c])) for c in cols])
    head = [c.replace("_", " ") for c in cols[:-1]] + ["copy ops (aten::)"]
    out = table(head, text, width=width, align="llrrrrrr")
    return "\n".join([out] + [paragraph(f"({k}) {n}", width, "", "    ")
                               for k, n in enumerate(notes, 1)])


def stats_line(s: CopyStats) -> str:
    """One line: the copy-like ops of a capture and the bytes they write (or why no graph)."""
    if s.error:
        return f"{s.form}: no graph ({s.error})"
    ops = ", ".join(f"{k} x{v[0]} ({v[1]} B)" for k, v in s.by_op.items()) or "none"
    return (f"{s.form}: {s.copies} copy-like op(s), {s.copy_bytes} B copied, "
            f"{s.written_bytes} B written in all; {ops}")
