"""What compiling the transform costs on torch's own ops (the formulas torch.compile *can* run).

For each test op's builtin formula (torch's op, differentiated by torch's own backward) at the
first sample's size, and diag / index_select at the bench's "large" size
(:func:`funcbwd_lab.studies.bench.inputs.resize`), over ``batch`` cotangents, eager against
``torch.compile(..., backend=B, fullgraph=False, dynamic=False)`` of one of two callables
(:data:`VARIANTS`): the scenario's whole call (``vjp`` + ``vmap(vjp_fn)``), or only
``vmap(vjp_fn)`` with ``vjp_fn`` made eagerly (there dynamo breaks the graph at ``_autograd_grad``
and runs the transform eagerly: the ratio is dynamo's overhead, not compiled code):

* ``compile_s``: the first compiled call (trace, backend compile, one run), wall seconds, in a
  fresh compiler state (:func:`funcbwd.dynamo.fresh_compiler`: nothing cached from earlier);
* the compiled result checked against eager's (``max_abs_err``; a case whose compiled call raises
  or differs is recorded, not timed as if it worked: ``error`` or ``wrong``, which cites the known
  torch bug that explains it, :mod:`funcbwd_lab.studies.findings.known`), and what compiled (the call's
  :class:`~funcbwd_lab.strategies.compiled.CompileReport`: a ratio of a call that fell back to eager is
  labelled so, ``transform_in_graph`` False);
* after a warm-up, ``pairs`` paired samples (eager and compiled back to back, alternating which
  goes first; :func:`funcbwd_lab.studies.bench.timing.sample_once`, calls per sample calibrated on eager):
  the per-pair ratio compiled / eager, its median and a distribution-free 95% interval
  (:func:`funcbwd_lab.studies.bench.timing.median_interval`). Above 1: compiled is slower.

One intra-op thread (``torch.set_num_threads(1)`` for the run, restored after), so the
``thread_cpu`` clock sees all the work; ``wall`` samples are kept too. Ratios are of this run only.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

import torch
from torch.func import vjp, vmap

from funcbwd.internals import dynamo
from funcbwd.errors import BadInputError, first_line
from funcbwd_lab.studies.bench.inputs import cotangents, resize, shape_text
from funcbwd_lab.studies.bench.timing import (calibrate, median, median_interval, one_torch_thread,
                                         sample_once)
from funcbwd_lab.ops import registry
from funcbwd.compare import compare, max_abs_error
from funcbwd_lab.run.scenario import torch_bind
from funcbwd_lab.strategies.compiled import BACKENDS, compiled_with_report, graph_breaks
from funcbwd_lab.studies.findings.known import known_bug_for

LARGE_OPS = ("diag", "index_select")
BATCH = 64


def cases() -> list[tuple[str, str]]:
    """(op, size): every test op at "small" (its first sample), diag and index_select at "large"."""
    return [(op, "small") for op in registry.TEST_OPS] + [(op, "large") for op in LARGE_OPS]


#: what is compiled: the scenario's whole call, or only ``vmap(vjp_fn)`` (``vjp`` run eagerly)
VARIANTS = ("whole call", "vmap(vjp_fn)")


def builtin_call(op: str, size: str, batch: int,
                 variant: str = VARIANTS[0]) -> tuple[Callable[..., tuple], tuple, str]:
    """(callable, cotangents, shape) on torch's own op and formula: for "whole call" the
    scenario's ``vjp`` + ``vmap(vjp_fn)``, for "vmap(vjp_fn)" the vmap of a ``vjp_fn`` made
    eagerly here."""
    if variant not in VARIANTS:
        raise BadInputError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    spec = registry.get_op(op)
    s = resize(spec, size)
    primals = [s.args[p] for p in s.diff]

    f = torch_bind(spec, s.args, s.diff)

    def composed(*cts: torch.Tensor) -> tuple:
        _, vjp_fn = vjp(f, *primals)
        return vmap(lambda *c: vjp_fn(c))(*cts)

    if variant == VARIANTS[1]:
        _, eager_vjp_fn = vjp(f, *primals)

        def composed(*cts: torch.Tensor) -> tuple:  # noqa: F811 - the variant's callable
            return vmap(lambda *c: eager_vjp_fn(c))(*cts)

    return composed, cotangents(spec, s, batch, seed=7), shape_text(s)


def _paired(eager: Callable[[], Any], compiled: Callable[[], Any], pairs: int,
            target_s: float) -> dict[str, Any]:
    number = calibrate(eager, target_s, 10_000)
    compiled()  # warm-up (the compile happened before)
    out: dict[str, list[float]] = {"eager": [], "compiled": [], "eager_wall": [], "compiled_wall": []}
    for i in range(pairs):
        for arm in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")):
            t = sample_once(eager if arm == "eager" else compiled, number)
            out[arm].append(round(t["thread_cpu"], 9))
            out[arm + "_wall"].append(round(t["wall"], 9))
    ratios = [c / e for c, e in zip(out["compiled"], out["eager"])]
    lo, hi = median_interval(ratios)
    walls = [c / e for c, e in zip(out["compiled_wall"], out["eager_wall"])]
    return {"number": number, "eager_s": median(out["eager"]), "compiled_s": median(out["compiled"]),
            "ratio": median(ratios), "ratio_ci": [lo, hi], "wall_ratio": median(walls),
            "samples": out}


def measure(op: str, size: str, backend: str, batch: int = BATCH, pairs: int = 21,
            target_s: float = 0.02, variant: str = VARIANTS[0]) -> dict[str, Any]:
    """One case under one backend (see the module docstring); never raises for the case itself."""
    if backend not in BACKENDS:
        raise BadInputError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
    composed, cts, shape = builtin_call(op, size, batch, variant)
    row: dict[str, Any] = {"op": op, "size": size, "shape": shape, "batch": batch,
                           "backend": backend, "variant": variant}
    expected = composed(*cts)
    with one_torch_thread(), dynamo.fresh_compiler():
        compiled, report = compiled_with_report(composed, backend)
        start = time.perf_counter()
        try:
            actual = compiled(*cts)
        except Exception as e:  # noqa: BLE001 - recorded, not timed
            cause = dynamo.compile_error_cause(e)
            row.update(compile_s=round(time.perf_counter() - start, 3),
                       error=f"{type(cause).__name__}: {first_line(str(cause), 160)}")
            return row
        row["compile_s"] = round(time.perf_counter() - start, 3)
        row.update(max_abs_err=max_abs_error(actual, expected), graphs=report.graphs,
                   transform_in_graph=report.transform_in_graph,
                   graph_breaks=len(graph_breaks()))
        if not compare(actual, expected).ok:  # a wrong result is recorded, never timed
            bug = known_bug_for(row)
            row["wrong"] = (f"compiled result differs from eager (max abs error "
                            f"{row['max_abs_err']:.3g})"
                            + (f": known torch bug {bug.cite()}" if bug else ""))
            return row
        row.update(_paired(lambda: composed(*cts), lambda: compiled(*cts), pairs, target_s))
    return row


def run(backends: Iterable[str] = BACKENDS, case_list: Iterable[tuple[str, str]] | None = None,
        batch: int = BATCH, pairs: int = 21, target_s: float = 0.02,
        variants: Iterable[str] = VARIANTS,
        progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Every variant x backend x case (:func:`measure`)."""
    rows = []
    for variant in variants:
        for backend in backends:
            for op, size in (cases() if case_list is None else case_list):
                rows.append(measure(op, size, backend, batch, pairs, target_s, variant))
                if progress:
                    progress(rows[-1])
    return rows
