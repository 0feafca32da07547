"""pytorch#103329 with ``aten::copy``'s three rules (docs/prs/copy-rules.md): the issue's own
repro, ``vmap(jacrev(f))`` of its function (``torch.zeros`` written in place), and the two
compositions that functionalize ``f`` first, each with neither rule, with the derivative and
forward-AD formula, and with all three (the kernels of :mod:`funcbwd_lab.studies.prs.build`), each
result compared with the per-sample loop. Issue 39: the earlier RFC counted the issue among the
rules' evidence; only the functionalized compositions need them.
``python -m funcbwd_lab.studies.review.copy_repro --out data/review-copy-repro.json``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from funcbwd_lab.studies.review import saved

SCHEMA = "funcbwd-review-copy-repro/1"
FILE = "review-copy-repro.json"
B = 3
KERNELS = {"neither": [], "derivative and forward AD": ["copy_autograd"],
           "all three rules": ["copy_autograd", "copy_batch_rule"]}


def run() -> dict[str, Any]:
    from torch.func import functionalize, jacfwd, jacrev, vmap

    from funcbwd_lab.studies.prs import build
    from funcbwd_lab.studies.prs.effects import outcome
    from funcbwd_lab.studies.yourcode.cases.issues import zeros_then_item_assignment as f

    build.load()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(B, 5, 6, generator=g), torch.randn(B, 5, 6, generator=g)
    comps = {"vmap(jacrev(f)) (the issue's repro)": (lambda: vmap(jacrev(f))(x, y), jacrev),
             "vmap(jacrev(functionalize(f)))": (lambda: vmap(jacrev(functionalize(f)))(x, y), jacrev),
             "vmap(jacfwd(functionalize(f)))": (lambda: vmap(jacfwd(functionalize(f)))(x, y), jacfwd)}
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (call, jac) in comps.items():
            row = {"composition": name}
            for label, ks in KERNELS.items():
                with build.kernels(ks):
                    row[label] = outcome(call, lambda: torch.stack([jac(f)(x[i], y[i])
                                                                    for i in range(B)]))
            rows.append(row)
    return {"schema": SCHEMA, "torch": torch.__version__, "rows": rows}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
