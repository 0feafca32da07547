"""pyro-ppl 1.9.2: normalizing-flow transforms (``pyro.distributions.transforms``) and tensor
ops (``pyro.ops``)."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import rand, randn
from funcbwd_lab.studies.libraries.cases import fn, lib, module_fn

L = "pyro-ppl"
TR = "pyro-ppl/pyro: tests/distributions/test_transforms.py"
TU = "pyro-ppl/pyro: tests/ops/test_tensor_utils.py"
D = 4


def T():
    return lib("pyro.distributions.transforms")


def TU_():
    return lib("pyro.ops.tensor_utils")


def vec(g):
    return (randn(g, D),)


def flow(name: str, call: str, make, group: str = "inplace", what: str = "",
         double: bool = True):
    dtype = torch.float64 if double else torch.float32
    return module_fn(f"pyro.distributions.transforms.{name}", L, call, TR, make,
                     lambda g: (randn(g, D, dtype=dtype),), group=group, what=what,
                     double=double)


def _log_prob(dtype: torch.dtype):
    def call(t):
        """``TransformedDistribution(base, [t]).log_prob(y)``, as pyro's normalizing-flow
        tutorial scores data (the transform's inverse runs)."""
        d = lib("pyro.distributions")
        base = d.Normal(torch.zeros(D, dtype=dtype), torch.ones(D, dtype=dtype))
        return d.TransformedDistribution(base.to_event(1), [t]).log_prob
    return call


def log_prob(name: str, make, what: str = "", group: str = "inplace", double: bool = True):
    dtype = torch.float64 if double else torch.float32
    return module_fn(f"pyro.distributions.TransformedDistribution({name}).log_prob", L,
                     f"TransformedDistribution(base, [{name}(4)]).log_prob(y)",
                     "pyro-ppl/pyro: tutorial/source/normalizing_flows_i.ipynb", make,
                     lambda g: (randn(g, D, dtype=dtype),), call_with=_log_prob(dtype),
                     group=group, what=what, double=double)


CASES = [
    log_prob("BatchNorm", lambda: T().BatchNorm(D).train(),
             what="its inverse updates the moving averages in place in train mode"),
    log_prob("affine_autoregressive", lambda: T().affine_autoregressive(D, hidden_dims=[8]),
             what="its inverse fills torch.zeros_like(y) one coordinate at a time",
             double=False),
    log_prob("Spline", lambda: T().Spline(D, count_bins=4)),
    log_prob("spline_coupling", lambda: T().spline_coupling(D, count_bins=4), double=False),
    log_prob("Householder", lambda: T().Householder(D)),
    flow("BatchNorm", "BatchNorm(4)(x) (train mode)", lambda: T().BatchNorm(D).train(),
         group="control", what="the forward direction reads its statistics only"),
    flow("Planar", "Planar(4)(x)", lambda: T().Planar(D), group="control"),
    flow("Radial", "Radial(4)(x)", lambda: T().Radial(D), group="control"),
    flow("Householder", "Householder(4)(x)", lambda: T().Householder(D)),
    flow("Sylvester", "Sylvester(4)(x)", lambda: T().Sylvester(D)),
    flow("Spline", "Spline(4)(x)", lambda: T().Spline(D, count_bins=4),
         what="monotonic rational-quadratic spline: masked writes into fresh outputs"),
    flow("Polynomial", "polynomial(4)(x)", lambda: T().polynomial(D)),
    flow("AffineAutoregressive", "affine_autoregressive(4)(x)",
         lambda: T().affine_autoregressive(D, hidden_dims=[8]), double=False),
    flow("SplineCoupling", "spline_coupling(4)(x)", lambda: T().spline_coupling(D, count_bins=4),
         double=False),
    flow("BlockAutoregressive", "block_autoregressive(4)(x)",
         lambda: T().block_autoregressive(D), double=False),
    flow("Permute", "permute(4)(x)", lambda: T().permute(D), group="control"),
    flow("ELUTransform", "ELUTransform()(x)", lambda: T().ELUTransform(), group="control"),
    flow("LeakyReLUTransform", "LeakyReLUTransform()(x)", lambda: T().LeakyReLUTransform()),
    fn("pyro.ops.tensor_utils.safe_normalize", L, "safe_normalize(x)", TU,
       lambda: TU_().safe_normalize, vec, what="writes through .data"),
    fn("pyro.ops.tensor_utils.block_diag_embed", L, "block_diag_embed(mat)", TU,
       lambda: TU_().block_diag_embed, lambda g: (randn(g, 3, 2, 2),)),
    fn("pyro.ops.tensor_utils.convolve", L, "convolve(signal, kernel)", TU,
       lambda: TU_().convolve, lambda g: (randn(g, 8), randn(g, 3)), batched=(0, 1),
       group="control"),
    fn("pyro.ops.tensor_utils.dct", L, "dct(x)", TU, lambda: TU_().dct, lambda g: (randn(g, 6),),
       group="control"),
    fn("pyro.ops.tensor_utils.periodic_cumsum", L, "periodic_cumsum(x, 3, -1)", TU,
       lambda: lambda x: TU_().periodic_cumsum(x, 3, -1), lambda g: (randn(g, 7),)),
    fn("pyro.ops.tensor_utils.precision_to_scale_tril", L, "precision_to_scale_tril(P)", TU,
       lambda: TU_().precision_to_scale_tril,
       lambda g: ((lambda a: a @ a.T + torch.eye(3))(randn(g, 3, 3)),)),
    fn("pyro.ops.stats.autocorrelation", L, "autocorrelation(x)",
       "pyro-ppl/pyro: tests/ops/test_stats.py", lambda: lib("pyro.ops.stats").autocorrelation,
       lambda g: (randn(g, 8),)),
]
