"""Run a user's function under each transform, plain and wrapped, against a per-sample loop.

The transforms (``TRANSFORMS``) differentiate and batch the **first floating-point tensor
argument** (the others are held fixed, as constants of the function); a batch of ``BATCH``
random samples of that argument's shape stands for the per-sample data. Each check's reference
is computed without vmap from the function **as written** (the ground truth the user wrote):

* ``vmap``: ``vmap(f)(xs)`` vs ``[f(x) for x in xs]``;
* ``vjp``: ``vmap(vjp_fn)(cotangents)`` vs ``[vjp_fn(c) for c in cotangents]`` (plain autograd);
* ``jacrev``: ``vmap(jacrev(f))(xs)`` (per-sample Jacobians) vs
  ``torch.autograd.functional.jacobian`` per sample (a Python loop of backward passes);
* ``jacfwd``: ``jacfwd(f)(x)`` vs ``torch.autograd.functional.jacobian(f, x)``;
* ``hessian``: ``hessian(sum f)(x)`` vs ``torch.autograd.functional.hessian``.

Comparison: :func:`funcbwd.run.compare.check_close` (the workbench's tolerance).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch.func import hessian, jacfwd, jacrev, vjp, vmap

from funcbwd.errors import BadInputError, first_line, parse_names
from funcbwd.run.compare import Mismatch, check_close

BATCH = 3
TRANSFORM_NAMES = ("vmap", "vjp", "jacrev", "jacfwd", "hessian")


# ------------------------------------------------------------------------------ inputs
def load_function(target: str) -> Callable[..., Any]:
    """``MODULE:FUNC`` (a dotted module, or a path to a ``.py`` file) -> the function."""
    if target.count(":") != 1 or not all(target.split(":")):
        raise BadInputError(f"expected MODULE:FUNC (e.g. mypkg.losses:loss), got {target!r}")
    modname, func = target.split(":")
    try:
        if modname.endswith(".py"):
            path = Path(modname)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or not path.is_file():
                raise ImportError(f"no file {modname}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(modname)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's one-line error
        raise BadInputError(f"cannot import {modname!r}: {type(e).__name__}: {first_line(str(e))}"
                            " (run from the directory that contains it, or set PYTHONPATH)") from e
    fn = getattr(module, func, None)
    if fn is None or not callable(fn):
        raise BadInputError(f"{modname} has no function {func!r}")
    return fn


def parse_args(text: str) -> tuple:
    """``"torch.randn(3, 5), 2"`` -> the args tuple (evaluated with ``torch`` in scope)."""
    try:
        value = eval(f"({text},)", {"torch": torch, "__builtins__": __builtins__})  # noqa: S307
    except Exception as e:  # noqa: BLE001 - the user's expression
        raise BadInputError(f"--args {text!r} is not a Python expression of the arguments: "
                            f"{type(e).__name__}: {first_line(str(e))}") from e
    if not any(isinstance(a, torch.Tensor) and a.is_floating_point() for a in value):
        raise BadInputError(f"--args {text!r} has no floating-point tensor to batch and "
                            "differentiate (e.g. --args \"torch.randn(3, 5)\")")
    return value


def parse_transforms(text: str | None) -> list[str]:
    return parse_names("transform", text, TRANSFORM_NAMES)


# ------------------------------------------------------------------------------ the checks
@dataclasses.dataclass
class Outcome:
    """One function under one transform: ``status`` is "ok", "fail" (raised) or "mismatch"."""

    status: str
    error: BaseException | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _diff_position(args: tuple) -> int:
    return next(i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point())


def _of_x(fn: Callable[..., Any], args: tuple, p: int) -> Callable[[torch.Tensor], Any]:
    def f(x: torch.Tensor) -> Any:
        return fn(*args[:p], x, *args[p + 1:])
    return f


def _per_sample(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((BATCH, *x.shape), generator=gen, dtype=x.dtype).to(x.device)


def _transformed(name: str, f: Callable, x: torch.Tensor, xs: torch.Tensor, cts: torch.Tensor):
    if name == "vmap":
        return vmap(f)(xs)
    if name == "vjp":
        _, fn = vjp(f, x)
        return vmap(fn)(cts)[0]
    if name == "jacrev":
        return vmap(jacrev(f))(xs)
    if name == "jacfwd":
        return jacfwd(f)(x)
    return hessian(lambda v: f(v).sum())(x)


def _reference(name: str, f: Callable, x: torch.Tensor, xs: torch.Tensor, cts: torch.Tensor):
    from torch.autograd.functional import hessian as ag_hessian, jacobian

    if name == "vmap":
        return torch.stack([f(s) for s in xs])
    if name == "vjp":
        return torch.stack([torch.autograd.functional.vjp(f, x, c)[1] for c in cts])
    if name == "jacrev":
        return torch.stack([jacobian(f, s) for s in xs])
    if name == "jacfwd":
        return jacobian(f, x)
    return ag_hessian(lambda v: f(v).sum(), x)


def run_check(fn: Callable[..., Any], args: tuple, name: str, plain: Callable[..., Any]) -> Outcome:
    """``fn`` (the function, or its wrapper) under transform ``name`` vs the loop over ``plain``."""
    p = _diff_position(args)
    x = args[p]
    xs = _per_sample(x, 1)
    f, ref_f = _of_x(fn, args, p), _of_x(plain, args, p)
    try:
        with torch.no_grad():
            out0 = ref_f(x)
        cts = _per_sample(torch.as_tensor(out0), 2)
        got = _transformed(name, f, x, xs, cts)
    except Exception as e:  # noqa: BLE001 - the failure is what the doctor reports
        return Outcome("fail", e, f"{type(e).__name__}: {first_line(str(e), 160)}")
    try:
        want = _reference(name, ref_f, x, xs, cts)
        check_close([got], [want], f"{name} vs the per-sample loop")
    except Mismatch as e:
        return Outcome("mismatch", e, str(e))
    except Exception as e:  # noqa: BLE001 - the reference itself failed: cannot confirm
        return Outcome("mismatch", e, f"reference loop raised {type(e).__name__}: "
                                      f"{first_line(str(e), 120)}")
    return Outcome("ok")
