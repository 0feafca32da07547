"""What each C++ approach costs: the measurement plan, the callables, the checks and the timings.

Per op and input size (the bench's: :func:`funcbwd_lab.studies.bench.inputs.resize`, ``small`` =
the op's first catalog sample, ``large`` = every dim x16), two kinds of statement:

* ``node``: the op's backward node alone, applied ``n`` times in a C++ loop
  (the extension's ``node_loop``: no engine, no Python per application), to plain cotangents
  (vmap off: what every user pays per node) or, called inside ``vmap``, to B batched ones;
  ``cpp_whole``'s application is one backward pass under its Functionalize layer; grad mode off
  with vmap off (as the engine runs a plain backward), on under vmap (as torch.func's vjp_fn
  runs). Per application: the statement with ``n`` minus the same statement with none, over
  ``n``;
* ``vjp``: what a torch.func user runs, ``vmap(vjp_fn)(cotangents)`` at B cotangents with
  ``vjp_fn`` made once by the label's ``vjp`` (:func:`funcbwd_lab.studies.bench.bench.batched_callables`,
  as the bench times it), and with vmap off one ``torch.autograd.grad(y, x, g,
  retain_graph=True)`` (for ``cpp_whole`` through its C++ entry point with no vmap level).

Labels: ``builtin`` (torch's own op and C++ formula: the reference), ``cpp_legacy`` (vmap off
only: under vmap it fails), ``cpp_handfixed`` (core's modern formula through the same C++ op
machinery) and the four approaches. Before anything is counted or timed, each statement's result
is compared with builtin's (:func:`check`); one that raises or disagrees is recorded with why and
not measured.

Time (:func:`time_cases`): per group (op x size x kind x batch) every label is timed in
interleaved rounds (:func:`funcbwd_lab.studies.bench.timing.run_interleaved`, one intra-op thread,
thread CPU time); the ratio to builtin (and, vmap off, to cpp_legacy) is the median over rounds of
the per-round ratio, with the distribution-free 95% interval of that median
(:func:`funcbwd_lab.studies.bench.timing.median_interval`). Instructions:
:mod:`funcbwd_lab.studies.cpp.callgrind`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any, Callable, Iterable, Sequence

import torch

from funcbwd.compare import compare
from funcbwd.errors import first_line

LABELS_VMAP = ("builtin", "cpp_handfixed", "cpp_composite", "cpp_guard", "cpp_whole", "cpp_traced")
LABELS_OFF = ("builtin", "cpp_legacy", "cpp_handfixed", "cpp_composite", "cpp_guard", "cpp_whole",
              "cpp_traced")
APPROACHES = ("cpp_composite", "cpp_guard", "cpp_whole", "cpp_traced")
BATCHES = (1, 8, 64, 512)
SIZES = ("small", "large")
SEED = 7
KINDS = ("node", "vjp")
#: the approaches' triggers with no transform active ("vmap": guard's and whole's; "stack":
#: traced's) and how many evaluations one count loops over
TRIGGERS = {"cpp_guard": "vmap", "cpp_whole": "vmap", "cpp_traced": "stack"}
TRIGGER_LOOP = 100_000


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured statement: ``batch`` None is vmap off; ``kind`` "node", "vjp" or "trigger"
    (an approach's trigger alone, :func:`trigger_cases`); ``instance`` 1: a second, independent
    graph of the same case (its difference from instance 0 is the between-graph noise)."""

    op: str
    size: str
    batch: int | None
    label: str
    kind: str = "vjp"
    instance: int = 0

    @property
    def group(self) -> tuple[str, str, str, int | None]:
        return (self.op, self.size, self.kind, self.batch)

    def key(self) -> dict[str, Any]:
        return {"op": self.op, "size": self.size, "batch": self.batch, "label": self.label,
                "kind": self.kind, "instance": self.instance}

    @property
    def applications(self) -> int:
        """Node applications (trigger evaluations) per call of a ``node`` (``trigger``)
        statement; 1 for ``vjp``."""
        if self.kind == "trigger":
            return TRIGGER_LOOP
        if self.kind != "node":
            return 1
        return 100 if self.batch is None else (10 if self.batch < 512 else 3)


def plan(ops: Sequence[str], sizes: Sequence[str] = SIZES, batches: Sequence[int] = BATCHES,
         kinds: Sequence[str] = KINDS) -> list[Case]:
    """Every case: per op, size and kind, the vmap-off labels, then each batch's vmap-on ones."""
    out = []
    for op in ops:
        for size in sizes:
            for kind in kinds:
                out += [Case(op, size, None, lbl, kind) for lbl in LABELS_OFF]
                out += [Case(op, size, b, lbl, kind) for b in batches for lbl in LABELS_VMAP]
    return out


def trigger_cases() -> list[Case]:
    """One ``trigger`` case per approach that tests a condition on every formula call."""
    return [Case("-", "-", None, label, "trigger") for label in TRIGGERS]


def instruction_plan(ops: Sequence[str], sizes: Sequence[str] = SIZES) -> list[Case]:
    """What callgrind counts (valgrind takes seconds per case: a subset of :func:`plan`): the
    triggers; per op and size, every label's node with vmap off (cpp_legacy twice, independent
    graphs: the noise between graphs) and at B=64; per op, vmap(vjp) at B=64, small input."""
    out = trigger_cases()
    for op in ops:
        for size in sizes:
            out += [Case(op, size, None, lbl, "node") for lbl in LABELS_OFF]
            out.append(Case(op, size, None, "cpp_legacy", "node", instance=1))
            out += [Case(op, size, 64, lbl, "node") for lbl in LABELS_VMAP]
        out += [Case(op, sizes[0], 64, lbl, "vjp") for lbl in LABELS_VMAP]
    return out


@functools.cache
def _sample(op: str, size: str):
    from funcbwd_lab.ops import registry
    from funcbwd_lab.studies.bench.inputs import resize

    spec = registry.get_op(op)
    return spec, resize(spec, size)


def _noop() -> None:
    return None


def statements(case: Case, reduced: bool = False) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(the statement of ``case``, its base), ready to call, sharing one graph and one set of
    inputs. The base is what :mod:`.callgrind` subtracts: a function doing nothing for a ``vjp``
    statement, the same statement applying the node zero times for a ``node`` one. ``reduced``:
    a node's gradients summed to their inputs' shapes, as the engine does (for :func:`check`)."""
    from funcbwd_lab.run.scenario import bind
    from funcbwd_lab.strategies import cpp, get_strategy

    if case.kind == "trigger":
        ext, which = cpp.extension(), TRIGGERS[case.label]
        return (lambda: ext.trigger_loop(TRIGGER_LOOP, which)), (lambda: ext.trigger_loop(0, which))
    spec, smp = _sample(case.op, case.size)
    if case.batch is not None and case.kind == "vjp":
        from funcbwd_lab.studies.bench.bench import batched_callables
        from funcbwd_lab.studies.bench.inputs import cotangents

        cts = cotangents(spec, smp, case.batch, SEED)
        return batched_callables(spec, smp, case.label, cts)[0], _noop
    st = get_strategy(case.label)
    x = [smp.args[p].detach().clone().requires_grad_() for p in smp.diff]
    with torch.enable_grad():
        ys = bind(spec, st, smp.args, smp.diff)(*x)
    gen = torch.Generator().manual_seed(SEED)
    lead = () if case.batch is None else (case.batch,)
    gs = [torch.randn((*lead, *y.shape), generator=gen, dtype=y.dtype) for y in ys]
    if case.kind == "node":
        return _node_statement(case, x, ys, gs, case.applications, reduced), \
            _node_statement(case, x, ys, gs, 0, reduced)

    def backward(*g: torch.Tensor) -> Any:
        return torch.autograd.grad(ys, x, g, retain_graph=True)

    if case.label == "cpp_whole":
        ext = cpp.extension()
        return (lambda: ext.whole_call(backward, tuple(gs))), _noop
    return (lambda: backward(*gs)), _noop


def _node_statement(case: Case, x: list, ys: tuple, gs: list, n: int, reduced: bool
                    ) -> Callable[[], Any]:
    from funcbwd_lab.strategies import cpp

    ext = cpp.extension()
    whole = case.label == "cpp_whole"

    def apply(*g: torch.Tensor) -> Any:
        outs = ext.node_loop(ys[0], list(g), n, whole)
        if not reduced:
            return outs
        return [o.sum_to_size(xi.shape) for o, xi in zip(outs, x) if o is not None]

    if case.batch is None:
        def plain() -> Any:
            with torch.no_grad():  # as the engine runs a backward without create_graph
                return apply(*gs)
        return plain
    batched = torch.func.vmap(apply)  # grad mode on, as torch.func.vjp's vjp_fn runs
    return lambda: batched(*gs)


def callable_for(case: Case, reduced: bool = False) -> Callable[[], Any]:
    """The statement of ``case`` alone (:func:`statements`)."""
    return statements(case, reduced)[0]


def _flat(out: Any) -> list[torch.Tensor]:
    return [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if t is not None]


def check(cases: Iterable[Case], progress: Callable[[str], None] | None = None
          ) -> dict[Case, str]:
    """Each case's verdict before it is measured: "pass" (its result equals builtin's on the same
    inputs), else why not ("raises ..." / "differs from builtin ..."). Builtin's own is "pass"
    when it runs."""
    out: dict[Case, str] = {}
    expected: dict[tuple, list[torch.Tensor] | str] = {}
    for case in cases:
        if case.kind == "trigger":  # no result to compare: a loop of conditions
            out[case] = "pass"
            continue
        ref_key = case.group
        if ref_key not in expected:
            try:
                builtin = dataclasses.replace(case, label="builtin")
                expected[ref_key] = _flat(callable_for(builtin, reduced=True)())
            except Exception as e:  # noqa: BLE001 - recorded as the reference's failure
                expected[ref_key] = f"builtin raises {type(e).__name__}: {first_line(str(e), 120)}"
        ref = expected[ref_key]
        if isinstance(ref, str):
            out[case] = ref
            continue
        try:
            got = _flat(callable_for(case, reduced=True)())
        except Exception as e:  # noqa: BLE001 - a label that cannot run is recorded, not fatal
            out[case] = f"raises {type(e).__name__}: {first_line(str(e), 120)}"
            continue
        cmp = compare(got, ref)
        out[case] = "pass" if cmp.ok else f"differs from builtin: {cmp.detail}"
    return out


# ------------------------------------------------------------------ time
def per_round_ratio(samples: Sequence[float], ref: Sequence[float]) -> dict[str, Any]:
    """The median of the per-round ratios ``samples[i] / ref[i]`` (both series timed in the same
    interleaved rounds) and its distribution-free 95% interval (NaNs: too few rounds)."""
    from funcbwd_lab.studies.bench.timing import median, median_interval

    r = [a / b for a, b in zip(samples, ref) if b > 0]
    lo, hi = median_interval(r)
    return {"ratio": median(r), "low": lo, "high": hi, "rounds": len(r)}


def time_cases(cases: Sequence[Case], verdicts: dict[Case, str], *, rounds: int = 9,
               target_s: float = 0.004, max_number: int = 200,
               progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Time every case whose verdict is "pass", group by group (interleaved rounds within a
    group); one row per case: its samples, the ratio to builtin (and, vmap off, to cpp_legacy)."""
    from funcbwd_lab.studies.bench.timing import Timed, median, one_torch_thread, run_interleaved

    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        groups.setdefault(c.group, []).append(c)
    rows = []
    with one_torch_thread():
        for i, (group, members) in enumerate(groups.items()):
            if progress:
                progress(f"time {i + 1}/{len(groups)}: {group[0]} {group[1]} {group[2]} "
                         f"{'vmap off' if group[3] is None else f'B={group[3]}'}")
            ok = [c for c in members if verdicts.get(c) == "pass"]
            series = [Timed(c.key(), callable_for(c), contextlib.nullcontext, rounds) for c in ok]
            run_interleaved(series, "thread_cpu", target_s, max_number)
            by_label = {s.key["label"]: s for s in series if not s.error}
            for c in members:
                s = next((t for t in series if t.key["label"] == c.label), None)
                row = {**c.key(), "verdict": verdicts.get(c, "not checked"),
                       "samples": s.samples if s else [], "number": s.number if s else 0,
                       "median_s": median(s.samples) if s else math.nan,
                       "per_application_s": (median(s.samples) / c.applications if s
                                             else math.nan)}
                if s is not None and s.error:
                    row["verdict"] = f"raises while timed: {s.error}"
                for ref in ("builtin", "cpp_legacy"):
                    if s is not None and ref in by_label and ref != c.label and s.samples:
                        row[f"vs_{ref}"] = per_round_ratio(s.samples, by_label[ref].samples)
                rows.append(row)
    return rows

