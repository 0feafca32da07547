"""``compiled``: "doesn't torch.compile already do this?" as a computed reference row.

The legacy formula runs as written (the legacy op is ``plain``'s ``torch.autograd.Function``);
what changes is the scenario's whole transform call: :meth:`Compiled.transform` returns it wrapped
in ``torch.compile(composed, backend=B, fullgraph=False, dynamic=False)``. ``fullgraph=False`` is
what users get by default: where dynamo cannot trace it splits the call (a graph break) and runs
that part eagerly, so a pass may be eager's pass. Provenance therefore says what compiled, from
dynamo's own evidence, not from the outcome:

* the graphs dynamo handed to the backend (the backend is the object ``torch.compile`` builds for
  ``B``, :func:`funcbwd.internals.dynamo.compile_backend`, called by a thin recorder), and whether one
  holds the transform (a functorch ``*_increment_nesting`` call) and the legacy op as an
  ``autograd_function_apply`` (its backward body in the graph);
* dynamo's graph breaks of this call (reason, where), and a failure's stage (dynamo tracing, the
  backend, or running).

``mechanism_ran`` is True only when a graph holds the transform *and* the legacy op with its
backward, with no graph break inside the transform: then the compiled graph ran the legacy formula.
Otherwise the event says what ran instead: nothing compiled (eager fallback), or a graph that holds
the transform but differentiates torch's own op, because dynamo inlined the Function's forward and
dropped its backward (torch 2.13 does this under torch.func transforms: pytorch#193279; a forward
that takes ``*args`` and more than one argument makes the same path fail inside dynamo instead).

Isolation: every compiled call runs in :func:`funcbwd.internals.dynamo.fresh_compiler` (dynamo
reset before and after, compile caches off), so no call reuses another's code, guards or cached
graphs, and a call with many in_dims choices never hits dynamo's recompile limit (which would
silently fall back to eager). The legacy formula records (ran=False) when it runs eagerly; when dynamo traces it
(``torch.compiler.is_compiling()``) nothing is recorded, so tracing is never mistaken for running.

:data:`BACKENDS` are the three torch.compile backends compared. The registered ``compiled`` uses
``aot_eager``: dynamo plus AOTAutograd, the part of torch.compile that functionalizes (rewrites
in-place ops), run by the eager interpreter. On torch 2.13 it decides every test-op cell as
``inductor`` does (the same status, reason, failure stage and ``mechanism_ran`` on the first
sample of every op and scenario, ``data/compiled.json``; inductor's codegen comes after, on the
same graphs) at a fraction of the cost: the 64 first-sample cells took aot_eager 84-228 s and
inductor 235-415 s in three runs on 2 shared cores, inductor's worst cell 56-104 s (prod
jacrev_jacrev), and prod has six samples. ``eager`` (dynamo only, no AOTAutograd) differs in one cell (prod vmap_cotangents passes
there on torch's own formula where AOTAutograd raises), so it is not a stand-in for torch.compile.
:func:`for_backend` builds the variant for another backend (``compiled_eager``,
``compiled_inductor``); the study :mod:`funcbwd_lab.studies.compiled` runs all three and recomputes
these claims.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import threading
import time
from typing import Any, Callable, ClassVar, Iterator

import torch

from funcbwd import internals
from funcbwd.internals import dynamo
from funcbwd.errors import BadInputError, first_line
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.plain import Plain

BACKENDS = ("eager", "aot_eager", "inductor")
#: the upstream issue for the dropped backward (reverse-mode counterpart of pytorch#192985)
DROP_ISSUE = "pytorch#193279"


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    reason: str  # first line
    where: str  # "file:line in function" of the innermost user frame
    inside_transform: bool  # a torch.func frame is on the stack: dynamo was inside the transform


@dataclasses.dataclass
class CompileReport:
    """What one compiled call did (:func:`collecting_reports` keeps them)."""

    backend: str
    graphs: int = 0
    transform_in_graph: bool = False  # a graph holds a functorch transform (its *_increment_nesting)
    function_in_graph: bool = False  # a graph holds autograd_function_apply (the legacy backward)
    function_in_transform_graph: bool = False  # one graph holds both
    graph_breaks: list[GraphBreak] = dataclasses.field(default_factory=list)
    error: str = ""  # "Type: first line" of what the call raised
    error_stage: str = ""  # dynamo / backend / run (funcbwd.internals.dynamo.compile_error_stage)
    seconds: float = 0.0  # compile and run

    @property
    def breaks_inside_transform(self) -> list[GraphBreak]:
        return [b for b in self.graph_breaks if b.inside_transform]

    @property
    def compiled_legacy_backward(self) -> bool:
        """The mechanism: a graph holds the transform and the legacy op's backward, unsplit."""
        return (not self.error and self.function_in_transform_graph
                and not self.breaks_inside_transform)

    def verdict(self) -> str:
        """One short text: what compiled, or what ran instead."""
        head = f"torch.compile[{self.backend}]"
        if self.error:
            if self.error_stage == "dynamo":
                return f"{head}: dynamo raised while tracing"
            if self.error_stage == "backend":
                return f"{head}: the backend raised compiling dynamo's graph"
            if not self.transform_in_graph:
                return f"{head} fell back to eager (no graph holds the transform), which raised"
            return f"{head}: the compiled call raised"
        if self.compiled_legacy_backward:
            return f"{head} compiled the transform with the legacy backward in the graph"
        if not self.transform_in_graph:
            return f"{head} fell back to eager (no graph holds the transform)"
        if self.breaks_inside_transform:
            return f"{head} split the transform at a graph break (part ran eagerly)"
        return (f"{head} compiled the transform without the legacy backward (dynamo inlined the "
                f"Function's forward: torch's own formula ran; {DROP_ISSUE})")

    def detail(self) -> str:
        parts = [f"{self.graphs} graph(s)", f"{len(self.graph_breaks)} graph break(s)"]
        if self.graph_breaks:
            b = self.graph_breaks[0]
            parts.append(f"first break at {b.where}: {b.reason}")
        if self.error:
            parts.append(self.error)
        return "; ".join(parts)


def _frame_where(frame) -> str:
    path = frame.filename
    short = path[path.rfind("/torch/") + 1:] if "/torch/" in path else path.rsplit("/", 1)[-1]
    if "/funcbwd/" in path:
        short = path[path.rfind("/funcbwd/") + 1:]
    return f"{short}:{frame.lineno} in {frame.name}"


def graph_breaks() -> list[GraphBreak]:
    """Dynamo's graph breaks since the last reset (inside
    :func:`funcbwd.internals.dynamo.fresh_compiler`: this call's)."""
    out = []
    for reason, stack in dynamo.graph_break_reasons():
        inside = any("/torch/_functorch/" in f.filename for f in stack)
        out.append(GraphBreak(first_line(reason, 160), _frame_where(stack[-1]) if stack else "?",
                              inside))
    return out


def _target_name(target: Any) -> str:
    return getattr(target, "__name__", str(target))


class _Recorder:
    """A backend that notes what each graph dynamo hands it holds, then compiles it with the real
    backend object."""

    def __init__(self, backend: Any, report: CompileReport) -> None:
        self.backend, self.report = backend, report
        self.__name__ = report.backend  # how torch names the backend in its errors

    def __repr__(self) -> str:
        return self.report.backend

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        r = self.report
        r.graphs += 1
        targets = [n.target for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
                   for n in m.graph.nodes if n.op == "call_function"]
        transform = any(_target_name(t).endswith("_increment_nesting") for t in targets)
        function = any(dynamo.is_autograd_function_apply(t) for t in targets)
        r.transform_in_graph |= transform
        r.function_in_graph |= function
        r.function_in_transform_graph |= transform and function
        return self.backend(gm, example_inputs)


#: dynamo's caches and graph-break log are per process: one compiled call at a time
_COMPILE_LOCK = threading.RLock()
_REPORTS: contextvars.ContextVar[list[CompileReport] | None] = contextvars.ContextVar(
    "funcbwd_compile_reports", default=None)


@contextlib.contextmanager
def collecting_reports() -> Iterator[list[CompileReport]]:
    """Collect the :class:`CompileReport` of every compiled call made inside the block (one cell
    may make several: one per in_dims choice); outside such a block reports are not kept."""
    reports: list[CompileReport] = []
    token = _REPORTS.set(reports)
    try:
        yield reports
    finally:
        _REPORTS.reset(token)


def compiled_with_report(composed: Callable[..., Any], backend: str) -> tuple[Callable[..., Any], CompileReport]:
    """``torch.compile(composed, backend=..., fullgraph=False, dynamic=False)`` whose backend is the
    object torch.compile builds for ``backend``, behind a recorder filling the returned report's
    graph fields as dynamo hands it graphs. Call it inside
    :func:`funcbwd.internals.dynamo.fresh_compiler`."""
    report = CompileReport(backend)
    compiled = torch.compile(composed, backend=_Recorder(dynamo.compile_backend(backend), report),
                             fullgraph=False, dynamic=False)
    return compiled, report


def compile_call(composed: Callable[..., Any], backend: str, *inputs: Any) -> tuple[Any, CompileReport]:
    """``torch.compile(composed, backend=backend, fullgraph=False, dynamic=False)(*inputs)`` in a
    fresh compiler state (one call at a time in the process); returns (result, report). If the
    call raises, the exception propagates with the report attached as ``exc.compile_report``."""
    start = time.perf_counter()
    with _COMPILE_LOCK, dynamo.fresh_compiler():
        compiled, report = compiled_with_report(composed, backend)
        kept = _REPORTS.get()
        if kept is not None:
            kept.append(report)
        try:
            out = compiled(*inputs)
        except Exception as e:
            cause = dynamo.compile_error_cause(e)
            report.error = f"{type(cause).__name__}: {first_line(str(cause), 200)}"
            report.error_stage = dynamo.compile_error_stage(e)
            report.graph_breaks = graph_breaks()
            report.seconds = time.perf_counter() - start
            e.compile_report = report  # type: ignore[attr-defined]
            raise
        report.graph_breaks = graph_breaks()
    report.seconds = time.perf_counter() - start
    return out, report


class Compiled(Plain):
    name = "compiled"
    summary = ("torch.compile (aot_eager) of the whole transform call, legacy formula as written "
               "(a reference row: what torch.compile does today)")
    backend: ClassVar[str] = "aot_eager"
    slow = True

    def run_formula(self, op, args: tuple) -> Any:
        """The formula as written. Recorded (ran=False) only when it runs eagerly: a formula
        dynamo traces is not one the compiled graph ran."""
        if not torch.compiler.is_compiling():
            where = "under vmap" if internals.vmap_active() else "(no vmap level)"
            provenance.record(self.name, f"legacy formula ran eagerly {where}", False, op.name)
        return op.formula(*args)

    def transform(self, composed: Callable[..., Any]) -> Callable[..., Any]:
        """``composed`` compiled with :attr:`backend` (:func:`compile_call`); records the
        verdict (ran: :attr:`CompileReport.compiled_legacy_backward`), also when the call raises."""

        @functools.wraps(composed)
        def call(*inputs: Any) -> Any:
            try:
                out, report = compile_call(composed, self.backend, *inputs)
            except Exception as e:
                self._note(getattr(e, "compile_report", None)
                           or CompileReport(self.backend, error=f"{type(e).__name__}: {first_line(str(e))}",
                                            error_stage="run"))
                raise
            self._note(report)
            return out

        return call

    def _note(self, report: CompileReport) -> None:
        provenance.record(self.name, report.verdict(), report.compiled_legacy_backward,
                          report.detail())


@functools.cache
def for_backend(backend: str) -> Compiled:
    """The ``compiled`` strategy with another torch.compile backend (one of :data:`BACKENDS`);
    its name is ``compiled_<backend>`` except for the registered default."""
    if backend not in BACKENDS:
        raise BadInputError(f"unknown torch.compile backend {backend!r}; compare one of "
                            f"{', '.join(BACKENDS)}")
    if backend == Compiled.backend:  # the registered strategy (another instance of it)
        return Compiled()
    summary = Compiled.summary.replace(f"({Compiled.backend})", f"({backend})")
    cls = type(f"Compiled_{backend}", (Compiled,),
               {"name": f"compiled_{backend}", "backend": backend, "summary": summary})
    return cls()
