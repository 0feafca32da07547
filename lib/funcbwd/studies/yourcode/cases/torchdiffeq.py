"""torchdiffeq (rtqichen/torchdiffeq): one explicit Runge-Kutta step, whose stages are written
into a ``torch.empty`` scratch tensor through ``scratch.data[index] = value`` inside an old-style
``autograd.Function`` (``_UncheckedAssign``, "sneak past the version checker").

Re-creates ``_UncheckedAssign`` and ``_runge_kutta_step`` from ``torchdiffeq/_impl/rk_common.py``
and the Bogacki-Shampine tableau from ``torchdiffeq/_impl/bosh3.py`` at HEAD
657943acefa826ef04c025ebeb1ff5e9d60dc268 (2025-04-03; rk_common.py last changed in c41c8be3,
2025-03-25). Only ``_runge_kutta_step``'s docstring is trimmed. The tableau is cast to the state's dtype as
``RKAdaptiveStepsizeODESolver.__init__`` does; ``func`` is a small user vector field taking the
``perturb`` keyword like torchdiffeq's ``_PerturbFunc``. The decorator goes on the user's step
function (the Function is called inside library code, and reads back the stages it wrote).
"""

from __future__ import annotations

import collections
from enum import Enum

import torch

from funcbwd.studies.yourcode.case import Case, randn


class Perturb(Enum):  # torchdiffeq/_impl/misc.py
    NONE = 0
    PREV = 1
    NEXT = 2


_ButcherTableau = collections.namedtuple('_ButcherTableau', 'alpha, beta, c_sol, c_error')


# rtqichen/torchdiffeq torchdiffeq/_impl/rk_common.py _UncheckedAssign (657943ac)
class _UncheckedAssign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scratch, value, index):
        ctx.index = index
        scratch.data[index] = value  # sneak past the version checker
        return scratch

    @staticmethod
    def backward(ctx, grad_scratch):
        return grad_scratch, grad_scratch[ctx.index], None


# rtqichen/torchdiffeq torchdiffeq/_impl/rk_common.py _runge_kutta_step (657943ac)
def _runge_kutta_step(func, y0, f0, t0, dt, t1, tableau):
    t_dtype = y0.abs().dtype

    t0 = t0.to(t_dtype)
    dt = dt.to(t_dtype)
    t1 = t1.to(t_dtype)

    # We use an unchecked assign to put data into k without incrementing its _version counter, so that the backward
    # doesn't throw an (overzealous) error about in-place correctness. We know that it's actually correct.
    k = torch.empty(*f0.shape, len(tableau.alpha) + 1, dtype=y0.dtype, device=y0.device)
    k = _UncheckedAssign.apply(k, f0, (..., 0))
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
        k = _UncheckedAssign.apply(k, f, (..., i + 1))

    if not (tableau.c_sol[-1] == 0 and (tableau.c_sol[:-1] == tableau.beta[-1]).all()):
        # This property (true for Dormand-Prince) lets us save a few FLOPs.
        yi = y0 + torch.sum(k * (dt * tableau.c_sol), dim=-1).view_as(f0)

    y1 = yi
    f1 = k[..., -1]
    y1_error = torch.sum(k * (dt * tableau.c_error), dim=-1)
    return y1, f1, y1_error, k


# rtqichen/torchdiffeq torchdiffeq/_impl/bosh3.py (657943ac)
_BOGACKI_SHAMPINE_TABLEAU = _ButcherTableau(
    alpha=torch.tensor([1 / 2, 3 / 4, 1.], dtype=torch.float64),
    beta=[
        torch.tensor([1 / 2], dtype=torch.float64),
        torch.tensor([0., 3 / 4], dtype=torch.float64),
        torch.tensor([2 / 9, 1 / 3, 4 / 9], dtype=torch.float64)
    ],
    c_sol=torch.tensor([2 / 9, 1 / 3, 4 / 9, 0.], dtype=torch.float64),
    c_error=torch.tensor([2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8], dtype=torch.float64),
)

# as RKAdaptiveStepsizeODESolver.__init__ casts it
TABLEAU = _ButcherTableau(alpha=_BOGACKI_SHAMPINE_TABLEAU.alpha.to(dtype=torch.float32),
                          beta=[b.to(dtype=torch.float32) for b in _BOGACKI_SHAMPINE_TABLEAU.beta],
                          c_sol=_BOGACKI_SHAMPINE_TABLEAU.c_sol.to(dtype=torch.float32),
                          c_error=_BOGACKI_SHAMPINE_TABLEAU.c_error.to(dtype=torch.float32))


def vector_field(t, y, perturb=Perturb.NONE):
    """The user's dynamics (what odeint wraps in _PerturbFunc)."""
    return torch.tanh(y) * (1.0 + t) - 0.5 * y.roll(1, dims=-1)


T0, DT = torch.tensor(0.0), torch.tensor(0.25)


def bosh3_step(y0):
    """One adaptive-solver step from t0 with step dt: the new state and its error estimate."""
    f0 = vector_field(T0, y0)
    y1, f1, y1_error, k = _runge_kutta_step(vector_field, y0, f0, T0, DT, T0 + DT, TABLEAU)
    return torch.cat([y1, y1_error])


def bosh3_step_rewrite(y0):
    t0, dt, t1 = T0, DT, T0 + DT
    stages = [vector_field(t0, y0)]
    yi = y0
    for alpha_i, beta_i in zip(TABLEAU.alpha, TABLEAU.beta):
        ti = t1 if alpha_i == 1. else t0 + alpha_i * dt
        yi = y0 + torch.sum(torch.stack(stages, dim=-1) * (beta_i * dt), dim=-1)
        stages.append(vector_field(ti, yi))
    k = torch.stack(stages, dim=-1)
    # bosh3's c_sol is its last beta row (FSAL): y1 is the last stage's state
    return torch.cat([yi, torch.sum(k * (dt * TABLEAU.c_error), dim=-1)])


CASES = [
    Case("torchdiffeq:_runge_kutta_step", "torchdiffeq",
         "rtqichen/torchdiffeq torchdiffeq/_impl/rk_common.py _runge_kutta_step, _UncheckedAssign; "
         "bosh3.py tableau (657943ac)",
         "k = torch.empty(*f0.shape, 4); k = _UncheckedAssign.apply(k, f, (..., i)) writes "
         "scratch.data[index] = value in an old-style Function; each stage reads k[..., :i + 1]",
         ("factory", "fn_old", "fn_inside", "fn_fwd_inplace", "data", "readback"),
         lambda decorate: decorate(bosh3_step), bosh3_step_rewrite, lambda g: (randn(g, 4),)),
]
