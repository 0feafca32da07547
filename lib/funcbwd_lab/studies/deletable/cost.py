"""The cost column of the deletable-branches table (:mod:`funcbwd_lab.studies.deletable.deletable`): the batched
time of a site's fast path under a strategy over the hand-written (out-of-place) path's.

Median time of the batched first sample, strategy over the baseline, interleaved rounds in one
process with one torch thread (:mod:`funcbwd_lab.studies.bench.timing`). For a backward op it is
``vmap(vjp_fn)(cotangents)``; for a jvp op ``vmap`` over tangents of the op's forward-mode rule run
through the strategy with primals and saved outputs fixed (the tangent part only, the analogue of
``vjp_fn``; the forward itself is the same for every strategy and would dilute the ratio).
Timings inform a verdict through the table's cost limit; they are never test assertions.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Sequence

import torch
from torch.func import vmap

from funcbwd_lab.studies.bench import timing
from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.run.scenario import bind, output_shapes
from funcbwd_lab.strategies import get_strategy


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def batched_callable(spec: OpSpec, smp: Sample, strategy: str, batch: int, seed: int = 0
                     ) -> Callable[[], Any]:
    """The timed call: ``vmap(vjp_fn)(cotangents)`` for a backward op, ``vmap`` over tangents of
    the forward-mode rule run through the strategy (primals and saved outputs fixed) for a jvp op."""
    st = get_strategy(strategy)
    if spec.kind == "jvp":
        with torch.no_grad():
            outs = spec.outputs_tuple(spec.torch_op(*smp.args))
        tangents = tuple(torch.randn((batch, *smp.args[p].shape), generator=_gen(seed + j),
                                     dtype=smp.args[p].dtype) for j, p in enumerate(smp.diff))
        fn = vmap(lambda *t: st.run_formula(spec, spec.formula_args(smp.args, outs, t)))

        def tangent_part() -> Any:
            return fn(*tangents)

        return tangent_part
    dtype = smp.args[smp.diff[0]].dtype
    cts = tuple(torch.randn((batch, *sh), generator=_gen(seed + i), dtype=dtype)
                for i, sh in enumerate(output_shapes(spec, smp)))
    _, vjp_fn = st.vjp(bind(spec, st, smp.args, smp.diff), *[smp.args[p] for p in smp.diff])
    fn = vmap(lambda *c: vjp_fn(c))

    def backward_part() -> Any:
        return fn(*cts)

    return backward_part


def measure_cost(spec: OpSpec, strategies: Sequence[str], baseline: str, *, batch: int = 8,
                 rounds: int = 5, target_s: float = 0.01, max_number: int = 200
                 ) -> dict[str, dict[str, Any]]:
    """strategy -> {median_s, rel_iqr, ratio (over ``baseline``), error}: interleaved rounds of the
    batched first sample, one torch thread."""
    smp = spec.samples()[0]
    labels = list(dict.fromkeys([baseline, *strategies]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        series = []
        for label in labels:
            try:
                fn = batched_callable(spec, smp, label, batch)
            except Exception as e:  # noqa: BLE001 - recorded per label
                fn, err = None, f"{type(e).__name__}: {e}".splitlines()[0][:200]
            s = timing.Timed({"strategy": label}, fn or (lambda: None), contextlib.nullcontext, rounds)
            if fn is None:
                s.error = err
            series.append(s)
        good = [s for s in series if not s.error]
        with warnings.catch_warnings():  # vmap's fallback warnings: the cells already record them
            warnings.simplefilter("ignore")
            timing.run_interleaved(good, "thread_cpu", target_s, max_number)
    finally:
        torch.set_num_threads(threads)
    base = next(s for s in series if s.key["strategy"] == baseline)
    out = {}
    for s in series:
        med = timing.median(s.samples)
        out[s.key["strategy"]] = {"median_s": med, "rel_iqr": timing.rel_iqr(s.samples),
                                  "ratio": timing.div(med, timing.median(base.samples)),
                                  "number": s.number, "rounds": len(s.samples), "error": s.error}
    return out
