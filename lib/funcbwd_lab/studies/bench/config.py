"""What one ``funcbwd bench`` run measures: the configuration, its presets and the bench labels.

A label is a strategy name, or ``per_formula+copy_rule`` (per_formula with the opt-in
``aten::copy`` vmap rule of :mod:`funcbwd_lab.batching.copy` active around each timed sample). Two
labels are references, always measured whatever the configuration asks for:

* ``handfixed``: core's modern out-of-place formula written in Python, run through the same
  legacy-op machinery as every strategy. ``label / handfixed`` is what functionalizing (plus our
  machinery) costs; the denominator of the targets.
* ``builtin``: torch's own C++ formula. ``handfixed / builtin`` is what running a backward formula
  in Python costs at all, which no functionalization approach can remove.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

from funcbwd_lab.batching.copy import batched_copy_rule
from funcbwd.errors import BadInputError, parse_names
from funcbwd_lab.ops import registry
from funcbwd_lab.strategies import available

SCHEMA = "funcbwd-bench/2"
SIZES = {"small": 1, "medium": 4, "large": 16}  # name -> scale factor on every dim of sample 0
TARGET_OPS = ("diag", "index_select", "topk", "sort", "mode")
COPY_RULE = "per_formula+copy_rule"
#: the references every run measures (see the module docstring)
REFERENCES = ("handfixed", "builtin")
#: labels of the "vmap off" section that are not strategies
NO_STRATEGY, NOOP_HOOK = "none", "noop_hook"
CLOCKS = ("thread_cpu", "wall")


@dataclasses.dataclass
class BenchConfig:
    """What to measure. ``ops``/``strategies`` None mean the catalog's test ops / every available
    strategy plus the ``per_formula+copy_rule`` variant; the references are added either way."""

    ops: tuple[str, ...] | None = None
    strategies: tuple[str, ...] | None = None
    batch_sizes: tuple[int, ...] = (1, 8, 64, 256)
    #: batch sizes whose per-sample loops are timed (None: all); a loop is B unbatched calls, so
    #: B=256 dominates the run time. Unmeasured loops are reported as missing, never extrapolated.
    loop_batch_sizes: tuple[int, ...] | None = None
    sizes: tuple[str, ...] = ("small", "large")
    repeats: int = 5  # interleaved rounds of the vmap timings
    loop_repeats: int = 3  # rounds that also time the per-sample loops (the slow part)
    target_sample_s: float = 0.005  # each sample runs the call `number` times, about this long
    max_number: int = 200
    num_threads: int = 1  # the machine is shared; one intra-op thread keeps ratios stable
    #: "thread_cpu": CPU time of the timing thread (time.thread_time; immune to preemption by
    #: other processes on a shared machine; with one intra-op thread it covers all the work:
    #: the CPU autograd engine and vmap's fallback run on the calling thread), or "wall".
    #: Both clocks are recorded for every sample; this one drives calibration and ratios.
    clock: str = "thread_cpu"
    overhead_nodes: int = 16  # legacy-op nodes per graph in the vmap-off section
    overhead_repeats: int = 7
    #: the hooks claim (vmap off, hooks vs no-op hooks on one graph): nodes of that graph and
    #: how many (hooks, no-op) pairs of samples; 0 pairs skips the section
    hooks_claim_nodes: int = 1024
    hooks_claim_pairs: int = 41
    hooks_claim_sample_s: float = 0.02
    memory_batches: tuple[int, ...] = (64,)
    copy_vmap_modes: tuple[bool, ...] = (True,)  # copy graphs under vmap; add False for unbatched
    check_batch: int = 3  # batch of the vmap_cotangents correctness check per size
    name: str = "custom"

    @classmethod
    def quick(cls) -> "BenchConfig":
        """Every test op, the batch sizes the targets need (8, 64, 256) plus 1; loops up to 64."""
        return cls(name="quick", loop_batch_sizes=(1, 8, 64), check_batch=2, repeats=5,
                   loop_repeats=3, target_sample_s=0.004)

    @classmethod
    def full(cls) -> "BenchConfig":
        return cls(name="full", ops=tuple(registry.op_names()), repeats=7, loop_repeats=3,
                   target_sample_s=0.01, overhead_repeats=11, hooks_claim_pairs=101,
                   memory_batches=(64, 256), copy_vmap_modes=(True, False))

    def validate(self) -> "BenchConfig":
        self.ops = (tuple(parse_names("op", list(self.ops), registry.op_groups())) if self.ops
                    else tuple(registry.TEST_OPS))
        self.strategies = tuple(parse_names("strategy", list(self.strategies), strategy_labels())
                                if self.strategies else strategy_labels())
        parse_names("size", list(self.sizes), SIZES)
        parse_names("clock", [self.clock], CLOCKS)
        if self.clock == "thread_cpu" and self.num_threads != 1:
            raise BadInputError("clock 'thread_cpu' misses work done by other intra-op threads; "
                                "use num_threads=1 or clock='wall'")
        if not self.batch_sizes or any(not isinstance(b, int) or b < 1 for b in self.batch_sizes):
            raise BadInputError(f"batch sizes must be positive integers, got {self.batch_sizes!r}")
        for f in ("repeats", "loop_repeats", "max_number", "num_threads", "overhead_nodes",
                  "overhead_repeats", "check_batch", "hooks_claim_nodes"):
            if getattr(self, f) < 1:
                raise BadInputError(f"{f} must be >= 1, got {getattr(self, f)!r}")
        if self.hooks_claim_pairs and self.hooks_claim_pairs < 6:
            raise BadInputError(f"hooks_claim_pairs must be 0 (skip) or >= 6 (the fewest pairs that "
                                f"give a 95% interval), got {self.hooks_claim_pairs!r}")
        if self.loop_batch_sizes is not None:
            self.loop_batch_sizes = tuple(self.loop_batch_sizes)
        self.loop_repeats = min(self.loop_repeats, self.repeats)
        return self

    def labels(self) -> list[str]:
        """The labels timed: the references first (when available), then the configured ones."""
        refs = [r for r in REFERENCES if r in available() and r not in self.strategies]
        return refs + list(self.strategies)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def strategy_labels() -> list[str]:
    """Every available strategy, plus ``per_formula+copy_rule`` (per_formula with the opt-in
    ``aten::copy`` vmap rule of :mod:`funcbwd_lab.batching.copy` active)."""
    from funcbwd_lab.strategies import get_strategy

    # a slow strategy (compiled) times what its transform hook compiles: its own study
    # (funcbwd_lab.studies.compiled) benches it; here it would time plain
    names = [n for n in available() if not get_strategy(n).slow]
    return names + ([COPY_RULE] if "per_formula" in names else [])


@dataclasses.dataclass(frozen=True)
class Variant:
    """A bench label: a strategy, plus a context entered around (never inside) each timed sample."""

    label: str
    strategy: str
    context: Callable[[], Any] = contextlib.nullcontext
    #: whose per-sample loop this label shares (the copy rule acts only under vmap, so
    #: per_formula+copy_rule's loop is per_formula's)
    loop_label: str = ""

    def __post_init__(self) -> None:
        if not self.loop_label:
            object.__setattr__(self, "loop_label", self.label)


def variant(label: str) -> Variant:
    if label == COPY_RULE:
        return Variant(label, "per_formula", batched_copy_rule, loop_label="per_formula")
    return Variant(label, label)


#: the strategies the bench does not time, each with where its cost is measured instead
COSTS_ELSEWHERE = {
    "compiled": "its own study times compiling the transform call on torch's own ops: "
                "data/compiled.json (`python -m funcbwd_lab.studies.compiled --render data/compiled.json`)",
}
