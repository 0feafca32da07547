"""nflows 0.14: transforms (each sample a mini-batch of 2 rows: nflows wants 2-d inputs).
``nflows.flows`` is not used: it imports matplotlib, which the lock leaves out."""

from __future__ import annotations

from funcbwd_lab.studies.libraries.case import randn
from funcbwd_lab.studies.libraries.cases import lib, module_fn

L = "nflows"
D = 3


def T():
    return lib("nflows.transforms")


def cite(path: str) -> str:
    return f"bayesiains/nflows: tests/{path}"


def rows(g):
    return (randn(g, 2, D),)


def transform(name: str, call: str, path: str, make, **kw):
    return module_fn(f"nflows.transforms.{name}", L, call, cite(path), make, rows,
                     call_with=lambda t: (lambda x: t(x)[0]), **kw)


def _composite():
    t = T()
    return t.CompositeTransform([t.MaskedAffineAutoregressiveTransform(D, 8),
                                 t.ReversePermutation(D)])


CASES = [
    transform("BatchNorm", "BatchNorm(3)(inputs) (train mode)", "transforms/normalization_test.py",
              lambda: T().BatchNorm(D).train(), what="running statistics written in train mode"),
    transform("ActNorm", "ActNorm(3)(inputs)", "transforms/normalization_test.py",
              lambda: T().ActNorm(D).train(),
              what="initializes its parameters from the first batch, through .data",
              isolate="p.data = a value a grad transform tracks: torch 2.13 segfaults"),
    transform("MaskedAffineAutoregressiveTransform", "MaskedAffineAutoregressiveTransform(3, 8)",
              "transforms/autoregressive_test.py",
              lambda: T().MaskedAffineAutoregressiveTransform(D, 8)),
    transform("MaskedPiecewiseRationalQuadraticAutoregressiveTransform",
              "MaskedPiecewiseRationalQuadraticAutoregressiveTransform(3, 8, num_bins=4)",
              "transforms/autoregressive_test.py",
              lambda: T().MaskedPiecewiseRationalQuadraticAutoregressiveTransform(
                  D, 8, num_bins=4, tails="linear"),
              what="spline: writes inside/outside the interval through masks"),
    transform("LULinear", "LULinear(3)(inputs)", "transforms/lu_test.py",
              lambda: T().LULinear(D), group="control"),
    transform("NaiveLinear", "NaiveLinear(3)(inputs)", "transforms/linear_test.py",
              lambda: T().NaiveLinear(D)),
    transform("Sigmoid", "Sigmoid()(inputs)", "transforms/nonlinearities_test.py",
              lambda: T().Sigmoid(), group="control"),
    transform("Tanh", "Tanh()(inputs)", "transforms/nonlinearities_test.py",
              lambda: T().Tanh(), what="checks its domain with torch.max(...) on the values"),
    transform("ReversePermutation", "ReversePermutation(3)(inputs)",
              "transforms/permutations_test.py", lambda: T().ReversePermutation(D),
              group="control"),
    transform("CompositeTransform", "CompositeTransform([MaskedAffineAutoregressive..., "
              "ReversePermutation(3)])(inputs)", "transforms/standard_test.py", _composite),
]
