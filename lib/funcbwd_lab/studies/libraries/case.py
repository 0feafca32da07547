"""One case of the installed-library study: a library's public function or module, called as its
users call it.

A :class:`LibCase` names the call (``call``: the line a user writes), where users call it so
(``cite``: a file of the library's docs, tests or examples, ``owner/repo: path``) and how to run
it: ``build()`` imports the installed library and returns a fresh :class:`Built` on every call
(a new module, its buffers as constructed: no run sees another's writes), ``args(gen)`` draws one
sample's arguments. Nothing of the library is re-created or edited: ``build`` only constructs
(``timm.create_model(..., pretrained=False)``, a transformers model from a config) and calls.

Three kinds of case, each with its transforms (:data:`KIND_TRANSFORMS`):

* ``function``: ``fn(*args)`` returns one tensor; it runs under vmap, vmap(vjp), vmap(jacrev),
  jacrev, jacfwd and hessian, with respect to the argument at ``diff`` (batched positions
  ``batched``);
* ``model``: ``fn`` is an ``nn.Module`` classifier and ``args`` one ``(input, target)`` sample;
  it runs under per-sample gradients of its loss (``functional_call`` + ``vmap(grad(loss))``, as
  the torch.func tutorial writes it);
* ``opacus``: the same model under Opacus's ``GradSampleModule(..., force_functorch=True)``
  (its functorch grad sampler: ``vmap(grad)`` per layer inside the backward pass).

``skip`` names each transform of the kind that does not apply and why (never a failure: a
failure is measured). ``owner`` (of :class:`Built`) is the module whose buffers are the caller's
state: recorded after every call and compared with the per-sample loop's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import torch

FUNCTION_TRANSFORMS = ("vmap", "vmap_vjp", "vmap_jacrev", "jacrev", "jacfwd", "hessian")
TRANSFORMS = FUNCTION_TRANSFORMS + ("per_sample_grad", "opacus")
KIND_TRANSFORMS = {"function": FUNCTION_TRANSFORMS, "model": ("per_sample_grad",),
                   "opacus": ("opacus",)}
#: the group a case belongs to: where the library writes in place, or a control
GROUPS = {"inplace": "the call writes in place (or calls code torch.func refuses) somewhere",
          "control": "a control: no in-place write on the path; plain torch.func should work"}


class Built(NamedTuple):
    fn: Callable[..., Any]
    owner: torch.nn.Module | None = None  # whose buffers are the caller's state


@dataclasses.dataclass(frozen=True)
class LibCase:
    """See the module docstring."""

    name: str
    library: str
    call: str
    cite: str
    build: Callable[[], Built]
    args: Callable[[torch.Generator], tuple]
    group: str = "inplace"
    kind: str = "function"
    batched: tuple[int, ...] = (0,)
    diff: int = 0
    skip: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: what the case is about (one line for the docs)
    what: str = ""
    randomness: str | None = None
    #: plain torch.func crashes the process on this case (why): its plain arm runs in a child
    #: process (:func:`funcbwd_lab.studies.libraries.harness.isolated_plain`), a crash recorded
    isolate: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KIND_TRANSFORMS:
            raise ValueError(f"{self.name}: kind {self.kind!r} not in {list(KIND_TRANSFORMS)}")
        if self.group not in GROUPS:
            raise ValueError(f"{self.name}: group {self.group!r} not in {list(GROUPS)}")
        unknown = set(self.skip) - set(KIND_TRANSFORMS[self.kind])
        if unknown:
            raise ValueError(f"{self.name}: skip names transforms of no {self.kind}: {unknown}")

    @property
    def transforms(self) -> tuple[str, ...]:
        """The transforms the case runs under (those of its kind it does not skip)."""
        return tuple(t for t in KIND_TRANSFORMS[self.kind] if t not in self.skip)

    def not_applicable(self) -> dict[str, str]:
        """Every transform the case does not run under, with why."""
        other = {"function": "a function: per-sample gradients and Opacus apply to models",
                 "model": "a whole model: measured by per-sample gradients of its loss",
                 "opacus": "a model under Opacus's grad sampler (its own transform)"}[self.kind]
        out = {t: other for t in TRANSFORMS if t not in KIND_TRANSFORMS[self.kind]}
        out.update(self.skip)
        return out

    def sample(self, seed: int) -> tuple:
        return self.args(torch.Generator().manual_seed(seed))


#: the dtype of a function case's arguments: float64, so that a batched computation and the
#: per-sample loop agree to roundoff far below any real difference (a whole model's are drawn in
#: float32 and made float64 with the model, :func:`funcbwd_lab.studies.libraries.cases.module_fn`)
DTYPE = torch.float64


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=dtype)


def rand(gen: torch.Generator, *shape: int, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    return torch.rand(shape, generator=gen, dtype=dtype)


def randint(gen: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(high, shape, generator=gen)


def randn32(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """A model's input: float32, its parameters' dtype."""
    return randn(gen, *shape, dtype=torch.float32)
