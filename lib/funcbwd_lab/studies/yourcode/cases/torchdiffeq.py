"""torchdiffeq (rtqichen/torchdiffeq, master at 657943a, 2025-04-03): an explicit Runge-Kutta step
writing its stages into a fresh scratch tensor through an old-style custom Function that assigns
through ``.data``, and the fixed-grid solver loop writing each solution point into ``torch.empty``.

Re-created from the upstream code and trimmed (callbacks, event handling, options checking, the
``_PerturbFunc`` wrapper and the other solvers left out); the in-place lines are upstream's as
written.
"""

from __future__ import annotations

import abc
import collections
from enum import Enum

import torch

from funcbwd_lab.studies.yourcode.case import Case, randn

_ButcherTableau = collections.namedtuple('_ButcherTableau', 'alpha, beta, c_sol, c_error')


# torchdiffeq/_impl/misc.py
class Perturb(Enum):
    NONE = 0
    PREV = 1
    NEXT = 2


# torchdiffeq/_impl/bosh3.py _BOGACKI_SHAMPINE_TABLEAU, as RKAdaptiveStepsizeODESolver.__init__
# converts it to y0's dtype
_BOGACKI_SHAMPINE_TABLEAU = _ButcherTableau(
    alpha=torch.tensor([1 / 2, 3 / 4, 1.], dtype=torch.float32),
    beta=[
        torch.tensor([1 / 2], dtype=torch.float32),
        torch.tensor([0., 3 / 4], dtype=torch.float32),
        torch.tensor([2 / 9, 1 / 3, 4 / 9], dtype=torch.float32)
    ],
    c_sol=torch.tensor([2 / 9, 1 / 3, 4 / 9, 0.], dtype=torch.float32),
    c_error=torch.tensor([2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8],
                         dtype=torch.float32),
)


def _vector_field(t, y, perturb=None):
    """The ODE's right-hand side (a user's func; ``perturb`` is what _PerturbFunc passes)."""
    return torch.sin(t) * torch.tanh(y) - 0.5 * y


# rtqichen/torchdiffeq torchdiffeq/_impl/rk_common.py, class _UncheckedAssign (at 657943a; the
# file last changed in c41c8be, 2025-03-25): old style forward(ctx, ...), a tuple index with
# Ellipsis kept on ctx, the write through .data "to sneak past the version checker"
class _UncheckedAssign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scratch, value, index):
        ctx.index = index
        scratch.data[index] = value  # sneak past the version checker
        return scratch

    @staticmethod
    def backward(ctx, grad_scratch):
        return grad_scratch, grad_scratch[ctx.index], None


def _rk_build(decorate):
    _UncheckedAssign_ = decorate(_UncheckedAssign)

    # rtqichen/torchdiffeq torchdiffeq/_impl/rk_common.py, _runge_kutta_step (docstring trimmed):
    # calls _UncheckedAssign.apply inside, reading back the stages it wrote (k[..., :i + 1])
    def _runge_kutta_step(func, y0, f0, t0, dt, t1, tableau):
        t_dtype = y0.abs().dtype

        t0 = t0.to(t_dtype)
        dt = dt.to(t_dtype)
        t1 = t1.to(t_dtype)

        k = torch.empty(*f0.shape, len(tableau.alpha) + 1, dtype=y0.dtype, device=y0.device)
        k = _UncheckedAssign_.apply(k, f0, (..., 0))
        for i, (alpha_i, beta_i) in enumerate(zip(tableau.alpha, tableau.beta)):
            if alpha_i == 1.:
                # Always step to perturbing just before the end time, in case of discontinuities.
                ti = t1
                perturb = Perturb.PREV
            else:
                ti = t0 + alpha_i * dt
                perturb = Perturb.NONE
            yi = y0 + torch.sum(k[..., :i + 1] * (beta_i * dt), dim=-1).view_as(f0)
            f = func(ti, yi, perturb=perturb)
            k = _UncheckedAssign_.apply(k, f, (..., i + 1))

        if not (tableau.c_sol[-1] == 0 and (tableau.c_sol[:-1] == tableau.beta[-1]).all()):
            # This property (true for Dormand-Prince) lets us save a few FLOPs.
            yi = y0 + torch.sum(k * (dt * tableau.c_sol), dim=-1).view_as(f0)

        y1 = yi
        f1 = k[..., -1]
        y1_error = torch.sum(k * (dt * tableau.c_error), dim=-1)
        return y1, f1, y1_error, k

    # RKAdaptiveStepsizeODESolver._adaptive_step's call (rk_common.py), one step from t0
    def rk_step(y0):
        t0, dt = torch.tensor(0.25), torch.tensor(0.5)
        f0 = _vector_field(t0, y0)
        y1, f1, y1_error, k = _runge_kutta_step(_vector_field, y0, f0, t0, dt, t0 + dt,
                                                _BOGACKI_SHAMPINE_TABLEAU)
        return torch.stack([y1, f1, y1_error])

    return rk_step


def rk_step_rewrite(y0):
    tab = _BOGACKI_SHAMPINE_TABLEAU
    t0, dt = torch.tensor(0.25), torch.tensor(0.5)
    t1 = t0 + dt
    ks = [_vector_field(t0, y0)]
    for alpha_i, beta_i in zip(tab.alpha, tab.beta):
        ti = t1 if alpha_i == 1. else t0 + alpha_i * dt
        yi = y0 + sum(k * (b * dt) for k, b in zip(ks, beta_i))
        ks.append(_vector_field(ti, yi))
    k = torch.stack(ks, dim=-1)
    y1 = y0 + torch.sum(k * (dt * tab.c_sol), dim=-1)
    y1_error = torch.sum(k * (dt * tab.c_error), dim=-1)
    return torch.stack([y1, ks[-1], y1_error])


# rtqichen/torchdiffeq torchdiffeq/_impl/solvers.py, class FixedGridODESolver (at 657943a;
# the atol/rtol/norm option handling, callbacks, cubic interpolation and integrate_until_event
# trimmed) and
# torchdiffeq/_impl/fixed_grid.py, class Euler
class FixedGridODESolver(metaclass=abc.ABCMeta):
    order: int

    def __init__(self, func, y0, step_size=None, grid_constructor=None, interp="linear", perturb=False, **unused_kwargs):
        self.func = func
        self.y0 = y0
        self.dtype = y0.dtype
        self.device = y0.device
        self.step_size = step_size
        self.interp = interp
        self.perturb = perturb

        if step_size is None:
            if grid_constructor is None:
                self.grid_constructor = lambda f, y0, t: t
            else:
                self.grid_constructor = grid_constructor
        else:
            if grid_constructor is None:
                self.grid_constructor = self._grid_constructor_from_step_size(step_size)
            else:
                raise ValueError("step_size and grid_constructor are mutually exclusive arguments.")

    @staticmethod
    def _grid_constructor_from_step_size(step_size):
        def _grid_constructor(func, y0, t):
            start_time = t[0]
            end_time = t[-1]

            niters = torch.ceil((end_time - start_time) / step_size + 1).item()
            t_infer = torch.arange(0, niters, dtype=t.dtype, device=t.device) * step_size + start_time
            t_infer[-1] = t[-1]

            return t_infer
        return _grid_constructor

    @abc.abstractmethod
    def _step_func(self, func, t0, dt, t1, y0):
        pass

    def integrate(self, t):
        time_grid = self.grid_constructor(self.func, self.y0, t)
        assert time_grid[0] == t[0] and time_grid[-1] == t[-1]

        solution = torch.empty(len(t), *self.y0.shape, dtype=self.y0.dtype, device=self.y0.device)
        solution[0] = self.y0

        j = 1
        y0 = self.y0
        for t0, t1 in zip(time_grid[:-1], time_grid[1:]):
            dt = t1 - t0
            dy, f0 = self._step_func(self.func, t0, dt, t1, y0)
            y1 = y0 + dy

            while j < len(t) and t1 >= t[j]:
                if self.interp == "linear":
                    solution[j] = self._linear_interp(t0, t1, y0, y1, t[j])
                else:
                    raise ValueError(f"Unknown interpolation method {self.interp}")
                j += 1
            y0 = y1

        return solution

    def _linear_interp(self, t0, t1, y0, y1, t):
        if t == t0:
            return y0
        if t == t1:
            return y1
        slope = (t - t0) / (t1 - t0)
        return y0 + slope * (y1 - y0)


class Euler(FixedGridODESolver):
    order = 1

    def _step_func(self, func, t0, dt, t1, y0):
        f0 = func(t0, y0, perturb=Perturb.NEXT if self.perturb else Perturb.NONE)
        return dt * f0, f0


# torchdiffeq/_impl/odeint.py, odeint (input checks trimmed): the solver object is made per call
def odeint(y0, t):
    solver = Euler(func=_vector_field, y0=y0, step_size=0.25)
    solution = solver.integrate(t)
    return solution


def odeint_rewrite(y0, t):
    grid = [0.0, 0.25, 0.5, 0.75, 1.0]  # what the step_size grid is for t[0] = 0, t[-1] = 1
    ys = [y0]
    for a, b in zip(grid[:-1], grid[1:]):
        ys.append(ys[-1] + (b - a) * _vector_field(torch.tensor(a), ys[-1]))
    out = []
    for tj in t.tolist():
        i = min(int(tj / 0.25), 3)
        a = grid[i]
        out.append(ys[i] + (tj - a) / 0.25 * (ys[i + 1] - ys[i]))
    return torch.stack(out)


_T = torch.tensor([0.0, 0.3, 0.5, 0.85, 1.0])

_NO_JVP = ("_UncheckedAssign defines no jvp: forward AD refuses it as written, eagerly too "
           "(the rewrite, without the Function, has one)")

CASES = [
    Case("torchdiffeq:_UncheckedAssign", "torchdiffeq",
         "rtqichen/torchdiffeq torchdiffeq/_impl/rk_common.py: _UncheckedAssign, "
         "_runge_kutta_step (657943a)",
         "one Bogacki-Shampine step: stages written into torch.empty through an old-style "
         "Function (scratch.data[index] = value, index a tuple with ...), read back each stage",
         ("fn_old", "fn_inside", "fn_fwd_inplace", "data", "factory", "readback"),
         _rk_build, rk_step_rewrite, lambda g: (randn(g, 4),),
         undefined={"jacfwd": _NO_JVP, "hessian": _NO_JVP}),
    Case("torchdiffeq:FixedGridODESolver.integrate", "torchdiffeq",
         "rtqichen/torchdiffeq torchdiffeq/_impl/solvers.py: FixedGridODESolver.integrate, "
         "_grid_constructor_from_step_size, _linear_interp; fixed_grid.py: Euler (657943a)",
         "Euler with step_size: the grid from .item(), solution = torch.empty(len(t), ...), "
         "solution[0] = y0, solution[j] = interp(...) in the loop; branches on time values",
         ("factory", "state", "readback", "value_read"),
         lambda decorate: decorate(odeint), odeint_rewrite,
         lambda g: (randn(g, 3), _T.clone()), batched=(0,), diff=0),
]
