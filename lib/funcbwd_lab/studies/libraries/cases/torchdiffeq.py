"""torchdiffeq 0.2.5: ``odeint`` with fixed and adaptive solvers, and the adjoint."""

from __future__ import annotations

import torch

from funcbwd_lab.studies.libraries.case import randn
from funcbwd_lab.studies.libraries.cases import lib, module_fn

L = "torchdiffeq"
TESTS = "rtqichen/torchdiffeq: tests/gradient_tests.py"


class _Field(torch.nn.Module):
    """The right-hand side, a user's module (as in torchdiffeq's examples/ode_demo.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(),
                                       torch.nn.Linear(8, 2))

    def forward(self, t, y):
        return self.net(y)


def solve(method: str, adjoint: bool = False):
    def call(func):
        td = lib("torchdiffeq")
        odeint = td.odeint_adjoint if adjoint else td.odeint
        t = torch.linspace(0.0, 1.0, 3)
        opts = {"step_size": 0.25} if method in ("rk4", "euler", "midpoint") else {}
        return lambda y0: odeint(func, y0, t, method=method, options=opts or None)[-1]
    return call


def case(method: str, adjoint: bool = False, **kw):
    name = f"torchdiffeq.{'odeint_adjoint' if adjoint else 'odeint'}({method})"
    call = f"{'odeint_adjoint' if adjoint else 'odeint'}(func, y0, t, method='{method}')"
    return module_fn(name, L, call, TESTS, _Field, lambda g: (randn(g, 2),),
                     call_with=solve(method, adjoint), **kw)


CASES = [
    case("dopri5", what="adaptive steps; its error-ratio helper is an old-style Function"),
    case("bosh3"),
    case("adaptive_heun"),
    case("dopri8"),
    case("rk4", group="control"),
    case("euler", group="control"),
    case("midpoint", group="control"),
    case("dopri5", adjoint=True, what="the adjoint: an old-style autograd.Function"),
]
