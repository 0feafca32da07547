"""Run a user's function under each transform, plain and wrapped, against a per-sample loop.

The transforms (``TRANSFORMS``) batch **every floating-point tensor argument** (or the positions
``batch`` names; the others are held fixed, as constants of the function) and differentiate the
first of them; a batch of ``BATCH`` random samples of those arguments' shapes stands for the
per-sample data. Each check's reference is computed without vmap from the function **as
written** (the ground truth the user wrote), sample by sample:

* ``vmap``: ``vmap(f)(*batch)`` vs ``[f(*sample) for sample in batch]``;
* ``vjp``: ``vmap(lambda *s, c: vjp(f_s, x_s)[1](c))`` vs plain autograd's vjp per sample;
* ``jacrev``: ``vmap(jacrev(f_s))(...)`` (per-sample Jacobians) vs
  ``torch.autograd.functional.jacobian`` per sample (a Python loop of backward passes);
* ``jacfwd``: ``jacfwd(f)(x)`` vs ``torch.autograd.functional.jacobian(f, x)``;
* ``hessian``: ``hessian(sum f)(x)`` vs ``torch.autograd.functional.hessian``.

When the reference itself raises (plain autograd refuses the code as written) the outcome is
``unknown`` ("reference unavailable"), never "mismatch": a working fix is not reported as failing.
Comparison: :func:`funcbwd.compare.check_close` (the workbench's tolerance).
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
from funcbwd.compare import Mismatch, check_close

BATCH = 3
TRANSFORM_NAMES = ("vmap", "vjp", "jacrev", "jacfwd", "hessian")


# ------------------------------------------------------------------------------ inputs
def load_function(target: str) -> Callable[..., Any]:
    """``MODULE:FUNC`` (a dotted module, or a path to a ``.py`` file) -> the function, or the
    ``torch.autograd.Function`` subclass."""
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
    if isinstance(fn, type) and not issubclass(fn, torch.autograd.Function):
        raise BadInputError(f"{modname}:{func} is a class; give a function or a "
                            "torch.autograd.Function subclass")
    return fn


def parse_batch(text: str | None, args: tuple) -> tuple[int, ...]:
    """``--batch`` positions ("0,2"), default every floating-point tensor argument."""
    floating = tuple(i for i, a in enumerate(args)
                     if isinstance(a, torch.Tensor) and a.is_floating_point())
    if not text:
        return floating
    try:
        chosen = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise BadInputError(f"--batch {text!r}: comma-separated argument positions, e.g. 0,1")
    bad = [p for p in chosen if p not in floating]
    if bad or not chosen:
        raise BadInputError(f"--batch {text!r}: position(s) {bad or chosen} are not floating-point "
                            f"tensor arguments; those are {list(floating)}")
    return chosen


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
    """One function under one transform: ``status`` is "ok", "fail" (raised), "mismatch" or
    "unknown" (no reference to compare with)."""

    status: str
    error: BaseException | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _per_sample(x: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((BATCH, *x.shape), generator=gen, dtype=x.dtype).to(x.device)


def _with(args: tuple, positions: tuple[int, ...], values) -> tuple:
    out = list(args)
    for p, v in zip(positions, values):
        out[p] = v
    return tuple(out)


def _transformed(name: str, fn: Callable, args: tuple, batch: tuple[int, ...], p: int,
                 xs: tuple, cts: torch.Tensor):
    k = batch.index(p)

    def g(bs: tuple) -> Callable[[torch.Tensor], Any]:
        return lambda x: fn(*_with(args, batch, bs[:k] + (x,) + bs[k + 1:]))

    if name == "vmap":
        return vmap(lambda *bs: fn(*_with(args, batch, bs)))(*xs)
    if name == "vjp":
        return vmap(lambda c, *bs: vjp(g(bs), bs[k])[1](c)[0])(cts, *xs)
    if name == "jacrev":
        return vmap(lambda *bs: jacrev(g(bs))(bs[k]))(*xs)
    x = args[p]
    if name == "jacfwd":
        return jacfwd(g(tuple(args[q] for q in batch)))(x)
    return hessian(lambda v: g(tuple(args[q] for q in batch))(v).sum())(x)


def _reference(name: str, fn: Callable, args: tuple, batch: tuple[int, ...], p: int, xs: tuple,
               cts: torch.Tensor):
    from torch.autograd.functional import hessian as ag_hessian, jacobian

    k = batch.index(p)
    samples = [tuple(x[i].clone() for x in xs) for i in range(BATCH)]

    def g(bs: tuple) -> Callable[[torch.Tensor], Any]:
        return lambda x: fn(*_with(args, batch, bs[:k] + (x,) + bs[k + 1:]))

    if name == "vmap":
        with torch.no_grad():
            return torch.stack([fn(*_with(args, batch, s)) for s in samples])
    if name == "vjp":
        return torch.stack([torch.autograd.functional.vjp(g(s), s[k], c)[1]
                            for s, c in zip(samples, cts)])
    if name == "jacrev":
        return torch.stack([jacobian(g(s), s[k]) for s in samples])
    fixed = g(tuple(args[q] for q in batch))
    if name == "jacfwd":
        return jacobian(fixed, args[p])
    return ag_hessian(lambda v: fixed(v).sum(), args[p])


def run_check(fn: Callable[..., Any], args: tuple, name: str, plain: Callable[..., Any],
              batch: tuple[int, ...] | None = None, within: Callable[[], Any] | None = None
              ) -> Outcome:
    """``fn`` (the function, or its wrapper) under transform ``name`` vs the loop over ``plain``;
    the transformed call runs inside ``within()`` (e.g. ``funcbwd.allow_inplace``)."""
    import contextlib

    batch = batch or parse_batch(None, args)
    p = batch[0]
    xs = tuple(_per_sample(args[q], 1 + i) for i, q in enumerate(batch))
    try:
        with torch.no_grad():
            out0 = plain(*args)
        cts = _per_sample(torch.as_tensor(out0), 99)
    except Exception as e:  # noqa: BLE001 - the function as written raises without transforms
        return Outcome("unknown", e, f"the function raised without transforms: "
                                     f"{type(e).__name__}: {first_line(str(e), 120)}")
    try:
        with (within or contextlib.nullcontext)():
            got = _transformed(name, fn, args, batch, p, xs, cts)
    except Exception as e:  # noqa: BLE001 - the failure is what the doctor reports
        return Outcome("fail", e, f"{type(e).__name__}: {first_line(str(e), 160)}")
    try:
        want = _reference(name, plain, args, batch, p, xs, cts)
    except Exception as e:  # noqa: BLE001 - no reference: cannot confirm either way
        return Outcome("unknown", e, f"reference unavailable (the per-sample loop of the code as "
                                     f"written raised {type(e).__name__}: "
                                     f"{first_line(str(e), 100)})")
    try:
        check_close([got], [want], f"{name} vs the per-sample loop")
    except Mismatch as e:
        return Outcome("mismatch", e, str(e))
    return Outcome("ok")
