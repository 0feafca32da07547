"""Real code nobody here wrote, re-created minimally, each with its citation.

Every :class:`Case` holds the function as its author wrote it (``fn``), an out-of-place hand
rewrite that torch differentiates with its own formulas (``rewrite``: the reference "torch's own
gradient" and the baseline of the cost comparison), its arguments, which argument vmap batches
(``batch``) and which one the derivatives are taken with respect to (``diff``).

:func:`evaluate` runs a case under each transform of :data:`TRANSFORMS`, plain and wrapped in
:func:`funcbwd.functionalized`, and checks the wrapped result against a per-sample loop of the
function as written (``torch.autograd.functional``: no vmap) **and** against the rewrite under the
same transform, with :func:`funcbwd.compare.check_close`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch.autograd import functional as AF
from torch.func import hessian, jacfwd, jacrev, vjp, vmap

from funcbwd.errors import first_line
from funcbwd.compare import Mismatch, check_close
from funcbwd.decorator import functionalized

TRANSFORMS = ("vmap", "vmap_vjp", "vmap_jacrev", "jacfwd", "hessian")
BATCH = 4


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    citation: str
    what: str
    fn: Callable[..., Any]
    rewrite: Callable[..., Any]
    make_args: Callable[[], tuple]
    batch: int = 0
    diff: int = 0
    #: transform -> why it is not defined for this case (not run)
    undefined: dict = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------------ pytorch#103329
def zeros_then_item_assignment(x, y):
    """pytorch#103329 (2023-06-09): torch.zeros(x.shape) then item assignment; vmap over both."""
    mat = torch.zeros(x.shape)
    mat[0, 0] = mat[0, 1] + x[0, 0]
    return mat


def zeros_then_item_assignment_rewrite(x, y):
    first = torch.cat([x[0, :1], torch.zeros_like(x[0, 1:])])  # mat[0, 1] is still 0
    return torch.cat([first[None], torch.zeros_like(x[1:])])


# ------------------------------------------------------------------------------ pytorch#97248
def empty_then_copy(x, y):
    """pytorch#97248 (zou3519, 2022-11-15): torch.empty then copy_ from one of two arguments."""
    z = torch.empty(x.shape)
    z.copy_(x)
    z.copy_(y)
    return z


def empty_then_copy_rewrite(x, y):
    return y.expand(x.shape) + 0 * x  # z ends up holding y; x only sets the shape


# ------------------------------------------------------------------------------ functorch#105
W_SHAPE = (6, 6)


def features_into_fresh_tensor(w, x):
    """functorch#105 (2021-08-28): per-sample gradients of a model that writes part of its
    features into a fresh tensor by slice assignment (``vmap(grad(loss))`` over the data)."""
    h = torch.zeros(6)
    h[::2] = (w @ x)[:3]
    h[1::2] = (w @ x)[3:].tanh()
    return (h ** 2).sum()


def features_into_fresh_tensor_rewrite(w, x):
    z = w @ x
    h = torch.stack([z[:3], z[3:].tanh()], dim=1).reshape(6)
    return (h ** 2).sum()


# ------------------------------------------------------------------------------ functorch#207
class ReLUAlpha(torch.autograd.Function):
    """functorch#207 (comment of 2022-12-23), in setup_context style (torch.func needs it): the
    backward masks a copy of the cotangent in place, ``grad_input[input < 0] = 0``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, alpha):
        return x.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        grad_input[x == 0] = ctx.alpha
        return grad_input, None


class ReLUAlphaRewrite(ReLUAlpha):
    """The same backward out of place (``where``)."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = torch.where(x < 0, torch.zeros_like(grad_output), grad_output)
        return torch.where(x == 0, torch.full_like(grad_output, ctx.alpha), grad_input), None


_FUNCTION_REWRAPS: dict[type, type] = {}


def relu_alpha(x, alpha, *, _cls=ReLUAlpha):
    return _cls.apply(x, alpha)


def relu_alpha_rewrite(x, alpha):
    return ReLUAlphaRewrite.apply(x, alpha)


def _relu_args():
    x = torch.randn(5)
    x[1] = 0.0  # the alpha branch
    return (x, 10.0)


CASES = {c.name: c for c in [
    Case("pytorch#103329", "pytorch/pytorch#103329 (open)",
         "torch.zeros(x.shape) then mat[0, 0] = ...; vmap over x and y",
         zeros_then_item_assignment, zeros_then_item_assignment_rewrite,
         lambda: (torch.randn(5, 6), torch.randn(5, 6))),
    Case("pytorch#97248 (x batched)", "pytorch/pytorch#97248 (open), case 1: vmap(f, (0, None))",
         "torch.empty(x.shape), copy_(x), copy_(y); x batched",
         empty_then_copy, empty_then_copy_rewrite, lambda: (torch.randn(3), torch.randn(3)),
         batch=0, diff=0),
    Case("pytorch#97248 (y batched)", "pytorch/pytorch#97248 (open), case 2: vmap(f, (None, 0))",
         "torch.empty(x.shape), copy_(x), copy_(y); y batched",
         empty_then_copy, empty_then_copy_rewrite, lambda: (torch.randn(3), torch.randn(3)),
         batch=1, diff=1),
    Case("functorch#105", "pytorch/functorch#105 (closed)",
         "slice assignment into torch.zeros inside per-sample gradients (vmap over the data)",
         features_into_fresh_tensor, features_into_fresh_tensor_rewrite,
         lambda: (torch.randn(*W_SHAPE), torch.randn(6)), batch=1, diff=0),
    Case("functorch#207", "pytorch/functorch#207 (closed; ReLUAlpha from its 2022-12-23 comment)",
         "custom Function, backward writes grad_input[input < 0] = 0 into a clone",
         relu_alpha, relu_alpha_rewrite, _relu_args, batch=0, diff=0,
         undefined={"jacfwd": "the Function defines no jvp: forward AD refuses it (plain too)",
                    "hessian": "needs forward AD through the Function (no jvp defined)"}),
]}


def wrapped_fn(case: Case) -> Callable[..., Any]:
    """The case's function with :func:`funcbwd.functionalized` applied as a user would."""
    if case.fn is relu_alpha:
        cls = _FUNCTION_REWRAPS.setdefault(ReLUAlpha, functionalized(ReLUAlpha))
        return lambda x, alpha: relu_alpha(x, alpha, _cls=cls)
    return functionalized(case.fn)


# ------------------------------------------------------------------------------ the transforms
def _g(fn, args, case: Case):
    """g(d, b): ``fn`` with d at ``case.diff`` and b at ``case.batch`` (one arg if they agree)."""
    def g(d, b):
        a = list(args)
        a[case.batch] = b
        a[case.diff] = d if case.diff != case.batch else b if d is None else d
        return fn(*a)
    return g


def samples(case: Case, args: tuple, seed: int = 0, batch: int = BATCH) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    b = args[case.batch]
    return torch.randn((batch, *b.shape), generator=gen, dtype=b.dtype)


def transformed(name: str, fn, args: tuple, case: Case, bs: torch.Tensor, cts: torch.Tensor):
    """``fn`` under transform ``name`` (batched over ``bs``; cotangents ``cts``)."""
    g = _g(fn, args, case)
    point = (lambda b: b) if case.diff == case.batch else (lambda b: args[case.diff])
    if name == "vmap":
        return vmap(lambda b: g(None if case.diff == case.batch else args[case.diff], b))(bs)
    if name == "vmap_vjp":
        return vmap(lambda b, c: vjp(lambda d: g(d, b), point(b))[1](c)[0])(bs, cts)
    if name == "vmap_jacrev":
        return vmap(lambda b: jacrev(lambda d: g(d, b))(point(b)))(bs)
    if name == "jacfwd":
        return jacfwd(lambda d: g(d, bs[0]))(point(bs[0]))
    if name == "hessian":
        return hessian(lambda d: g(d, bs[0]).pow(2).sum())(point(bs[0]))
    raise ValueError(name)


def loop(name: str, fn, args: tuple, case: Case, bs: torch.Tensor, cts: torch.Tensor):
    """The per-sample loop of ``fn`` as written: plain autograd, no vmap."""
    g = _g(fn, args, case)
    point = (lambda b: b) if case.diff == case.batch else (lambda b: args[case.diff])
    if name == "vmap":
        return torch.stack([g(None if case.diff == case.batch else args[case.diff], b) for b in bs])
    if name == "vmap_vjp":
        return torch.stack([AF.vjp(lambda d: g(d, b), point(b), c)[1] for b, c in zip(bs, cts)])
    if name == "vmap_jacrev":
        return torch.stack([AF.jacobian(lambda d: g(d, b), point(b)) for b in bs])
    if name == "jacfwd":
        return AF.jacobian(lambda d: g(d, bs[0]), point(bs[0]))
    return AF.hessian(lambda d: g(d, bs[0]).pow(2).sum(), point(bs[0]))


def _run(thunk) -> tuple[Any, str]:
    try:
        return thunk(), ""
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        return None, f"{type(e).__name__}: {first_line(str(e), 160)}"


def _compare(got, want, where: str) -> str:
    try:
        check_close([got], [want], where)
        return ""
    except Mismatch as e:
        return str(e)


def evaluate(case: Case, transform: str) -> dict[str, Any]:
    """One cell: plain and wrapped status, wrapped vs the loop and vs torch (the rewrite)."""
    if transform in case.undefined:
        return {"case": case.name, "transform": transform, "defined": False,
                "why": case.undefined[transform]}
    args = case.make_args()
    bs = samples(case, args, 1)
    with torch.no_grad():
        out = _g(case.fn, args, case)(args[case.diff], bs[0]) if case.diff != case.batch \
            else case.fn(*[bs[0] if i == case.batch else a for i, a in enumerate(args)])
    cts = torch.randn((BATCH, *out.shape), generator=torch.Generator().manual_seed(2))
    _, plain_err = _run(lambda: transformed(transform, case.fn, args, case, bs, cts))
    got, wrapped_err = _run(lambda: transformed(transform, wrapped_fn(case), args, case, bs, cts))
    want_loop, loop_err = _run(lambda: loop(transform, case.fn, args, case, bs, cts))
    want_torch, torch_err = _run(lambda: transformed(transform, case.rewrite, args, case, bs, cts))
    vs_loop = wrapped_err or loop_err or _compare(got, want_loop, f"{transform} vs loop")
    vs_torch = wrapped_err or torch_err or _compare(got, want_torch, f"{transform} vs rewrite")
    return {"case": case.name, "transform": transform, "defined": True,
            "plain": "fail" if plain_err else "ok", "plain_error": plain_err,
            "wrapped": "fail" if wrapped_err else "ok", "wrapped_error": wrapped_err,
            "vs_loop": "ok" if not vs_loop else vs_loop, "vs_torch": "ok" if not vs_torch else vs_torch}


def evaluate_all() -> list[dict[str, Any]]:
    return [evaluate(c, t) for c in CASES.values() for t in TRANSFORMS]
