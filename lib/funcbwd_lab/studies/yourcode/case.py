"""One case of the corpus of public in-place code: what it is, where it comes from, how to run it.

A :class:`Case` is a minimal, faithful re-creation of in-place code from a public library or issue
(``source`` names the repository and file, or the issue), with a hand-written out-of-place
``rewrite`` that computes the same thing with ops torch differentiates and batches itself: the
reference every mechanism is checked against (a per-sample loop of torch's autograd on it).

``build(decorate)`` returns the function as its author wrote it, with ``decorate`` applied where a
user would put ``@funcbwd.functionalized`` (on the function, on a method, or on a custom
``torch.autograd.Function`` class); ``build(lambda f: f)`` is the code as written. It builds fresh
objects on every call (a module's buffers, a filter's state), so no run sees another's writes.

``args(gen)`` draws one sample's arguments from ``gen``; a batch stacks the samples of seeds
0, 1, ... at the ``batched`` positions (so indices and masks stay valid and every batch entry is
distinct). Derivatives are taken with respect to the argument at ``diff`` (floating point).

``classes`` tags the kinds of in-place code the case holds (:data:`CLASSES`); ``undefined`` names
the transforms that have no meaning for the case (not run), each with why.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import torch

#: The kinds of in-place code the corpus covers: tag -> what it means.
CLASSES: dict[str, str] = {
    "factory": "a fresh factory (zeros, empty, ones, full, eye, arange) written in place",
    "like": "a *_like / new_* / clone / repeat / expand-copy of an argument written in place",
    "captured": "a tensor from outside the function (closure, global) used as the base of a write",
    "buffer": "an nn.Module buffer or parameter involved in an in-place write",
    "state": "object state: an attribute written inside the function",
    "readback": "a loop that reads back what it wrote (recurrences, scans, solvers)",
    "scatter": "index_add_ / scatter_ / index_put_ / index_copy_ into a fresh tensor",
    "fn_new": "a custom autograd.Function in setup_context style",
    "fn_old": "a custom autograd.Function in the old style (forward(ctx, ...))",
    "fn_inside": "a custom autograd.Function called inside other code",
    "fn_fwd_inplace": "an in-place write in a custom Function's forward",
    "fn_bwd_inplace": "an in-place write in a custom Function's backward",
    "mask": "a write through a boolean mask (t[mask] = v)",
    "views": "writes into unbind / split / chunk views",
    "data": "a write through .data",
    "random": "random ops (dropout, noise) in or around the write",
    "value_read": "a value read (.item(), a Python branch on a tensor) near the write",
    "arith": "in-place arithmetic (add_, mul_, clamp_, ...) of a batched value into a fresh tensor",
}

#: The transforms every case runs under (:mod:`funcbwd_lab.studies.yourcode.transforms`).
TRANSFORMS = ("vmap", "vmap_vjp", "vmap_jacrev", "jacfwd", "hessian", "vmap_vmap")


def identity(f: Any) -> Any:
    """``build(identity)``: the code as written."""
    return f


@dataclasses.dataclass(frozen=True)
class Case:
    """See the module docstring."""

    name: str
    library: str
    source: str
    what: str
    classes: tuple[str, ...]
    build: Callable[[Callable[[Any], Any]], Callable[..., Any]]
    rewrite: Callable[..., Any]
    args: Callable[[torch.Generator], tuple]
    batched: tuple[int, ...] = (0,)
    diff: int = 0
    undefined: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: "same": random ops draw once per call (vmap(randomness="same")), the loop reseeds per sample
    randomness: str | None = None

    def __post_init__(self) -> None:
        unknown = set(self.classes) - set(CLASSES)
        if unknown:
            raise ValueError(f"{self.name}: unknown classes {sorted(unknown)}")
        if set(self.undefined) - set(TRANSFORMS):
            raise ValueError(f"{self.name}: undefined names unknown transforms")

    def fn(self, decorate: Callable[[Any], Any] = identity) -> Callable[..., Any]:
        return self.build(decorate)

    def sample(self, seed: int) -> tuple:
        return self.args(torch.Generator().manual_seed(seed))


def simple(fn: Callable[..., Any]) -> Callable[[Callable[[Any], Any]], Callable[..., Any]]:
    """``build`` for a plain function: the decorator goes on ``fn`` itself."""
    return lambda decorate: decorate(fn)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=dtype)


def rand(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.rand(shape, generator=gen, dtype=dtype)
