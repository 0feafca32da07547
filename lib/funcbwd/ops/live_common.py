"""Shared pieces of the live corpus (docs/live-sites.md): the site record, the pinned core
commit, and the seeded sample builders used by :mod:`funcbwd.ops.live_backward` and
:mod:`funcbwd.ops.live_jvp`.

A *site* is one ``isTensorSubclassLike`` / ``areAnyTensorSubclassLike`` decision in
``torch/csrc/autograd/FunctionsManual.cpp`` (pytorch/pytorch at :data:`COMMIT`) that picks an
in-place fast path for plain tensors and an out-of-place path for subclass-like tensors, or a
data-dependent path (a "control"). Each registered live op names one site by ``Site.op_name``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch

COMMIT = "002ca6715ba1ab4d2369262b487eeb30bf249911"
CPP = "torch/csrc/autograd/FunctionsManual.cpp"
#: every kind a live site can have: an in-place site of a backward helper, of a forward-mode
#: (JVP) helper, or a data-dependent control
SITE_KINDS = ("backward", "jvp", "control")


@dataclasses.dataclass(frozen=True)
class Site:
    """One isTensorSubclassLike decision: ``site_id`` as in docs/live-sites.md
    (``<cpp function>#<k>``), ``kind`` (one of :data:`SITE_KINDS`), ``fast_calls``: the calls
    only its fast path makes, and ``op_name``: the op registered for it. ``counted`` is False for
    a second registration of a site already counted under another kind (matrix_exp's helper,
    counted once as a backward site, is also registered for its forward-mode use)."""

    site_id: str
    kind: str
    fast_calls: tuple[str, ...]
    op_name: str = ""
    counted: bool = True

    def __post_init__(self) -> None:
        if self.kind not in SITE_KINDS:
            raise ValueError(f"site kind must be one of {SITE_KINDS}, got {self.kind!r}")
        if not self.op_name:
            object.__setattr__(self, "op_name", op_name_for(self.site_id))


def op_name_for(site_id: str, suffix: str = "") -> str:
    """``live_<cpp function>_<k>`` for site ``<cpp function>#<k>`` (an identifier, so the
    composite strategy can make it a ``torch.library`` op); ``suffix`` goes before ``_<k>``."""
    fn, k = site_id.split("#")
    return f"live_{fn}{suffix}_{k}"


def bind_fast(fn: Callable, fast: Any, label: str) -> Callable:
    """``fn`` with its keyword ``fast`` bound (which sites take the in-place branch)."""
    bound = functools.partial(fn, fast=fast)
    bound.__name__ = f"{fn.__name__}[{label}]"  # type: ignore[attr-defined]
    bound.__doc__ = fn.__doc__
    bound.__wrapped_formula__ = fn  # type: ignore[attr-defined]  (funcbwd.views.display shows fn's source)
    return bound


def torch_jvp_rule(op: Callable, grad_positions: tuple[int, ...]) -> Callable:
    """The wrapper's forward-mode rule: torch's own jvp of ``op`` (not under study here), over
    the args the formula differentiates (autograd.Function also hands tangents for the others,
    e.g. a bce ``weight`` torch cannot differentiate)."""

    def rule(args: tuple, outs: tuple, tangents: tuple) -> tuple:
        pos = [i for i in grad_positions if i < len(tangents) and isinstance(tangents[i], torch.Tensor)]
        if not pos:
            return tuple(torch.zeros_like(o) for o in outs)

        def f(*xs):
            full = list(args)
            for i, x in zip(pos, xs):
                full[i] = x
            out = op(*full)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)

        _, tangent_out = torch.func.jvp(f, tuple(args[i] for i in pos), tuple(tangents[i] for i in pos))
        return tuple(tangent_out)

    return rule



# ------------------------------------------------------------------ seeded sample inputs
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed), dtype=dtype)


def rand(*shape: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(shape, generator=gen(seed), dtype=dtype)


def prob(*shape: int, seed: int) -> torch.Tensor:
    return randn(*shape, seed=seed).sigmoid()

