"""The doctor's findings: culprit lines, the functionalized graph diff, and the 100-column text.

* **culprit**: the innermost frame of the exception's traceback that lies in the user's source
  file (file:line and the line's text): the in-place call that broke, as torch raised it;
* **graph diff**: the function traced as written (:func:`funcbwd.fx.tracer.trace`) lists its
  in-place aten calls; traced functionalized, and then with copies elided, the ops that are new
  against the function as written, e.g. ``copy_ -> copy + slice_scatter x2 -> slice_scatter x2``;
* **verdict**: per transform: plain, with the in-place mode (``funcbwd.allow_inplace()``, what
  ``funcbwd.vmap`` does) and wrapped (:func:`funcbwd.functionalized`), each checked against the
  per-sample loop (:mod:`funcbwd.doctor.checks`); the recommendation is the first tool that fixes
  every requested transform (the mode needs no code change, so it comes first).

A ``torch.autograd.Function`` subclass as target runs as ``cls.apply``; wrapped, as
``functionalized(cls).apply`` (old-style classes converted).
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import linecache
import os
import textwrap
import traceback
from typing import Any, Callable

import torch

from funcbwd import internals
from funcbwd.doctor import checks
from funcbwd.errors import first_line
from funcbwd.fx import elide, tracer
from funcbwd.fx import formula_graphs as FG
from funcbwd.decorator import functionalized

WIDTH = 100


@dataclasses.dataclass
class Row:
    transform: str
    plain: checks.Outcome
    wrapped: checks.Outcome
    mode: checks.Outcome = dataclasses.field(default_factory=lambda: checks.Outcome("unknown"))
    #: ``path:line`` of the first in-place call that broke (plain), and that line's code
    culprit: str = ""
    culprit_code: str = ""


def culprit(error: BaseException | None, source_file: str | None) -> tuple[str, str]:
    """(``file:line``, code) of the innermost traceback frame in ``source_file`` (('', '') if
    none)."""
    if error is None or not source_file:
        return "", ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == source_file]
    if not frames:
        return "", ""
    f = frames[-1]
    code = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    return f"{_shown(f.filename)}:{f.lineno}", code


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it lies at most two levels up."""
    rel = os.path.relpath(path)
    return path if rel.startswith(os.path.join("..", "..", "..")) else rel


def _ops(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def _counts(nodes: list[torch.fx.Node]) -> str:
    c = collections.Counter(n.target.overloadpacket.__name__ for n in nodes)
    return " + ".join(f"{k} x{v}" if v > 1 else k for k, v in c.items()) or "(nothing)"


def graph_diff(fn: Callable[..., Any], args: tuple) -> str:
    """One line: the in-place calls as written -> functionalized -> copies elided."""
    if isinstance(fn, type):
        return ("a custom autograd.Function: its backward is traced per signature when it runs "
                "under a transform")
    flat = FG.flatten_args(args)
    specs = [FG.tensor_spec(t) for t in flat.tensors]

    def flat_fn(*ts: torch.Tensor) -> Any:
        return fn(*flat.rebuild(ts))

    try:
        with internals.cleared_functorch_state():
            raw = tracer.trace(flat_fn, specs)
        entry = FG.build(fn, args, name=getattr(fn, "__name__", "fn"))
    except Exception as e:  # noqa: BLE001 - untraceable: say why
        return f"cannot trace: {type(e).__name__}: {first_line(str(e), 80)}"
    as_written = {n.target for n in _ops(raw)}
    inplace = _counts([n for n in _ops(raw) if n.target._schema.is_mutable])
    func = _counts([n for n in _ops(entry.functionalized) if n.target not in as_written])
    out = _counts([n for n in _ops(entry.graph) if n.target not in as_written])
    if inplace == "(nothing)":
        return "no in-place call as written (nothing for functionalization to change)"
    left = elide.count_targets(entry.graph)
    tail = "" if left else " (no aten.copy left)"
    return f"{inplace} -> {func} -> {out}{tail}"


def diagnose(fn: Callable[..., Any], args: tuple, transforms: list[str],
             progress: Callable[[str], None] = lambda s: None,
             batch: tuple[int, ...] | None = None) -> list[Row]:
    """Every requested transform: plain, with the in-place mode, and wrapped."""
    from funcbwd.transforms import allow_inplace

    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    if isinstance(fn, type):  # a custom Function: its apply is the function
        plain_fn, wrapped = (lambda *a: fn.apply(*a)), functionalized(fn, warn=False).apply
    else:
        plain_fn, wrapped = fn, functionalized(fn, warn=False)
    rows = []
    for name in transforms:
        progress(name)
        plain = checks.run_check(plain_fn, args, name, plain_fn, batch)
        mode = checks.run_check(plain_fn, args, name, plain_fn, batch, within=allow_inplace)
        fixed = checks.run_check(wrapped, args, name, plain_fn, batch)
        rows.append(Row(name, plain, fixed, mode, *culprit(plain.error, source)))
    return rows


#: what torch says when a custom autograd.Function, not an in-place call, is what breaks
_FUNCTION_TROUBLE = ("setup_context", "does not have vmap support", "custom_function_call")


def _function_trouble(detail: str) -> bool:
    return any(m in detail for m in _FUNCTION_TROUBLE)


def recommendation(rows: list[Row]) -> tuple[str, bool]:
    """(the verdict line, whether every requested transform works with a funcbwd tool)."""
    failing = [r for r in rows if not r.plain.ok]
    if not failing:
        unknown = [r.transform for r in rows if r.plain.status == "unknown"]
        return ("every requested transform works plain: nothing to fix" if not unknown else
                f"no reference for {', '.join(unknown)} (see above); the rest works plain"), True
    mode_all = all(r.mode.ok or r.plain.ok for r in rows)
    wrapped_all = all(r.wrapped.ok or r.plain.ok for r in rows)
    n = len(failing)
    fixed_mode = sum(r.mode.ok for r in failing)
    fixed_wrapped = sum(r.wrapped.ok for r in failing)
    if mode_all:
        return (f"no code change needed: funcbwd.vmap (or `with funcbwd.allow_inplace():`) fixes "
                f"{fixed_mode} of {n} failing transforms (checked against a per-sample loop)"), True
    if wrapped_all:
        return (f"@funcbwd.functionalized fixes {fixed_wrapped} of {n} failing transforms "
                f"(the in-place mode {fixed_mode}; checked against a per-sample loop)"), True
    left = [r for r in rows if not (r.plain.ok or r.mode.ok or r.wrapped.ok)]
    still = [r.transform for r in left]
    unknown = [r.transform for r in left if "unknown" in (r.mode.status, r.wrapped.status)]
    text = (f"still failing with funcbwd.vmap and functionalized: {', '.join(still)}"
            if still else "each transform works with one tool, none with both: see the table")
    if unknown:
        text += f" (no reference to confirm: {', '.join(unknown)})"
    return text, not still


def render(target: str, rows: list[Row], diff: str) -> str:
    """The report ``python -m funcbwd doctor`` prints (lines fit :data:`WIDTH` columns)."""
    def wrap(text: str, indent: str = "    ") -> list[str]:
        return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")

    lines = [f"funcbwd doctor {target}"[:WIDTH]]
    lines += wrap(f"graph: {diff}", "  ")
    lines.append(f"  {'transform':<10} {'plain':<10} {'funcbwd.vmap':<14} functionalized")
    for r in rows:
        lines.append(f"  {r.transform:<10} {r.plain.status:<10} {r.mode.status:<14} "
                     f"{r.wrapped.status}")
        if not r.plain.ok:
            lines += wrap(f"plain: {r.plain.detail}")
            if r.culprit and _function_trouble(r.plain.detail):
                lines += wrap(f"a custom autograd.Function called at {r.culprit} has no vmap "
                              "support as written: decorate the class with "
                              "@funcbwd.functionalized (its backward then runs as a checked "
                              "graph), give it generate_vmap_rule = True, or run the transform "
                              "under funcbwd.vmap / allow_inplace (they convert it)")
                lines.append("      " + r.culprit_code[:WIDTH - 6])
            elif r.culprit:
                lines += wrap(f"first in-place call that broke: {r.culprit}")
                code = r.culprit_code
                lines.append("      " + (code if len(code) <= WIDTH - 6 else code[:WIDTH - 9] + "..."))
            if not r.mode.ok:
                lines += wrap(f"funcbwd.vmap: {r.mode.detail}")
            if not r.wrapped.ok:
                lines += wrap(f"functionalized: {r.wrapped.detail}")
    lines += wrap(recommendation(rows)[0], "")
    return "\n".join(ln.rstrip() for ln in lines)
