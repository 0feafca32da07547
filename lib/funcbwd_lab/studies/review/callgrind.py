"""Objection 8 of the review (issue 28): the per-node cost with vmap off, in instructions
(``torch.utils.benchmark.Timer.collect_callgrind``, valgrind) instead of wall time. Three
statements, each counted over ``NUMBER`` calls in a fresh interpreter under callgrind:

* ``formula``: a legacy formula (diag's, non-square: the in-place path) called directly;
* ``wrapped``: the same formula through ``funcbwd.functionalized`` outside every transform (the
  prototype's whole vmap-off path: one read of the functorch stack's depth, then the formula);
* ``depth``: the depth read alone from Python (``torch._C._functorch.get_dynamic_layer_stack_depth``).

``wrapped - formula`` is what the prototype adds per call in Python; a C++ prologue would pay the
thread-local read inside ``depth`` without Python's call overhead. ``python -m
funcbwd_lab.studies.review.callgrind --out data/review-callgrind.json`` (minutes: valgrind).
"""

from __future__ import annotations

from pathlib import Path

from funcbwd_lab.studies.review import saved
from typing import Any

SCHEMA = "funcbwd-review-callgrind/1"
FILE = "review-callgrind.json"
NUMBER = 1000

SETUP = """
import sys
sys.path.insert(0, {lib!r})
import torch
from funcbwd_lab.ops.discussion.diag import diag_backward
from funcbwd.decorator import functionalized
formula = diag_backward
wrapped = functionalized(diag_backward)
depth = torch._C._functorch.get_dynamic_layer_stack_depth
grad = torch.randn(3)
"""

STATEMENTS = {
    "formula": "formula(grad, (3, 5), 0)",
    "wrapped": "wrapped(grad, (3, 5), 0)",
    "depth": "depth()",
}


def run(lib: str) -> dict[str, Any]:
    import torch
    from torch.utils.benchmark import Timer

    counts = {}
    for name, stmt in STATEMENTS.items():
        t = Timer(stmt=stmt, setup=SETUP.format(lib=lib))
        stats = t.collect_callgrind(number=NUMBER, collect_baseline=False)
        counts[name] = stats.counts(denoise=True) / NUMBER
    return {"schema": SCHEMA, "torch": torch.__version__, "number": NUMBER,
            "instructions_per_call": {k: round(v) for k, v in counts.items()},
            "wrapper_adds": round(counts["wrapped"] - counts["formula"])}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE,
                      lambda a: run(str(Path(__file__).resolve().parents[3])), argv)


if __name__ == "__main__":
    raise SystemExit(main())
