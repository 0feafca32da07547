"""The graph passes for user code, each applied on a copy and checked like the copy elision.

After the copy elision (:mod:`funcbwd.fx.elide`), :func:`funcbwd.fx.formula_graphs.build` runs
:data:`PASSES` in order on the decorator's graphs: common subexpressions merged
(:mod:`funcbwd.fx.cse`), scatters into a fresh factory rebuilt as ``cat`` / ``stack`` /
``*_backward`` (:mod:`funcbwd.fx.fresh_scatter`), what is left of chains of writes at constant
positions rebuilt as one gather, their read-backs as views of what was written
(:mod:`funcbwd.fx.gather`), reads of fresh factories folded (:mod:`funcbwd.fx.fresh`). Each pass runs on a copy of the graph so far; the copy is compared with
the un-elided graph on the seeded inputs of the signature (the same check as the elision: values,
NaN-equal and exact, shapes, dtypes, strides). A pass whose copy differs (or raises) is dropped
with its reason, and the next pass starts from the graph before it: a refused pass costs only
its own gain.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import torch.fx

from funcbwd.errors import first_line
from funcbwd.fx.cse import merge_common_subexpressions
from funcbwd.fx.fresh import fold_fresh_reads
from funcbwd.fx.fresh_scatter import rewrite_fresh_scatters
from funcbwd.fx.gather import gather_moves

#: (name, pass): each rewrites a graph in place and returns how many nodes it replaced
PASSES: tuple[tuple[str, Callable[[torch.fx.GraphModule], int]], ...] = (
    ("cse", merge_common_subexpressions),
    ("fresh_scatters", rewrite_fresh_scatters),
    ("gather", gather_moves),
    ("fresh_reads", fold_fresh_reads),
)


def copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph (nodes and their metadata dicts) over the same constants: a
    constant captured from inside a transform (a wrapped tensor) cannot be deep-copied."""
    return torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))


@dataclasses.dataclass
class PassReport:
    """What the passes did to one graph: nodes replaced per kept pass, and refused passes."""

    applied: dict[str, int] = dataclasses.field(default_factory=dict)
    #: pass name -> why its result was dropped (the check's detail)
    refused: dict[str, str] = dataclasses.field(default_factory=dict)


def apply_checked(gm: torch.fx.GraphModule, check: Callable[[torch.fx.GraphModule], Any],
                  passes=None) -> tuple[torch.fx.GraphModule, PassReport]:
    """Run ``passes`` in order from ``gm`` (left unchanged), keeping each one's graph only if
    ``check(graph)`` (an :class:`funcbwd.fx.formula_graphs.ElisionCheck`) is ok; returns the
    final graph and what was kept. ``passes`` defaults to :data:`PASSES` (read at the call)."""
    report = PassReport()
    for name, run in PASSES if passes is None else passes:
        candidate = copy_graph(gm)
        try:
            count = run(candidate)
        except Exception as e:  # noqa: BLE001 - a pass that cannot handle a graph keeps it as is
            report.refused[name] = f"the pass raised {type(e).__name__}: {first_line(str(e))}"
            continue
        if not count:
            continue
        result = check(candidate)
        if result.ok:
            gm = candidate
            report.applied[name] = count
        else:
            report.refused[name] = result.detail
    return gm, report
