"""Objection 7 of the review (issue 28): how often does the graph cache of
:func:`funcbwd.functionalized` hit on realistic call sequences, with its bounded default
(:data:`funcbwd.cache.DEFAULT_MAXSIZE` signatures, LRU)?

Two sources of call sequences:

* **a training loop** (:data:`LOOPS`): a function in pytorch#103329's pattern (a fresh zeros
  written in place) called through torch.func for 3 epochs over 1000 samples in batches of 64 (15
  full batches and one of 40): per-sample gradients (``vmap(grad)``: the batch dimension is not
  in the signature), the batch in the shape (``grad`` alone: one signature per batch size), a
  learning-rate-like float scalar that changes every call (baked into the graph: a new signature
  per value) and the same scalar passed as a 0-dim tensor, and variable sequence lengths (one
  signature per length);
* **the corpus of public code** (:mod:`funcbwd_lab.studies.yourcode.cases`): each case's function
  decorated once, as a user would, then called :data:`CORPUS_CALLS` times under ``vmap`` and
  ``vmap(jacrev)`` with batch sizes cycling through :data:`CORPUS_BATCHES` and fresh samples.

``python -m funcbwd_lab.studies.review.cache_hits --out data/review-cache-hits.json``.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import json
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

SCHEMA = "funcbwd-review-cache-hits/1"
FILE = "review-cache-hits.json"
EPOCHS, SAMPLES, BATCH = 3, 1000, 64
CORPUS_CALLS = 12
CORPUS_BATCHES = (8, 8, 8, 5, 8, 3)
CORPUS_TRANSFORMS = ("vmap", "vmap_jacrev")


def _row_write(x: torch.Tensor, w: torch.Tensor, scale: Any) -> torch.Tensor:
    """pytorch#103329's pattern: a fresh zeros written row by row, then a loss."""
    y = torch.zeros(x.shape, dtype=x.dtype)
    y[0] = x[0] * scale
    y[1:] = x[1:].sin()
    return (y @ w).square().sum()


def _batches() -> list[int]:
    sizes = [BATCH] * (SAMPLES // BATCH) + ([SAMPLES % BATCH] if SAMPLES % BATCH else [])
    return sizes * EPOCHS


def _loop(name: str) -> tuple[Any, Callable[..., Any], list[tuple]]:
    """(the wrapper, the transformed call, its argument tuples in order) of one loop sequence."""
    from torch.func import grad, vmap

    from funcbwd.decorator import functionalized

    f = functionalized(_row_write, warn=False)
    w = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    sizes = _batches()
    lrs = [0.1 * 0.99 ** i for i in range(len(sizes))]  # a per-step schedule
    if name == "per_sample_grads":  # vmap over the batch: the batch size is not in the key
        call = vmap(grad(f), in_dims=(0, None, None))
        return f, call, [(torch.randn(b, 4, 6, generator=gen), w, 2.0) for b in sizes]
    if name == "batch_in_shape":  # grad of the batched loss: one key per batch size
        call = grad(lambda x, w, s: f(x.reshape(-1, 6), w, s))
        return f, call, [(torch.randn(b, 4, 6, generator=gen), w, 2.0) for b in sizes]
    if name == "float_scalar_per_step":  # a Python float that changes every call
        call = vmap(grad(f), in_dims=(0, None, None))
        return f, call, [(torch.randn(b, 4, 6, generator=gen), w, lr) for b, lr in zip(sizes, lrs)]
    if name == "tensor_scalar_per_step":  # the same value as a 0-dim tensor: a graph input
        call = vmap(grad(f), in_dims=(0, None, None))
        return f, call, [(torch.randn(b, 4, 6, generator=gen), w, torch.tensor(lr))
                         for b, lr in zip(sizes, lrs)]
    if name == "sequence_lengths":  # one sequence of a random length 2..129 per call
        call = grad(f)
        lens = torch.randint(2, 130, (len(sizes),), generator=gen).tolist()
        return f, call, [(torch.randn(n, 6, generator=gen), w, 2.0) for n in lens]
    raise KeyError(name)


LOOPS = {
    "per_sample_grads": "vmap(grad(f)) over batches of 64 and 40 (3 epochs), scale 2.0",
    "batch_in_shape": "grad(f) of the batched loss: the batch size is in the shape",
    "float_scalar_per_step": "vmap(grad(f)) with a float scale that changes every step (lr-like)",
    "tensor_scalar_per_step": "the same per-step scale passed as a 0-dim tensor",
    "sequence_lengths": "grad(f) on one sequence per call, length uniform in 2..129",
}


def run_loop(name: str) -> dict[str, Any]:
    f, call, arg_list = _loop(name)
    for args in arg_list:
        call(*args)
    info = f.cache_info()
    return {"what": LOOPS[name], "calls": len(arg_list), "hits": info.hits, "misses": info.misses,
            "maxsize": info.maxsize, "currsize": info.currsize,
            "hit_rate": round(info.hits / max(1, info.hits + info.misses), 3)}


def run_case(case: Any, transform: str) -> dict[str, Any]:
    """One corpus case decorated once and called :data:`CORPUS_CALLS` times under ``transform``."""
    from funcbwd.decorator import functionalized
    from funcbwd.errors import first_line
    from funcbwd_lab.studies.yourcode import transforms as T

    wrappers: list[Any] = []

    def decorate(obj: Any) -> Any:
        w = functionalized(obj, warn=False)
        wrappers.append(w)
        return w

    try:
        f = case.fn(decorate)
    except Exception as e:  # noqa: BLE001 - the decorator refuses (an old-style Function)
        return {"status": "refused", "error": first_line(f"{type(e).__name__}: {e}", 120)}
    ok, error = 0, ""
    for i in range(CORPUS_CALLS):
        size = CORPUS_BATCHES[i % len(CORPUS_BATCHES)]
        args = T.batch_args(case, size, first=i * 8)
        try:
            T.transformed(transform, f, case, args)
            ok += 1
        except Exception as e:  # noqa: BLE001 - counted: the decorator alone does not fix it
            error = error or first_line(f"{type(e).__name__}: {e}", 120)
    infos = [w.cache_info() for w in wrappers]
    hits, misses = sum(i.hits for i in infos), sum(i.misses for i in infos)
    return {"status": "ran", "calls": CORPUS_CALLS, "calls_ok": ok, "hits": hits,
            "misses": misses, "error": error}


def run() -> dict[str, Any]:
    from funcbwd_lab.studies.yourcode.cases import CASES
    from funcbwd.cache import DEFAULT_MAXSIZE

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loops = {name: run_loop(name) for name in LOOPS}
        corpus = {name: {t: run_case(case, t) for t in CORPUS_TRANSFORMS}
                  for name, case in CASES.items()}
    return {"schema": SCHEMA, "torch": torch.__version__, "maxsize": DEFAULT_MAXSIZE,
            "loops": loops, "corpus": corpus, "corpus_summary": summarize_corpus(corpus)}


def summarize_corpus(corpus: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per transform: cases run, cases whose every call worked, their hits and misses, and the
    cases with a miss on more than their first call per wrapper (a key that changes per call)."""
    out: dict[str, Any] = {}
    for t in CORPUS_TRANSFORMS:
        rows = {n: r[t] for n, r in corpus.items()}
        clean = {n: r for n, r in rows.items() if r["status"] == "ran" and r["calls_ok"] == r["calls"]}
        hits = sum(r["hits"] for r in clean.values())
        misses = sum(r["misses"] for r in clean.values())
        out[t] = {"cases": len(rows), "refused": sum(r["status"] == "refused" for r in rows.values()),
                  "all_calls_ok": len(clean), "hits": hits, "misses": misses,
                  "hit_rate": round(hits / max(1, hits + misses), 3),
                  "no_lookup": sorted(n for n, r in clean.items() if r["hits"] + r["misses"] == 0),
                  "repeated_misses": sorted(n for n, r in clean.items()
                                            if r["misses"] > 2 and r["misses"] >= r["hits"])}
    return out


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv, summary=lambda doc: (
        json.dumps({k: v["hit_rate"] for k, v in doc["loops"].items()}) + " "
        + json.dumps(doc["corpus_summary"])))


if __name__ == "__main__":
    raise SystemExit(main())
