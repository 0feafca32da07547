"""Objection 9 of the review (issue 28): backward through traced strategy graphs on several
threads at once. :func:`stress` runs ``threads`` threads of ``calls`` calls each under one cold
``traced`` strategy (traces race with replays): vmap over the cotangents of a legacy op's vjp
(the graph path) and plain backwards (the formula as written), and compares every result bit for
bit with a single-threaded run under a second strategy. ``python -m
funcbwd_lab.studies.review.threads --out data/review-threads.json`` saves one run.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import threading
import time
from pathlib import Path
from typing import Any

import torch

SCHEMA = "funcbwd-review-threads/1"
FILE = "review-threads.json"

#: (op, forward args after x, x's shape; None: the op's first sample): signatures that trace
#: differently (diag's k is baked into its graph)
JOBS = (("diag", (0,), (3, 5)), ("diag", (1,), (3, 5)), ("index_select", None, None),
        ("topk", None, None), ("sort", None, None))


def _inputs(i: int) -> tuple[str, tuple]:
    from funcbwd_lab.ops import registry

    op, extra, shape = JOBS[i % len(JOBS)]
    if extra is not None:
        return op, (torch.randn(*shape, generator=torch.Generator().manual_seed(i)), *extra)
    args = registry.get_op(op).sample().args
    return op, tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def call(st: Any, i: int) -> torch.Tensor:
    """Call ``i``: vmap over 3 cotangents of the legacy op's vjp (even ``i``), or a plain backward
    (odd ``i``: no transform, the formula runs as written)."""
    from torch.func import vjp, vmap

    from funcbwd_lab.ops import legacy_ops as legacy

    op, args = _inputs(i)
    fn = legacy.function_for(op, st)

    def first(v):
        out = fn.apply(v, *args[1:])
        return out[0] if isinstance(out, tuple) else out

    x = args[0]
    if i % 2:
        x = x.detach().requires_grad_()
        out = first(x)
        (out * torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
        return x.grad
    out, pull = vjp(first, x)
    cot = torch.randn(3, *out.shape, generator=torch.Generator().manual_seed(100 + i))
    return vmap(lambda c: pull(c)[0])(cot)


def stress(threads: int = 4, calls: int = 12, timeout_s: float = 180.0) -> dict[str, Any]:
    """Run the stress (see the module docstring); the counts of what it found."""
    from funcbwd_lab.strategies.traced import Traced

    plan = [[(t * 7 + c) % (2 * len(JOBS)) for c in range(calls)] for t in range(threads)]
    reference = Traced()
    expected = {i: call(reference, i) for i in sorted({i for p in plan for i in p})}
    st = Traced()
    barrier = threading.Barrier(threads)
    results: dict[tuple[int, int], torch.Tensor] = {}
    errors: list[str] = []

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for c, i in enumerate(plan[t]):
                results[(t, c)] = call(st, i)
        except BaseException as e:  # noqa: BLE001 - counted below
            errors.append(f"{type(e).__name__}: {e}")

    start = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(timeout_s)
    seconds = time.perf_counter() - start
    unequal = sorted({JOBS[plan[t][c] % len(JOBS)][0] for (t, c), got in results.items()
                      if not torch.equal(got, expected[plan[t][c]])})
    return {"threads": threads, "calls_per_thread": calls, "calls": threads * calls,
            "finished": len(results), "hung_threads": sum(th.is_alive() for th in pool),
            "errors": errors[:3], "unequal_ops": unequal, "timeout_s": timeout_s,
            "traces": st.trace_count, "traces_single_threaded": reference.trace_count,
            "lock_at_rest": all(w.functionalizer.cache.building() == 0
                                for _, w in st._wrappers.values()),
            "seconds": round(seconds, 2)}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def _document(a: Any) -> dict[str, Any]:
    doc = {"schema": SCHEMA, "torch": torch.__version__, **stress()}
    doc.pop("seconds")  # wall time is not a result: it would make every run a diff
    return doc


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, _document, argv)


if __name__ == "__main__":
    raise SystemExit(main())
