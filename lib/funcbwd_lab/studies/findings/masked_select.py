"""Finding: ``vmap(vjp)`` of ``torch.masked_select`` when the input is broadcast to the mask.

The repro, the family of cases drawing the bug's boundary, the claim, and the emulation of
``masked_select_backward_batch_rule`` (as written and with the fix); checked by
:meth:`funcbwd_lab.studies.findings.check.Finding.check`, listed by :mod:`funcbwd_lab.studies.findings.findings`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.findings.check import Case, Finding, Rule, sum_to

MASKED_SELECT_REPRO = '''\
import torch
from torch.func import vjp, vmap

x = torch.tensor([1.0, 2.0, 3.0, 4.0])  # shape (4,), broadcast against the (3, 4) mask
mask = torch.tensor([[True, False, True, True],
                     [False, True, False, False],
                     [True, True, False, True]])
_, vjp_fn = vjp(lambda t: torch.masked_select(t, mask), x)
# a batch of 3 cotangents (3 == mask.shape[0]); entry b is 100 * (b + 1) + [0, 1, ..., 6]
cotangents = 100 * torch.arange(1.0, 4.0)[:, None] + torch.arange(7.0)
looped = torch.stack([vjp_fn(c)[0] for c in cotangents])  # per-sample loop: the reference
batched = vmap(vjp_fn)(cotangents)[0]
print("vmap:", batched, "per-sample loop:", looped, sep="\\n")
'''


def _masked_select_case(x_shape: tuple, mask_shape: tuple, batch: int, kind: str = "vjp",
                        mask_expr: str | None = None) -> Case:
    """kind: vjp (only cotangents batched), x_batched (input too), expand (explicit x.expand to
    the broadcast shape), jacrev (the Jacobian; batch = number of outputs)."""
    xn = 1
    for s in x_shape:
        xn *= s
    rank = len(torch.broadcast_shapes(x_shape, mask_shape))
    head = ("import torch\nfrom torch.func import jacrev, vjp, vmap\n\n"
            f"x = torch.arange(1.0, {xn + 1}.0).reshape({tuple(x_shape)})\n"
            + (f"mask = {mask_expr}\n" if mask_expr else
               f"mask = torch.arange({_numel(mask_shape)}).reshape({tuple(mask_shape)}) % 3 != 1\n"))
    fwd = ("expand_to = torch.broadcast_shapes(x.shape, mask.shape)\n"
           "f = lambda t: torch.masked_select(t.expand(expand_to), mask)\n"
           if kind == "expand" else "f = lambda t: torch.masked_select(t, mask)\n") + "n = f(x).numel()\n"
    if kind == "jacrev":
        body = ("cotangents = torch.eye(n)  # jacrev's batch: one basis cotangent per output\n"
                "looped = torch.stack([vjp(f, x)[1](c)[0] for c in cotangents])\n"
                "batched = jacrev(f)(x)\n")
        batch = None
        label = f"jacrev, x {tuple(x_shape)}, mask {mask_expr.replace('torch.', '') if mask_expr else tuple(mask_shape)}"
    else:
        body = f"cotangents = 100 * torch.arange(1.0, {batch + 1}.0)[:, None] + torch.arange(float(n))\n"
        if kind == "x_batched":
            body += ("xs = torch.stack([x + 10 * b for b in range(len(cotangents))])\n"
                     "per_sample = lambda xi, c: vjp(f, xi)[1](c)[0]\n"
                     "looped = torch.stack([per_sample(xi, c) for xi, c in zip(xs, cotangents)])\n"
                     "batched = vmap(per_sample)(xs, cotangents)\n")
        else:
            body += ("_, vjp_fn = vjp(f, x)\n"
                     "looped = torch.stack([vjp_fn(c)[0] for c in cotangents])\n"
                     "batched = vmap(vjp_fn)(cotangents)[0]\n")
        what = {"vjp": "vmap(vjp_fn)", "x_batched": "vmap over x and cotangents",
                "expand": "vmap(vjp_fn), x.expand explicit"}[kind]
        label = f"{what}, x {tuple(x_shape)}, mask {tuple(mask_shape)}, batch {batch}"
    params = {"x_shape": tuple(x_shape), "mask_shape": tuple(mask_shape), "batch": batch, "kind": kind,
              "rank": rank}
    return Case(label, head + fwd + body, params)


def _numel(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _masked_select_cases() -> tuple[Case, ...]:
    m = _masked_select_case
    return (
        m((4,), (3, 4), 1), m((4,), (3, 4), 2), m((4,), (3, 4), 5),
        m((4,), (5, 4), 3), m((4,), (5, 4), 5),
        m((), (3, 4), 3), m((), (3, 4), 4),
        m((1,), (3, 4), 3),
        m((4,), (2, 3, 4), 2), m((4,), (2, 3, 4), 3),
        m((3, 4), (2, 3, 4), 2),
        m((4,), (1, 4), 3),
        m((1, 4), (3, 4), 3), m((3, 1), (3, 4), 3), m((3, 4), (3, 4), 3), m((3, 4), (4,), 3),
        m((4,), (3, 4), 3, "expand"), m((4,), (3, 4), 2, "expand"),
        m((4,), (3, 4), 3, "x_batched"), m((4,), (2, 3, 4), 2, "x_batched"),
        m((4,), (3, 4), 0, "jacrev"),  # 8 outputs, the batch dim meets mask.shape[0] == 3: raises
        m((4,), (3, 4), 0, "jacrev", "torch.eye(3, 4, dtype=torch.bool)"),  # 3 outputs: silently wrong
        m((4,), (3, 1), 0, "jacrev"),  # 8 outputs of the (3, 4) broadcast
        m((1, 4), (3, 4), 0, "jacrev"),  # same rank: right
    )


def _masked_select_claim(p: dict) -> bool:
    """Affected iff the input is not batched and has fewer dims than the mask, except when the
    mask's one extra leading dim has size 1 (then the misplaced batch dim broadcasts harmlessly)."""
    x, mask = p["x_shape"], p["mask_shape"]
    if p["kind"] in ("x_batched", "expand") or len(x) >= len(mask):
        return False
    return not (len(mask) == len(x) + 1 and mask[0] == 1)


def emulate_masked_select(ns: dict, fixed: bool) -> torch.Tensor:
    """``masked_select_backward_batch_rule`` on the physical tensors, then autograd's sum_to.

    As written, ``maybePadToLogicalRank(self_, self_bdim, ...)`` pads only a tensor that already
    has a batch dim; an unbatched input then gets its batch dim from ``ensure_has_bdim`` *without*
    the padding, so the batch dim lines up with a mask dim. The fix pads after adding it."""
    mask, grad = ns["mask"], ns["cotangents"]
    x_batched = "xs" in ns
    x = ns["x"]
    # what masked_select saw: x, or x expanded explicitly (the "expand" cases)
    seen = x.expand(ns["expand_to"]) if "expand_to" in ns else x
    self_ = ns["xs"] if x_batched else seen
    logical_rank = max(seen.dim(), mask.dim())
    if x_batched or fixed:  # maybePadToLogicalRank: pads only when the tensor has a batch dim
        self_ = self_.reshape(self_.shape[:1] + (1,) * (logical_rank - seen.dim()) + self_.shape[1:]) \
            if x_batched else self_.reshape((1,) * (logical_rank - seen.dim()) + self_.shape)
    if not x_batched:
        self_ = self_.expand(grad.shape[0], *self_.shape)  # ensure_has_bdim
    shape = torch.broadcast_shapes(self_.shape, mask.shape)  # at::infer_size inside the formula
    result = torch.zeros(shape).masked_scatter(mask, grad)  # masked_select_backward on physical tensors
    return sum_to(sum_to(result, seen.shape), x.shape)  # autograd: to what was seen, then expand's backward


MASKED_SELECT = Finding(
    key="masked_select_broadcast",
    title="vmap(vjp) of torch.masked_select is wrong or raises when the input is broadcast to the mask",
    torch_seen="2.13.0",
    summary=("When the input of `torch.masked_select` has fewer dimensions than the mask (implicit "
             "broadcasting), `vmap` over its `vjp` (and so `jacrev`) is wrong. For an input with one "
             "dim fewer than the mask: with a batch size equal to `mask.shape[0]` the gradients are "
             "silently wrong, with batch size 1 the result has `mask.shape[0]` entries, and any "
             "other batch size raises a shape error. (In general the batch dim lands on mask dim "
             "`mask.dim() - x.dim() - 1`.) Expanding the input explicitly (`x.expand(mask.shape)`) "
             "or batching the input as well gives the right answer."),
    repro=MASKED_SELECT_REPRO,
    repro_params={"x_shape": (4,), "mask_shape": (3, 4), "batch": 3, "kind": "vjp", "rank": 2},
    rule=Rule(
        file="aten/src/ATen/functorch/BatchRulesBinaryOps.cpp",
        function="masked_select_backward_batch_rule",
        op="aten::masked_select_backward",
        introduced_by="pytorch/functorch#736",
        flaw=("It pads `self` to the mask's rank with `maybePadToLogicalRank(self_, self_bdim, "
              "max_logical_rank)` *before* `ensure_has_bdim` gives an unbatched `self` its batch "
              "dim; `maybePadToLogicalRank` returns a tensor without a batch dim unchanged "
              "(BatchRulesHelper.cpp), so `self_` becomes `(B, 4)` instead of `(B, 1, 4)` and "
              "`at::masked_select_backward` broadcasts the batch dim against the mask's first dim: "
              "`infer_size((B, 4), (3, 4))` raises unless B is 1 or 3, and when it does not raise the "
              "result's dim 0 (taken as the batch dim) is the mask's rows."),
        fix=("call `ensure_has_bdim` first and then `maybePadToLogicalRank(self_, /*has_bdim=*/0, "
             "max_logical_rank)`, so an unbatched input is padded like a batched one."),
    ),
    claim_text=("the input is not batched (only the cotangents are, as in `vmap(vjp_fn)` and "
                "`jacrev`) and has fewer dims than the mask; the exception is a mask with exactly "
                "one extra leading dim of size 1. The batch size decides the symptom: a batch "
                "size that broadcasts with the mask dim the batch dim lands on (1, or that dim's "
                "size) gives a silently wrong result (values or batch size); any other raises a "
                "RuntimeError."),
    claim=_masked_select_claim,
    cases=_masked_select_cases,
    emulate=emulate_masked_select,
)
