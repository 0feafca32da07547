"""Finding: ``vmap`` of ``torch.roll`` without ``dims`` rolls the batch when each sample is 0-d.

The repro, the family of cases drawing the bug's boundary, the claim, and the emulation of
``roll_batch_rule`` (as written and with the fix); checked by
:meth:`funcbwd_lab.studies.findings.check.Finding.check`, listed by :mod:`funcbwd_lab.studies.findings.findings`.
The OpInfo sweep found it (``roll`` sample 16, a 0-d input: ``mismatch`` in ``vmap_all_args``
and ``vmap_cotangents`` under every strategy, builtin included; data/coverage-all.json.gz).
"""

from __future__ import annotations

import math

import torch

from funcbwd_lab.studies.findings.check import Case, Finding, Rule

ROLL_REPRO = '''\
import torch
from torch.func import vmap

x = torch.arange(3.0)  # a batch of three 0-d samples: 0., 1., 2.
shifts = 1
f = lambda t: torch.roll(t, shifts)  # no dims: roll the flattened tensor; 0-d: unchanged
looped = torch.stack([f(t) for t in x])  # per-sample loop: the reference
batched = vmap(f)(x)  # the samples trade places: [2., 0., 1.]
print("vmap:", batched, "per-sample loop:", looped, sep="\\n")
'''

_HEAD = "import torch\nfrom torch.func import grad, jvp, vjp, vmap\n\n"


def _tensor(shape: tuple, dtype: str = "") -> str:
    if not shape:
        return f"torch.tensor(2.0{', dtype=' + dtype if dtype else ''})"
    n = math.prod(shape)
    base = f"torch.arange({n})" if dtype == "torch.int64" else f"torch.arange({n}.0)"
    return base if len(shape) == 1 else f"{base}.reshape{tuple(shape)}"


def _roll_case(kind: str, shape: tuple, shifts: int | tuple = 1, *, dims: int | None = None,
               in_dim: int = 0, batch: int = 3, dtype: str = "") -> Case:
    """kind: vmap (``vmap(f, in_dims=in_dim)`` over ``xs`` of ``shape``), nested (``vmap(vmap(f))``
    over a 2-d ``grid`` of 0-d samples), vjp (``vmap(vjp_fn)`` over ``batch`` cotangents of one
    unbatched sample of ``shape``), jvp (``vmap`` over ``batch`` tangents), grad
    (``vmap(grad(lambda t: roll(t) * t))``) and reduced (the 0-d tensor made inside ``f`` by a
    sum). ``dims=None`` calls ``torch.roll(t, shifts)``."""
    call = "torch.roll(t, shifts)" if dims is None else "torch.roll(t, shifts, dims)"
    setup = f"shifts{', dims' if dims is not None else ''} = {shifts!r}{f', {dims}' if dims is not None else ''}\n"
    step = f"torch.arange({batch}.0)" if not shape else f"torch.arange({batch * math.prod(shape)}.0).reshape({batch}, *x.shape)"
    if kind == "vmap":
        per_rank, n_batch = len(shape) - 1, shape[in_dim]
        body = (f"xs = {_tensor(shape, dtype)}\n" + (f"in_dim = {in_dim}  # the batch dim\n" if in_dim else "")
                + f"{setup}f = lambda t: {call}\n"
                + (f"looped = torch.stack([f(t) for t in xs.unbind(in_dim)])\nbatched = vmap(f, in_dims=in_dim)(xs)\n"
                   if in_dim else "looped = torch.stack([f(t) for t in xs])\nbatched = vmap(f)(xs)\n"))
        sample = tuple(s for i, s in enumerate(shape) if i != in_dim)
        what = f"vmap{f' in_dims={in_dim}' if in_dim else ''}, {f'samples {sample}' if sample else '0-d samples'}"
    elif kind == "nested":
        per_rank, n_batch = 0, shape[1]
        body = (f"grid = {_tensor(shape)}  # vmap over the rows, then over each row's 0-d entries\n"
                f"{setup}f = lambda t: {call}\n"
                "looped = torch.stack([torch.stack([f(t) for t in row]) for row in grid])\n"
                "batched = vmap(vmap(f))(grid)\n")
        what = f"vmap(vmap(f)), 0-d samples, grid {shape}"
    elif kind in ("vjp", "jvp"):
        per_rank, n_batch = len(shape), batch
        vectors = "cotangents" if kind == "vjp" else "tangents"
        body = (f"x = {_tensor(shape)}  # one sample, not batched\n{setup}f = lambda t: {call}\n"
                f"{vectors} = {step}  # distinct entries\n")
        body += ("_, vjp_fn = vjp(f, x)\nlooped = torch.stack([vjp_fn(c)[0] for c in cotangents])\n"
                 "batched = vmap(vjp_fn)(cotangents)[0]\n" if kind == "vjp" else
                 "push = lambda v: jvp(f, (x,), (v,))[1]\n"
                 "looped = torch.stack([push(v) for v in tangents])\nbatched = vmap(push)(tangents)\n")
        what = (f"vmap(vjp_fn) over {batch} cotangents" if kind == "vjp" else
                f"vmap over {batch} tangents of jvp") + f", {'0-d sample' if not shape else f'sample {shape}'}"
    elif kind == "grad":
        per_rank, n_batch = 0, batch
        body = (f"xs = torch.arange(1.0, {batch + 1}.0)\n{setup}"
                f"g = grad(lambda t: {call} * t)  # = 2 t: a 0-d roll is the identity\n"
                "looped = torch.stack([g(t) for t in xs])\nbatched = vmap(g)(xs)\n")
        what = "vmap(grad(lambda t: roll(t) * t)), 0-d samples"
    else:  # reduced
        per_rank, n_batch = 0, shape[0]
        body = (f"xs = {_tensor(shape)}\n{setup}f = lambda t: {call.replace('(t,', '(t.sum(),')}"
                "  # a 0-d tensor made inside f\n"
                "looped = torch.stack([f(t) for t in xs])\nbatched = vmap(f)(xs)\n")
        what = f"vmap, roll of t.sum(), samples {shape[1:]}"
    first = shifts[0] if isinstance(shifts, tuple) else shifts
    label = (f"{what}, batch {n_batch}, shifts={shifts!r}" + (f", dims={dims}" if dims is not None else "")
             + (f", {dtype.replace('torch.', '')}" if dtype else ""))
    params = {"kind": kind, "rank": per_rank, "batch": n_batch, "dims": dims is not None,
              "shift": -first if kind == "vjp" else first}
    # emulated: every program whose roll sees the batched tensor the namespace holds; not the
    # grad case (two rolls and a product) nor the reduced one (the rolled tensor is an intermediate)
    return Case(label, _HEAD + body, params, emulable=kind not in ("grad", "reduced"))


def _roll_cases() -> tuple[Case, ...]:
    c = _roll_case
    return (
        c("vmap", (3,), 2), c("vmap", (3,), -1), c("vmap", (3,), 3), c("vmap", (3,), 0),
        c("vmap", (3,), (1,)), c("vmap", (1,), 1), c("vmap", (5,), 1), c("vmap", (5,), 7),
        c("vmap", (3,), 1, dtype="torch.int64"),
        c("vmap", (3, 2), 1), c("vmap", (3, 1), 1), c("vmap", (3, 2, 2), 1), c("vmap", (2, 3), 1, in_dim=1),
        c("vmap", (3, 2), 1, dims=0), c("vmap", (3, 2, 2), (1, 1), dims=(0, 1)),
        c("nested", (2, 3), 1),
        c("vjp", (), 1), c("vjp", (), 3), c("vjp", (4,), 1),
        c("jvp", (), 1), c("jvp", (4,), 1),
        c("grad", (), 1), c("reduced", (3, 2), 1),
    )


def _roll_claim(p: dict) -> bool:
    """Affected iff the tensor reaching roll is 0-d per sample, no dims are given, and the shift
    is not a multiple of the batch size (at the vmap level roll runs in)."""
    return p["rank"] == 0 and not p["dims"] and p["shift"] % p["batch"] != 0


def roll_batch_rule(self_: torch.Tensor, shifts: int | tuple, dims: tuple, fixed: bool) -> torch.Tensor:
    """``roll_batch_rule`` on a physical tensor whose dim 0 is the batch dim.

    With dims, each logical dim moves up by one (``getPhysicalDim``). Without, the rule rolls the
    flattened sample (``self_.flatten(1)`` along dim 1, then reshapes back); for a 0-d sample the
    physical tensor is ``(B,)`` and the rule as written makes it ``(1, B)`` (``unsqueeze(0)``), so
    dim 1 is the batch. The fix makes it ``(B, 1)``."""
    if dims:
        rank = self_.dim() - 1
        return torch.roll(self_, shifts, [d % max(rank, 1) + 1 for d in dims])
    old_shape = self_.shape
    if self_.dim() == 1:  # logical rank 0
        self_ = self_.unsqueeze(-1 if fixed else 0)
    return torch.roll(self_.flatten(1), shifts, [1]).reshape(old_shape)


def emulate_roll(ns: dict, fixed: bool) -> torch.Tensor:
    """The rule on what the case batched: ``xs`` (batch dim ``in_dims``), each row of a nested
    ``grid`` (the inner level's physical tensor, per outer entry), or the tangents (jvp: roll's
    forward-mode rule is the roll itself, ``auto_linear``), or the cotangents with the derivative
    of ``tools/autograd/derivatives.yaml``: ``grad.roll(-shifts reversed, dims reversed)``."""
    shifts, dims = ns["shifts"], ns.get("dims", ())
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if "grid" in ns:
        return torch.stack([roll_batch_rule(row, shifts, dims, fixed) for row in ns["grid"]])
    if "cotangents" in ns:
        back = tuple(-s for s in reversed(shifts)) if isinstance(shifts, tuple) else -shifts
        return roll_batch_rule(ns["cotangents"], back, tuple(reversed(dims)), fixed)
    if "tangents" in ns:
        return roll_batch_rule(ns["tangents"], shifts, dims, fixed)
    in_dim = ns.get("in_dim", 0)
    batched_input = ns["xs"] if "xs" in ns else ns["x"]  # the repro calls it x
    return roll_batch_rule(batched_input.movedim(in_dim, 0), shifts, dims, fixed)


ROLL = Finding(
    key="roll_0d_samples",
    title="vmap of torch.roll without dims rolls the batch entries into each other when each sample is 0-d",
    torch_seen="2.13.0",
    summary=("`vmap(lambda t: torch.roll(t, shifts))(x)`, where each sample `t` is 0-d and no `dims` "
             "are given, returns the *batch* rolled by `shifts`: the samples trade values, with no "
             "error or warning, where rolling a 0-d tensor returns it unchanged. It happens for any "
             "shift that is not a multiple of the batch size, for integer tensors too, inside nested "
             "`vmap`, for a 0-d tensor made inside the function, and wherever the backward or "
             "forward-mode rule of `roll` (itself a roll) meets a batched 0-d tensor: `vmap(vjp_fn)`, "
             "`vmap` over `jvp` tangents, `vmap(grad(f))`. Samples of rank 1 or more, or explicit "
             "`dims`, give the right answer."),
    repro=ROLL_REPRO,
    repro_params={"kind": "vmap", "rank": 0, "batch": 3, "dims": False, "shift": 1},
    rule=Rule(
        file="aten/src/ATen/functorch/BatchRulesViews.cpp",
        function="roll_batch_rule",
        op="aten::roll",
        introduced_by="pytorch/functorch#145 (the rule) and pytorch/pytorch#95048 (its 0-d branch)",
        read_at=("pytorch/pytorch's BatchRulesViews.cpp after #95048 (the stored copy names no commit; "
                 "the copy at 4edf10eab424, before #95048, has no 0-d branch); torch 2.13.0 is built "
                 "from cf30153c4c13 (torch.version.git_version)"),
        flaw=("Without `dims` the rule rolls the flattened sample: `at::roll(self_.flatten(1), shifts, "
              "{1})`, then `reshape(old_shape)`. For a 0-d sample the physical `self_` is `(B,)`, and "
              "the branch added by #95048 (`if (logical_rank == 0) { self_ = self_.unsqueeze(0); }`, "
              "with the note that `reshape` with `old_shape` restores the shape) makes it `(1, B)`: "
              "dim 1 is now the batch dim, so the roll moves values between batch entries. "
              "(`derivatives.yaml`: roll's backward is `grad.roll(-shifts, dims)` and its forward "
              "derivative `auto_linear`, so both reach the same rule.)"),
        fix=("unsqueeze the other side, `self_ = self_.unsqueeze(-1);` (`(B, 1)`: dim 1 is the "
             "sample's one element), or return `self_.clone()` for a 0-d sample, since rolling a "
             "0-d tensor is the identity."),
    ),
    claim_text=("the tensor reaching `roll` is 0-d per sample (at the vmap level `roll` runs in), "
                "no `dims` are given, and the shift is not a multiple of that level's batch size; "
                "a batch of one, a full turn of the batch, samples of rank 1 or more and explicit "
                "`dims` are right."),
    claim=_roll_claim,
    cases=_roll_cases,
    emulate=emulate_roll,
)
