"""Objection 3 of the review (issue 28): ``torch.compile(vmap(jacrev(functionalized f)))`` with a
signature the wrapper never traced, per backend: does the compiled call work, does it equal the
eager one, what does the cache hold after it, does a later eager call work, and where did dynamo
break the graph. ``python -m funcbwd_lab.studies.review.compile_tool --out data/review-compile.json``.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import warnings
from pathlib import Path
from typing import Any

import torch

SCHEMA = "funcbwd-review-compile/1"
FILE = "review-compile.json"
BACKENDS = ("eager", "aot_eager")


def writes_row(x: torch.Tensor) -> torch.Tensor:
    """pytorch#103329's pattern: a fresh zeros written in place with a batched value."""
    y = torch.zeros(x.shape, dtype=x.dtype)
    y[0] = x[0] * 2
    return y * x


def run_backend(backend: str) -> dict[str, Any]:
    from torch.func import jacrev, vmap

    from funcbwd.errors import first_line
    from funcbwd.internals import dynamo
    from funcbwd.decorator import functionalized

    f = functionalized(writes_row, warn=False)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    out: dict[str, Any] = {}
    with dynamo.fresh_compiler(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = torch.compile(vmap(jacrev(f)), backend=backend)(x)
            out["compiled"] = "works"
        except Exception as e:  # noqa: BLE001 - the outcome
            got, out["compiled"] = None, first_line(f"{type(e).__name__}: {e}", 160)
        out["graph_breaks"] = [first_line(r, 100) for r, _ in dynamo.graph_break_reasons()]
        out["cache_after_compile"] = sorted(type(e).__name__ for e in f.functionalizer.cache.values())
        eager = vmap(jacrev(f))(x)
    out["equals_eager"] = got is not None and bool(torch.equal(got, eager))
    out["eager_after_compile"] = "works"
    return out


def run() -> dict[str, Any]:
    return {"schema": SCHEMA, "torch": torch.__version__,
            "backends": {b: run_backend(b) for b in BACKENDS}}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
