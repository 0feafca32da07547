"""``whole``: "when vmap sees a backward pass, functionalize the entire backward pass" (functorch#241).

:meth:`Whole.vjp` returns a ``vjp_fn`` that, when called with a vmap level active, runs the whole
backward under ``torch.func.functionalize``: every node (our legacy formulas and torch's own C++
formulas alike) sees functional grads, and the engine's own accumulation is functionalized too.
Without vmap it is the plain ``vjp_fn``. ``functionalize`` pushes and pops its level in a
``finally``, so a raising backward leaves nothing behind.

Reach: only backward passes started through this module's :meth:`Whole.vjp`, :meth:`Whole.grad`
and :meth:`Whole.jacrev` (both built on that ``vjp``). torch's own ``torch.func.vjp``, ``grad``,
``jacrev``, ``hessian`` and ``jacfwd`` call torch's internal vjp and are NOT reached; nor is
``torch.autograd.grad`` / ``.backward()`` called directly.

Known limit (shared with ``hooks``): tensors a formula builds from saved tensors are not
functional; mutating one with a functional grad asserts inside functionalization.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
import torch.func

from funcbwd import internals
from funcbwd.errors import BadInputError
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy


def functionalized_when_vmapped(vjp_fn: Callable[..., Any], strategy: str = "whole") -> Callable[..., Any]:
    """``vjp_fn`` run under ``torch.func.functionalize`` iff a vmap level is active (provenance
    recorded under ``strategy``: ran=True only when functionalize was entered under vmap)."""
    functionalized = torch.func.functionalize(vjp_fn)

    @functools.wraps(vjp_fn)
    def wrapper(*cotangents: Any, **kwargs: Any) -> Any:
        if internals.vmap_active():
            provenance.record(strategy, "vjp_fn functionalized under vmap", True)
            return functionalized(*cotangents, **kwargs)
        provenance.record(strategy, "vjp_fn ran as written (no vmap level)", False)
        return vjp_fn(*cotangents, **kwargs)

    return wrapper


def _argnums(argnums: Any, nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums or not all(isinstance(n, int) and -nargs <= n < nargs for n in nums):
        raise BadInputError(f"argnums {argnums!r} must be an int or a non-empty tuple of ints "
                            f"indexing the {nargs} positional args")
    return tuple(n % nargs for n in nums)


def _partial_in(fn: Callable, args: Sequence[Any], nums: tuple[int, ...]) -> Callable:
    """fn as a function of the args at ``nums`` only (the others fixed)."""

    def f(*diff: Any) -> Any:
        full = list(args)
        for n, d in zip(nums, diff):
            full[n] = d
        return fn(*full)

    return f


class Whole(Strategy):
    name = "whole"
    summary = "the whole vjp_fn runs under torch.func.functionalize iff vmap is active"
    formula_kinds = ("backward",)
    formula_kinds_reason = ("it functionalizes the vjp_fn, i.e. the backward pass; a forward-mode "
                            "formula runs in the forward pass")
    acts_on_builtin_nodes = True
    backward_only = True

    def vjp(self, fn: Callable, *primals: Any, inputs: Sequence[Any] = ()):
        out, vjp_fn = super().vjp(fn, *primals, inputs=inputs)
        return out, self.scoped_backward(functionalized_when_vmapped(vjp_fn, self.name))

    def grad(self, fn: Callable, argnums: Any = 0) -> Callable:
        """Like ``torch.func.grad`` (scalar output), built on :meth:`vjp`."""

        def grad_fn(*args: Any) -> Any:
            nums = _argnums(argnums, len(args))
            out, vjp_fn = self.vjp(_partial_in(fn, args, nums), *[args[n] for n in nums])
            if not isinstance(out, torch.Tensor) or out.numel() != 1:
                raise BadInputError(f"grad needs fn to return a one-element tensor, got "
                                    f"{type(out).__name__} of shape {getattr(out, 'shape', None)}")
            grads = vjp_fn(torch.ones_like(out))
            return grads[0] if isinstance(argnums, int) else tuple(grads)

        return grad_fn

    def jacrev(self, fn: Callable, argnums: Any = 0) -> Callable:
        """Like ``torch.func.jacrev`` for a tensor (or tuple of tensors) output, built on
        :meth:`vjp` and ``vmap`` over one-hot cotangents."""

        def jac_fn(*args: Any) -> Any:
            nums = _argnums(argnums, len(args))
            out, vjp_fn = self.vjp(_partial_in(fn, args, nums), *[args[n] for n in nums])
            single_out = isinstance(out, torch.Tensor)
            outs = (out,) if single_out else tuple(out)
            sizes = [o.numel() for o in outs]
            total = sum(sizes)
            eye = torch.eye(total, dtype=outs[0].dtype, device=outs[0].device)
            basis = tuple(part.reshape(total, *o.shape)
                          for part, o in zip(eye.split(sizes, dim=1), outs))
            # one cotangent per output row, shaped like fn's output: per input (total, *input.shape)
            rows = torch.func.vmap(vjp_fn)(basis[0] if single_out else basis)
            inputs = [args[n] for n in nums]
            jac = tuple(
                tuple(r.split(sizes, dim=0)[i].reshape(*o.shape, *x.shape)
                      for r, x in zip(rows, inputs))
                for i, o in enumerate(outs))
            jac = tuple(j[0] if isinstance(argnums, int) else j for j in jac)
            return jac[0] if single_out else jac

        return jac_fn

    def bookkeeping(self) -> Any:
        """No state of its own; report the Functionalize levels on the stack (none should outlive
        a ``vjp_fn`` call)."""
        return {"functionalize_levels": [lvl for k, lvl in internals.interpreter_stack()
                                         if k == "Functionalize"]}
