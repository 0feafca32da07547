"""entmax 1.3: sparse alternatives to softmax, each an old-style ``autograd.Function``."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import randint, randn
from funcbwd_lab.studies.libraries.cases import fn, lib

L = "entmax"


def E():
    return lib("entmax")


def x(g):
    return (randn(g, 2, 5),)


CASES = [
    fn("entmax.sparsemax", L, "sparsemax(X, dim=-1)", "deep-spin/entmax: entmax/test_topk.py",
       lambda: lambda t: E().sparsemax(t, dim=-1), x),
    fn("entmax.entmax15", L, "entmax15(X, dim=-1)", "deep-spin/entmax: entmax/test_topk.py",
       lambda: lambda t: E().entmax15(t, dim=-1), x),
    fn("entmax.entmax_bisect", L, "entmax_bisect(X, alpha=1.5)",
       "deep-spin/entmax: entmax/test_root_finding.py",
       lambda: lambda t: E().entmax_bisect(t, alpha=1.5), x),
    fn("entmax.sparsemax(k=2)", L, "sparsemax(X, dim=-1, k=2)",
       "deep-spin/entmax: entmax/test_topk.py", lambda: lambda t: E().sparsemax(t, dim=-1, k=2),
       x, what="the top-k path: partial sort, then a threshold"),
    fn("entmax.entmax15_loss", L, "entmax15_loss(X, target)",
       "deep-spin/entmax: entmax/test_losses.py",
       lambda: lambda t, y: E().entmax15_loss(t, y), lambda g: (randn(g, 2, 5), randint(g, 5, 2)),
       batched=(0, 1)),
]
