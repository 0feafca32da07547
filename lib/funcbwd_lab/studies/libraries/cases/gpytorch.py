"""gpytorch 1.15.2 (with linear_operator 0.6.1): kernels and the multivariate normal."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import randn
from funcbwd_lab.studies.libraries.cases import fn, lib, module_fn

L = "gpytorch"


def G():
    return lib("gpytorch")


def kernel(name: str, make, **kw):
    return module_fn(f"gpytorch.kernels.{name}", L, f"{name}()(x1, x2).to_dense()",
                     f"cornellius-gp/gpytorch: test/kernels/test_{kw.pop('test')}.py", make,
                     lambda g: (randn(g, 4, 2), randn(g, 3, 2)),
                     call_with=lambda k: (lambda a, b: k(a, b).to_dense()), **kw)


def _mvn_log_prob(y, loc):
    cov = torch.eye(3) + 0.5 * torch.ones(3, 3)
    return G().distributions.MultivariateNormal(loc, cov).log_prob(y)


CASES = [
    kernel("RBFKernel", lambda: G().kernels.RBFKernel(), test="rbf_kernel",
           what="compares x1 and x2 with torch.equal (aten::equal)"),
    kernel("MaternKernel", lambda: G().kernels.MaternKernel(nu=2.5), test="matern_kernel"),
    kernel("PeriodicKernel", lambda: G().kernels.PeriodicKernel(), test="periodic_kernel"),
    kernel("LinearKernel", lambda: G().kernels.LinearKernel(), test="linear_kernel"),
    kernel("RQKernel", lambda: G().kernels.RQKernel(), test="rq_kernel"),
    kernel("ScaleKernel(RBFKernel)", lambda: G().kernels.ScaleKernel(G().kernels.RBFKernel()),
           test="scale_kernel"),
    fn("gpytorch.distributions.MultivariateNormal.log_prob", L,
       "MultivariateNormal(mean, covariance).log_prob(y)",
       "cornellius-gp/gpytorch: test/distributions/test_multivariate_normal.py",
       lambda: _mvn_log_prob, lambda g: (randn(g, 3), randn(g, 3)), batched=(0, 1)),
]
