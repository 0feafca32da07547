"""Live backward sites of ``linalg_eig_backward`` (real input, complex outputs as real views):
site #1, a control (``allclose`` on the gauge of the eigenvector cotangent), and site #2
(pytorch#79698), ``ret.diagonal(0, -2, -1).copy_(gL)`` or ``diagonal_scatter``.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd.errors import BadInputError
from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample


def linalg_eig_backward(gL, gV, L, V, is_hermitian, real_input, *, fast=()):
    """handle_r_to_c(self, linalg_eig_backward(gL, gV, L, V, is_hermitian)), gL and gV defined.

    ``real_input`` applies derivatives.yaml's handle_r_to_c (real part for a real input)."""
    VhgV = V.mH.matmul(gV)
    diag_VhgV = VhgV.diagonal(0, -2, -1)
    # site 1: V.is_complex() && !isTensorSubclassLike(diag_VhgV): a data-dependent check
    if V.is_complex() and 1 in fast:
        imdiag_VhgV = diag_VhgV.imag
        if not torch.allclose(imdiag_VhgV, torch.zeros_like(imdiag_VhgV), rtol=1e-2, atol=1e-2):
            raise RuntimeError(
                f"{'linalg_eigh_backward' if is_hermitian else 'linalg_eig_backward'}: The "
                "eigenvectors in the complex case are specified up to multiplication by e^{i phi}. "
                "The specified loss function depends on this quantity, so it is ill-defined.")
    if is_hermitian:
        VhgV = 0.5 * (VhgV - VhgV.mH)
    else:
        VhgV = VhgV - V.mH.matmul(V * diag_VhgV.real.unsqueeze(-2))
    Lconj = L.conj()
    Econj = Lconj.unsqueeze(-2) - Lconj.unsqueeze(-1)
    Econj.diagonal(0, -2, -1).fill_(1.0)
    ret = VhgV.div_(Econj)
    # site 2: isTensorSubclassLike(gL)
    if 2 in fast:
        ret.diagonal(0, -2, -1).copy_(gL)
    else:
        ret = ret.diagonal_scatter(gL, 0, -2, -1)
    if is_hermitian:
        gA = V.matmul(ret.matmul(V.mH))
    else:
        gA = torch.linalg.solve(V.mH, ret.matmul(V.mH))
    return gA.real if real_input and gA.is_complex() else gA


def eig_gauge_fix(V: torch.Tensor, gV: torch.Tensor) -> torch.Tensor:
    """Project an eigenvector cotangent onto the gauge-invariant ones (Im diag(V^H gV) = 0).

    Eigenvectors are defined up to a phase, so torch (and site 1 of linalg_eig_backward) reject
    a cotangent whose loss would depend on it; a random complex cotangent must be projected."""
    if not (isinstance(V, torch.Tensor) and isinstance(gV, torch.Tensor)) or V.shape != gV.shape:
        raise BadInputError(f"eig_gauge_fix needs eigenvectors V and a cotangent gV of the same shape, got "
                            f"{getattr(V, 'shape', type(V).__name__)} and {getattr(gV, 'shape', type(gV).__name__)}")
    if not V.is_complex():
        raise BadInputError(f"eig_gauge_fix needs complex eigenvectors (torch.linalg.eig's), got {V.dtype}")
    theta = (V.mH.matmul(gV)).diagonal(0, -2, -1).imag
    return gV - V * (1j * theta).unsqueeze(-2)


def eig_real_views(A):
    """The registered torch_op of the eig sites: torch.linalg.eig with real views of its complex
    outputs, (L, V) as (..., 2) float tensors, so real cotangents and jacrev apply."""
    return tuple(torch.view_as_real(t) for t in torch.linalg.eig(A))


def _complex(t):
    return torch.complex(t[..., 0], t[..., 1])  # any layout (view_as_complex needs stride 1)


def eig_formula_args(a, o, g):
    """linalg_eig_backward's args from the real views; the eigenvector cotangent is projected onto
    the gauge-invariant ones (eig_gauge_fix: linear, idempotent for unit eigenvectors)."""
    V = _complex(o[1])
    return (_complex(g[0]), eig_gauge_fix(V, _complex(g[1])), _complex(o[0]), V, False,
            not a[0].is_complex())


def _similar(eigs: torch.Tensor, seed: int) -> torch.Tensor:
    """A real 3x3 matrix Q B Q^-1 with block B (a diagonal, or a rotation block for a complex pair)."""
    Q = randn(3, 3, seed=seed, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    return Q @ eigs @ torch.linalg.inv(Q)


# ------------------------------------------------------------------ linalg.eig (pytorch#79698)
def _f64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


_ROT = _f64([[1.0, -2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
_EIG = dict(torch_op=eig_real_views, diff_outputs=(0, 1),
            formula_args=eig_formula_args,
            grad_positions=(0,),
            schema="(Tensor gL, Tensor gV, Tensor L, Tensor V, bool is_hermitian, bool real_input) -> Tensor",
            samples=lambda: [
                Sample("real spectrum 1,2,4", (_similar(torch.diag(_f64([1.0, 2.0, 4.0])), 601),), (0,)),
                Sample("complex pair 1±2i, 3", (_similar(_ROT, 602),), (0,))])
_EIG_NOTE = ("Real input, complex outputs, exposed as real views (torch_op returns "
             "view_as_real(L), view_as_real(V)). The eigenvector cotangent must be gauge-invariant "
             "(Im diag(V^H gV) = 0) or torch itself raises: formula_args projects every cotangent "
             "with eig_gauge_fix, and a caller comparing with torch projects it the same way.")
register_site(linalg_eig_backward, 1, "control", fast_calls=("allclose",),
              fast="TORCH_CHECK(at::allclose(imag(diag(V^H gV)), 0))", slow="no check",
              fixed_by="tracking pytorch#69991 (likely pytorch#82957 '[composite compliance] eig_backward'; not verified)",
              notes="allclose returns a Python bool from tensor data. " + _EIG_NOTE, **_EIG)
register_site(linalg_eig_backward, 2, "backward", fast_calls=("copy_",),
              fast="ret.diagonal(0, -2, -1).copy_(gL)", slow="ret.diagonal_scatter(gL, 0, -2, -1)",
              fixed_by="pytorch#79698", notes=_EIG_NOTE, **_EIG)
