"""What every live site module shares (docs/live-sites.md): the site record, the pinned core
commit, the two ways a site is registered (with the tables they fill), and seeded sample builders.

A *site* is one ``isTensorSubclassLike`` / ``areAnyTensorSubclassLike`` decision in
``torch/csrc/autograd/FunctionsManual.cpp`` (pytorch/pytorch at :data:`COMMIT`) that picks an
in-place fast path for plain tensors and an out-of-place path for subclass-like tensors, or a
data-dependent path (a "control"). Each registered live op names one site by ``Site.op_name``.

* :func:`register_site` registers a backward or control site of a helper with a ``fast``
  keyword (the sites taking the in-place branch): ``formula`` is the helper with ``fast=(k,)``,
  ``handfixed`` the helper with ``fast=()``; it records the site in :data:`BACKWARD_SITES`.
* :func:`register_jvp_site` registers a forward-mode site (``kind="jvp"``) from its fast and
  out-of-place entry points; it records the site in :data:`JVP_SITES` / :data:`JVP_SITE_NAMES`,
  its vmap hazards in :data:`VMAP_HAZARD` and its in-place ops in :data:`SITE_INPLACE_OPS`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import torch

from funcbwd_lab.ops.registry import OpSpec, register

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


class _All:
    """A ``fast`` value containing every site: core's behaviour on plain tensors."""

    def __contains__(self, site: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL"


#: ``fast=ALL`` makes a backward helper take every in-place branch, as core does for plain tensors
ALL = _All()


def bind_fast(fn: Callable, fast: Any, label: str) -> Callable:
    """``fn`` with its keyword ``fast`` bound (which sites take the in-place branch)."""
    bound = functools.partial(fn, fast=fast)
    bound.__name__ = f"{fn.__name__}[{label}]"  # type: ignore[attr-defined]
    bound.__doc__ = fn.__doc__
    bound.__wrapped_formula__ = fn  # type: ignore[attr-defined]  (funcbwd_lab.views.display shows fn's source)
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


# ------------------------------------------------------------------ backward and control sites
#: op name -> Site, every backward and control site in registration order
BACKWARD_SITES: dict[str, Site] = {}


def register_site(fn: Callable, k: int, kind: str, *, site_fn: str | None = None,
                           torch_op: Callable, formula_args: Callable, grad_positions: tuple[int, ...],
                           schema: str, samples: Callable[[], list], fast_calls: tuple[str, ...],
                           fast: str, slow: str, fixed_by: str, diff_outputs: tuple[int, ...] = (0,),
                           notes: str = "", batch_entry: Callable | None = None) -> None:
    """Register site ``<site_fn or fn.__name__>#k`` of helper ``fn`` as op ``live_<..>_<k>``:
    ``formula`` = ``fn`` with ``fast=(k,)`` (the in-place branch at this site only, so any failure
    is the site's), ``handfixed`` = ``fn`` with ``fast=()`` (the out-of-place path), ``jvp`` =
    torch's own forward-mode rule of ``torch_op``. ``fast`` / ``slow`` describe the two branches
    in the op's ``source``; a control's ``notes`` start with "negative control: data-dependent"."""
    site = Site(f"{site_fn or fn.__name__}#{k}", kind, fast_calls)
    if kind == "control":
        notes = f"negative control: data-dependent ({fast}). " + notes
    register(OpSpec(
        name=site.op_name,
        torch_op=torch_op,
        formula=bind_fast(fn, (k,), f"fast@{k}"),
        formula_args=formula_args,
        grad_positions=grad_positions,
        source=f"{CPP} {site.site_id} (pytorch@{COMMIT[:7]}): fast {fast}; out-of-place {slow}",
        fixed_by=fixed_by,
        make_samples=samples,
        schema=schema,
        diff_outputs=diff_outputs,
        jvp=torch_jvp_rule(torch_op, grad_positions),
        group="live",
        notes=notes.strip(),
        handfixed=bind_fast(fn, (), "out-of-place"),
        kind="backward",
        batch_entry=batch_entry,
    ))
    BACKWARD_SITES[site.op_name] = site


# ------------------------------------------------------------------ forward-mode (JVP) sites
SRC = "FunctionsManual.cpp @ 002ca6715ba1"
NOT_FIXED = ("nothing yet: core still takes this in-place branch for plain tensors "
             "(pytorch/pytorch FunctionsManual.cpp at 002ca6715ba1)")
#: jvp site op names, in registration order
JVP_SITE_NAMES: list[str] = []
#: op name -> Site (kind "jvp"; ``fast_calls`` are the site's in-place aten ops)
JVP_SITES: dict[str, Site] = {}
#: op name -> the vmap modes ("tangents", "primals") under which its in-place branch meets a
#: batched operand while its target is unbatched (read off the C++; verified by tests/test_live_jvp.py).
VMAP_HAZARD: dict[str, frozenset[str]] = {}
#: op name -> the aten in-place ops its fast branch performs (verified by tracing the fast path).
SITE_INPLACE_OPS: dict[str, frozenset[str]] = {}


def register_jvp_site(site_id: str, *, hazard: Sequence[str], inplace_ops: Sequence[str],
                      name: str = "", counted: bool = True, **fields) -> None:
    """Register JVP site ``site_id`` as an op (``group="live"``, ``kind="jvp"``); ``fields`` are
    the OpSpec's (``formula`` the fast path, ``handfixed`` the out-of-place one, ...)."""
    site = Site(site_id, "jvp", tuple(inplace_ops), name or op_name_for(site_id), counted)
    register(OpSpec(name=site.op_name, group="live", kind="jvp", fixed_by=NOT_FIXED, **fields))
    JVP_SITE_NAMES.append(site.op_name)
    JVP_SITES[site.op_name] = site
    VMAP_HAZARD[site.op_name] = frozenset(hazard)
    SITE_INPLACE_OPS[site.op_name] = frozenset(inplace_ops)


def tangent(tangents: Sequence, i: int, like: torch.Tensor) -> torch.Tensor:
    """Tangent ``i`` (zeros shaped like its primal when it is None)."""
    return torch.zeros_like(like) if tangents[i] is None else tangents[i]


# ------------------------------------------------------------------ seeded sample inputs
def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed), dtype=dtype)


def rand(*shape: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(shape, generator=gen(seed), dtype=dtype)


def prob(*shape: int, seed: int) -> torch.Tensor:
    return randn(*shape, seed=seed).sigmoid()
