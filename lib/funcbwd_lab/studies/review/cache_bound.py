"""Objection 7 of the review (issue 28), second half: the ``traced`` strategy behind the evidence
wraps each formula with an unbounded cache, so eviction never ran in the evidence. This re-runs
the ``traced`` column of the saved matrix (the 8 test ops, every sample and scenario) with the
tool's bounded default and with ``maxsize=1`` (every new signature evicts the last: eviction on
nearly every call) and compares each sample run's status with the saved unbounded run. ``python -m
funcbwd_lab.studies.review.cache_bound --out data/review-cache-bound.json``.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

SCHEMA = "funcbwd-review-cache-bound/1"
FILE = "review-cache-bound.json"
MATRIX_FILE = "matrix-test-ops.json"


@contextlib.contextmanager
def traced_maxsize(maxsize: int | None) -> Iterator[list]:
    """The ``traced`` strategy's wrappers built with ``maxsize`` instead of unbounded; yields the
    list of wrappers built (to read their caches after)."""
    from funcbwd_lab.strategies import registry, traced
    from funcbwd.decorator import functionalized

    real, built = traced.functionalized, []
    kept = registry._INSTANCES.pop("traced", None)  # a fresh instance: fresh wrappers

    def bounded(fn, **kw):
        kw["maxsize"] = maxsize
        built.append(functionalized(fn, **kw))
        return built[-1]

    traced.functionalized = bounded
    try:
        yield built
    finally:
        traced.functionalized = real
        registry._INSTANCES.pop("traced", None)
        if kept is not None:
            registry._INSTANCES["traced"] = kept


def _key(r: dict[str, Any]) -> tuple:
    return (r["op"], r["sample"], r["scenario"])


def run(data_dir: str | Path) -> dict[str, Any]:
    from funcbwd_lab.ops import registry
    from funcbwd_lab.studies.matrix import matrix
    from funcbwd_lab.studies.matrix.records import stable_records
    from funcbwd.cache import DEFAULT_MAXSIZE

    saved = {_key(r): r["status"] for r in json.loads((Path(data_dir) / MATRIX_FILE).read_text())
             if r["strategy"] == "traced"}
    out: dict[str, Any] = {"schema": SCHEMA, "saved_runs": len(saved), "runs": {}}
    for maxsize in (None, DEFAULT_MAXSIZE, 1):
        with traced_maxsize(maxsize) as built:
            recs = stable_records(matrix.run_matrix(ops=registry.TEST_OPS, strategies=["traced"]))
        infos = [w.cache_info() for w in built]
        now = {_key(r): r["status"] for r in recs}
        differ = sorted(f"{k[0]} {k[1]} {k[2]}: {saved.get(k)} -> {v}" for k, v in now.items()
                        if saved.get(k) != v)
        out["runs"][str(maxsize)] = {"sample_runs": len(now), "status": dict(Counter(now.values())),
                                     "differ_from_unbounded": differ,
                                     "traces": sum(i.misses for i in infos),
                                     "hits": sum(i.hits for i in infos),
                                     "largest_cache": max((i.currsize for i in infos), default=0)}
    return out


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(a.data), argv,
                      data_option="the data directory")


if __name__ == "__main__":
    raise SystemExit(main())
