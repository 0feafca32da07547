"""zuko 1.6.0: normalizing flows (``flow().log_prob(x)``, as zuko's README writes it)."""

from __future__ import annotations

from funcbwd_lab.studies.libraries.case import randn
from funcbwd_lab.studies.libraries.cases import lib, module_fn

L = "zuko"
TESTS = "probabilists/zuko: tests/test_flows.py"
D = 3


def Z():
    return lib("zuko.flows")


def flow(name: str, make, **kw):
    return module_fn(f"zuko.flows.{name}", L, f"{name}(features=3, context=0)().log_prob(x)",
                     TESTS, make, lambda g: (randn(g, D),),
                     call_with=lambda f: (lambda x: f().log_prob(x)), **kw)


CASES = [
    flow("MAF", lambda: Z().MAF(D, 0, transforms=1, hidden_features=[8])),
    flow("NSF", lambda: Z().NSF(D, 0, bins=4, transforms=1, hidden_features=[8]),
         what="monotonic rational-quadratic spline"),
    flow("NAF", lambda: Z().NAF(D, 0, transforms=1, hidden_features=[8]),
         what="monotonic network, inverted by bisection"),
    flow("SOSPF", lambda: Z().SOSPF(D, 0, transforms=1, hidden_features=[8])),
    flow("BPF", lambda: Z().BPF(D, 0, transforms=1, hidden_features=[8])),
    flow("RealNVP", lambda: Z().RealNVP(D, 0, transforms=1, hidden_features=[8])),
    flow("GF", lambda: Z().GF(D, 0, components=2)),
    module_fn("zuko.mixtures.GMM", L, "GMM(features=3, context=0)().log_prob(x)", TESTS,
              lambda: lib("zuko.mixtures").GMM(D, 0, components=2, hidden_features=[8]),
              lambda g: (randn(g, D),), call_with=lambda f: (lambda x: f().log_prob(x)),
              group="control"),
    flow("CNF", lambda: Z().CNF(D, 0, hidden_features=[8], exact=True),
         what="continuous flow: an ODE solved with adaptive steps"),
]
