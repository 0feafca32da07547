"""What torch.compile does with the legacy formulas under the transforms, per backend.

* :func:`outcomes`: every backend x test op x scenario on the op's first sample, each cell through
  the cell runner (:func:`funcbwd_lab.run.runner.run`, compared with the per-sample loop) under the
  ``compiled`` strategy of that backend, with what dynamo did (:class:`CompileReport` s of the
  cell's compiled calls): graphs, whether a graph holds the transform and the legacy op with its
  backward, graph breaks and where, the stage a failure came from.
* :func:`drop_probe`: the control that explains the passes. A minimal ``autograd.Function`` for
  ``diag`` written the way dynamo's docs ask (``forward(x, k)``, ``setup_context``) whose backward
  is deliberately *twice* the right gradient: eager ``vjp`` returns twice torch's gradient (the
  custom backward runs); compiled, the result is torch's own gradient (the backward was dropped,
  pytorch#193279). The same Function with the historical in-place backward fails in eager
  ``vmap(vjp)`` and "passes" compiled, on torch's formula.
* :func:`registered_row`: the registered ``compiled`` (aot_eager) over every sample, summarized
  as the matrix does (what the reviewed expectations of :mod:`funcbwd_lab.studies.matrix.expectations` see).
* :func:`vjp_fn_outcomes`: the other way to ask the question, ``torch.compile(vmap(vjp_fn))`` with
  ``vjp_fn`` made eagerly (the first try reported in the review): compared with the loop.

Every compiled call runs in a fresh compiler state
(:func:`funcbwd.internals.dynamo.fresh_compiler`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch
from torch.func import vjp, vmap

from funcbwd.errors import first_line
from funcbwd_lab.ops import registry
from funcbwd_lab.studies.matrix import matrix
from funcbwd.compare import check_close, max_abs_error
from funcbwd_lab.run.outcomes import classify
from funcbwd_lab.run.runner import run
from funcbwd_lab.run.scenario import bind, loop_vjp, output_shapes, stack_loop
from funcbwd_lab.run.scenarios import BACKWARD_NAMES
from funcbwd_lab.strategies import get_strategy
from funcbwd_lab.strategies.compiled import (BACKENDS, Compiled, CompileReport, collecting_reports,
                                         compile_call, for_backend)

ROW_KEYS = ("backend", "op", "sample", "scenario", "status", "reason", "error_class", "message",
            "mechanism_ran", "verdict", "calls", "graphs", "transform_in_graph",
            "function_in_graph", "graph_breaks", "breaks_inside_transform", "first_break",
            "first_break_inside_transform", "error_stage", "error", "seconds")


def _summarize(reports: Sequence[CompileReport]) -> dict[str, Any]:
    """One cell's compiled calls (one per in_dims choice in vmap_all_args) as one row's fields;
    the error is the last call's (the cell stops at the first call that fails)."""
    breaks = [b for r in reports for b in r.graph_breaks]
    inside = [b for b in breaks if b.inside_transform]
    last = reports[-1] if reports else CompileReport("?")
    return {
        "calls": len(reports),
        "graphs": sum(r.graphs for r in reports),
        "transform_in_graph": bool(reports) and all(r.transform_in_graph for r in reports),
        "function_in_graph": any(r.function_in_graph for r in reports),
        "graph_breaks": len(breaks),
        "breaks_inside_transform": sum(b.inside_transform for b in breaks),
        "first_break": f"{breaks[0].where}: {breaks[0].reason}" if breaks else "",
        # the break that split the transform (what made it run eagerly), if any
        "first_break_inside_transform": f"{inside[0].where}: {inside[0].reason}" if inside else "",
        "error_stage": last.error_stage,
        "error": last.error,
    }


def outcome(backend: str, op: str, scenario: str, sample: str | None = None) -> dict[str, Any]:
    """One cell (the op's first sample unless named) under ``compiled`` with ``backend``."""
    st = for_backend(backend)
    with collecting_reports() as reports:
        r = run(op, scenario, st, sample)
    row = {"backend": backend, "op": r.op, "sample": r.sample, "scenario": r.scenario,
           "status": r.status, "reason": r.reason, "error_class": r.error_class,
           "message": r.message, "mechanism_ran": r.mechanism_ran, "verdict": r.mechanism,
           "seconds": round(r.seconds, 3), **_summarize(reports)}
    return {k: row[k] for k in ROW_KEYS}


def outcomes(backends: Iterable[str] = BACKENDS, ops: Iterable[str] = registry.TEST_OPS,
             scenarios: Iterable[str] = BACKWARD_NAMES,
             progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Every backend x op x scenario cell on each op's first sample (:func:`outcome`)."""
    rows = []
    for backend in backends:
        for op in ops:
            for sc in scenarios:
                rows.append(outcome(backend, op, sc))
                if progress:
                    progress(rows[-1])
    return rows


def backend_differences(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells whose (status, reason, mechanism_ran, error stage) differ between backends."""
    by_cell: dict[tuple, dict[str, tuple]] = {}
    for r in rows:
        by_cell.setdefault((r["op"], r["sample"], r["scenario"]), {})[r["backend"]] = (
            r["status"], r["reason"], r["mechanism_ran"], r["error_stage"])
    return [{"op": k[0], "sample": k[1], "scenario": k[2], "by_backend": {b: list(v) for b, v in d.items()}}
            for k, d in by_cell.items() if len(set(d.values())) > 1]


def registered_row(ops: Iterable[str] = registry.TEST_OPS, scenarios: Iterable[str] = BACKWARD_NAMES,
                   progress: Callable[[Any], None] | None = None) -> list[dict[str, Any]]:
    """The registered ``compiled`` row over every sample, summarized per op x scenario as the
    matrix and the reviewed expectations see it (:func:`funcbwd_lab.studies.matrix.matrix.summarize`: worst
    status over the samples, ``mechanism_ran`` in every applicable sample)."""
    cells = matrix.run_matrix(list(ops), list(scenarios), [Compiled.name], progress=progress)
    summary = matrix.summarize(cells)
    return [{"op": op, "scenario": sc, **{k: v for k, v in cell.items() if k != "fallback_ops"}}
            for (op, sc, _), cell in summary.items()]


# ------------------------------------------------------------------------------ the control
def _probe_function(inplace: bool) -> type[torch.autograd.Function]:
    """diag as dynamo's docs ask for an autograd.Function (explicit forward signature,
    setup_context); backward: the historical in-place formula, or (``inplace`` False) an
    out-of-place one deliberately scaled by 2, so that whether it ran shows in the numbers."""

    def forward(x: torch.Tensor, k: int) -> torch.Tensor:
        return torch.diag(x, k)

    def setup_context(ctx, inputs, output) -> None:
        ctx.shape, ctx.k = inputs[0].shape, inputs[1]

    def backward(ctx, g: torch.Tensor):
        if inplace:
            out = torch.zeros(ctx.shape, dtype=g.dtype)
            out.diagonal(ctx.k).copy_(g)
            return out, None
        return 2 * torch.diagonal_scatter(torch.zeros(ctx.shape, dtype=g.dtype), g, ctx.k), None

    name = "ProbeDiagInplace" if inplace else "ProbeDiagTwice"
    return type(name, (torch.autograd.Function,), {
        "generate_vmap_rule": True, "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context), "backward": staticmethod(backward)})


def _vmap_vjp(fn: Callable, x: torch.Tensor, k: int) -> Callable:
    def composed(cts: torch.Tensor) -> tuple:
        _, vjp_fn = vjp(lambda t: fn(t, k), x)
        return vmap(vjp_fn)(cts)

    return composed


def _attempt(f: Callable[[], Any]) -> tuple[Any, str]:
    try:
        return f(), ""
    except Exception as e:  # noqa: BLE001 - a failure is a finding
        return None, f"{type(e).__name__}: {first_line(str(e), 160)}"


def drop_probe(backends: Iterable[str] = BACKENDS) -> list[dict[str, Any]]:
    """For each probe Function (backward twice the gradient; backward in place) and each backend:
    eager and compiled ``vmap(vjp)`` of diag (3x5, k=1, batch 4), each compared with torch's own
    gradient (``torch.diag``) and with twice it."""
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    cts = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    (torch_grad,) = _vmap_vjp(torch.diag, x, 1)(cts)
    rows = []
    for inplace in (False, True):
        fn = _probe_function(inplace).apply
        composed = _vmap_vjp(fn, x, 1)

        def compare(out: Any, error: str) -> dict[str, Any]:
            if error:
                return {"error": error}
            return {"err_vs_torch": max_abs_error(out, (torch_grad,)),
                    "err_vs_twice_torch": max_abs_error(out, (2 * torch_grad,))}

        eager = compare(*_attempt(lambda: composed(cts)))
        for backend in backends:
            out, error = _attempt(lambda: compile_call(composed, backend, cts))
            report = out[1] if out else None
            rows.append({"backward": "in place (historical)" if inplace else "2x gradient",
                         "backend": backend, "eager": eager,
                         "compiled": compare(out[0] if out else None, error),
                         "verdict": report.verdict() if report else "",
                         "function_in_graph": bool(report and report.function_in_graph)})
    return rows


# ------------------------------------------------------------------------------ vmap(vjp_fn) only
def vjp_fn_outcome(backend: str, op: str) -> dict[str, Any]:
    """``torch.compile(vmap(vjp_fn))(cotangents)`` with ``vjp_fn`` from an eager ``vjp`` of the
    legacy op (plain: the formula as written), batch 3, compared with the per-sample loop."""
    spec, plain = registry.get_op(op), get_strategy("plain")
    s = spec.samples()[0]
    dtype = s.args[s.diff[0]].dtype
    cts = tuple(torch.randn((3, *sh), generator=torch.Generator().manual_seed(100 + i), dtype=dtype)
                for i, sh in enumerate(output_shapes(spec, s)))
    _, vjp_fn = vjp(bind(spec, plain, s.args, s.diff), *[s.args[p] for p in s.diff])
    expected = stack_loop([loop_vjp(spec, plain, s.args, s.diff, [c[b] for c in cts]) for b in range(3)])
    row: dict[str, Any] = {"backend": backend, "op": op, "sample": s.name}
    try:
        out, report = compile_call(lambda *c: vmap(lambda *ci: vjp_fn(ci))(*c), backend, *cts)
        check_close(tuple(out), expected)
        row.update(status="pass", reason="", message="")
    except Exception as e:  # noqa: BLE001 - every failure is a classified row
        report = getattr(e, "compile_report", None)
        status = "mismatch" if isinstance(e, AssertionError) else "fail"
        row.update(status=status, reason="" if status == "mismatch" else classify(e),
                   message=first_line(str(e), 160))
    row.update(verdict=report.verdict() if report else "", **_summarize([report] if report else []))
    return row


def vjp_fn_outcomes(backends: Iterable[str] = BACKENDS, ops: Iterable[str] = registry.TEST_OPS,
                    progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    rows = []
    for backend in backends:
        for op in ops:
            rows.append(vjp_fn_outcome(backend, op))
            if progress:
                progress(rows[-1])
    return rows
