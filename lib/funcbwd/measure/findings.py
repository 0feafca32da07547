"""Torch bugs the workbench found, written up as upstream bug reports that prove themselves.

A :class:`Finding` is data: a title, the torch version it was first seen on, a minimal repro that
imports nothing but torch, the batching rule at fault (file and function in pytorch/pytorch) and a
family of related cases. Nothing in a report is typed in by hand: :meth:`Finding.check` executes
the repro and every case in a fresh namespace and compares what the transform returned with a
per-sample Python loop, and checks that an emulation of the rule as written explains the result
and the proposed fix removes it (:mod:`funcbwd.measure.findings_check`, which also holds the
emulations). :class:`Report` (:mod:`funcbwd.measure.findings_report`) renders the result as a
PyTorch bug report, plain text or JSON; ``python -m funcbwd findings`` (:mod:`funcbwd.cli.findings`)
prints them. The names of the three modules' public API are importable from this one.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from funcbwd import internals
from funcbwd.errors import BadInputError
from funcbwd.measure.findings_check import (ATOL, RTOL, STATUSES, Case, CaseResult, Outcome, Rule, compare,
                                            emulate_index_fill, emulate_masked_select, run, versions)
from funcbwd.measure.findings_report import Report


@dataclasses.dataclass(frozen=True)
class Finding:
    key: str
    title: str
    torch_seen: str
    summary: str  # the bug in two or three sentences, for the report
    repro: str  # the main case: the smallest program that shows it
    repro_params: dict
    rule: Rule
    claim_text: str  # which cases are affected, in prose; ``claim`` says it as code
    claim: Callable[[dict], bool]
    cases: Callable[[], tuple[Case, ...]]
    emulate: Callable[[dict, bool], torch.Tensor]

    def main_case(self) -> Case:
        return Case("the repro above", self.repro, self.repro_params)

    def check(self, with_cases: bool = True) -> "Report":
        """Run the repro (and the cases) now, on this torch."""
        results = [CaseResult.of(self, c) for c in ((self.main_case(),) + (self.cases() if with_cases else ()))]
        return Report(self, results[0], tuple(results[1:]), internals.batching_kernel_source(self.rule.op),
                      versions())


# ------------------------------------------------------------------------------ finding 1: masked_select
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


# ------------------------------------------------------------------------------ finding 2: index_fill
INDEX_FILL_REPRO = '''\
import torch
from torch.func import vmap

x = torch.zeros(5)  # not batched
dim, index = 0, torch.tensor([0, 3])
values = torch.tensor([1.0, 2.0, 3.0])  # a batch of 0-dim fill values
f = lambda v: x.index_fill(dim, index, v)
looped = torch.stack([f(v) for v in values])  # per-sample loop: the reference
batched = vmap(f)(values)  # every row is filled with 3.0, the last value
print("vmap:", batched, "per-sample loop:", looped, sep="\\n")
'''


def _index_fill_case(x_expr: str, dim: int, index_expr: str, batch: int = 3, kind: str = "value") -> Case:
    """kind: value (only the 0-dim value batched), self (self and value), index (index and
    value), index_only (index batched, value an unbatched 0-dim tensor), jacfwd (value computed
    from the input of jacfwd)."""
    head = ("import torch\nfrom torch.func import jacfwd, jvp, vmap\n\n"
            f"x = {x_expr}\ndim, index = {dim}, {index_expr}\n"
            f"values = torch.arange(1.0, {batch + 1}.0)\n")
    bodies = {
        "value": ("f = lambda v: x.index_fill(dim, index, v)\n"
                  "looped = torch.stack([f(v) for v in values])\nbatched = vmap(f)(values)\n"),
        "self": ("xs = torch.stack([x - b for b in range(len(values))])\n"
                 "f = lambda s, v: s.index_fill(dim, index, v)\n"
                 "looped = torch.stack([f(s, v) for s, v in zip(xs, values)])\nbatched = vmap(f)(xs, values)\n"),
        "index": ("indices = torch.stack([index.roll(b) for b in range(len(values))])\n"
                  "f = lambda i, v: x.index_fill(dim, i, v)\n"
                  "looped = torch.stack([f(i, v) for i, v in zip(indices, values)])\n"
                  "batched = vmap(f)(indices, values)\n"),
        "index_only": ("indices = torch.stack([index.roll(b) for b in range(len(values))])\n"
                       "value = torch.tensor(7.0)\nf = lambda i: x.index_fill(dim, i, value)\n"
                       "looped = torch.stack([f(i) for i in indices])\nbatched = vmap(f)(indices)\n"),
        "jacfwd": ("w = values  # f(v) = x.index_fill(dim, index, v @ w): d/dv of the fill value is w\n"
                   "f = lambda v: x.index_fill(dim, index, v @ w)\nv = torch.ones(len(w))\n"
                   "looped = torch.stack([jvp(f, (v,), (e,))[1] for e in torch.eye(len(w))], dim=-1)\n"
                   "batched = jacfwd(f)(v)\n"),
    }
    what = {"value": "value batched", "self": "self and value batched", "index": "index and value batched",
            "index_only": "index batched, value unbatched tensor", "jacfwd": "jacfwd, fill value v @ w"}[kind]
    shown_index = index_expr.replace("torch.tensor(", "")[:-1]
    label = f"{what}: {x_expr.replace('torch.', '')}, dim={dim}, index {shown_index}, batch {batch}"
    params = {"kind": kind, "batch": batch, "dim": dim}
    # emulated: the per-entry loop path (batched value); not the jacfwd case (its vmap runs inside
    # the jvp formula) nor the unbatched-value case (the rule's other path, an index arithmetic)
    return Case(label, head + bodies[kind], params, emulable=kind not in ("jacfwd", "index_only"))


def _index_fill_cases() -> tuple[Case, ...]:
    c, i2 = _index_fill_case, "torch.tensor([0, 3])"
    return (
        c("torch.zeros(5)", 0, i2, batch=1), c("torch.zeros(5)", 0, i2, batch=2),
        c("torch.zeros(5)", -1, i2), c("torch.zeros(5)", 0, "torch.tensor([2])"),
        c("torch.zeros(5)", 0, "torch.tensor(2)"),
        c("torch.zeros(4, 5)", 1, i2), c("torch.zeros(4, 5)", 0, "torch.tensor([0, 2])"),
        c("torch.zeros(4, 5)", -1, i2), c("torch.zeros(2, 3, 5)", 2, i2),
        c("torch.zeros(2, 3, 5)", 1, "torch.tensor([0, 2])"), c("torch.zeros(())", 0, "torch.tensor([0])"),
        c("torch.ones(5)", 0, i2, kind="self"), c("torch.ones(4, 5)", 1, i2, kind="self"),
        c("torch.zeros(5)", 0, i2, kind="index"), c("torch.zeros(5)", 0, i2, kind="index_only"),
        c("torch.zeros(5)", 0, i2, kind="jacfwd"),
    )


def _index_fill_claim(p: dict) -> bool:
    """Affected iff self is not batched, the 0-dim value is, and the batch has more than one entry."""
    return p["kind"] in ("value", "index", "jacfwd") and p["batch"] > 1


INDEX_FILL = Finding(
    key="index_fill_batched_value",
    title="vmap of index_fill with an unbatched self and a batched 0-dim value fills every entry with the last value",
    torch_seen="2.13.0",
    summary=("`vmap(lambda v: x.index_fill(dim, index, v))(values)`, where `x` is not batched and "
             "the 0-dim fill value `v` is, returns a result in which every batch entry is filled "
             "with the *last* value, with no error or warning. It is the same for every `dim`, "
             "self rank (0-d included) and index shape, and also when the index is batched; "
             "`jacfwd` of a function that fills with a computed value is silently wrong for the "
             "same reason. A batched `self` gives the right answer."),
    repro=INDEX_FILL_REPRO,
    repro_params={"kind": "value", "batch": 3, "dim": 0},
    rule=Rule(
        file="aten/src/ATen/functorch/BatchRulesScatterOps.cpp",
        function="index_fill_int_tensor_batch_rule_impl (via index_fill_int_tensor_batch_rule)",
        op="aten::index_fill.int_Tensor",
        introduced_by="pytorch/pytorch#91364",
        flaw=("With a batched `value` it takes the per-entry loop path: `self_ = ensure_has_bdim(self_, "
              "self_bdim.has_value(), batch_size)` turns an unbatched `self` into an *expanded* view "
              "(batch stride 0, every entry the same memory), and the loop then calls "
              "`self_.select(0, i).index_fill_(dim, index_.select(0, i), value_.select(0, i))`, each "
              "iteration overwriting the same storage, so the last value wins for all entries. The "
              "non-loop path clones the expanded self (`self_bdim.has_value() ? self_ : "
              "self_.clone()`), but only after the loop branch has returned."),
        fix=("move `self_ = self_bdim.has_value() ? self_ : self_.clone();` above the "
             "`if (inplace || value_bdim.has_value())` loop (the in-place variant already errors "
             "earlier for an unbatched self, so only the out-of-place path is affected)."),
    ),
    claim_text=("self not batched and the 0-dim value batched (index batched or not), batch size "
                "above 1; with a batched self, or an unbatched value, the result is right."),
    claim=_index_fill_claim,
    cases=_index_fill_cases,
    emulate=emulate_index_fill,
)

FINDINGS: tuple[Finding, ...] = (MASKED_SELECT, INDEX_FILL)


def finding_keys() -> list[str]:
    return [f.key for f in FINDINGS]


def get_finding(key: str) -> Finding:
    for f in FINDINGS:
        if f.key == key:
            return f
    raise BadInputError(f"unknown finding {key!r}; valid findings: {', '.join(finding_keys())}")


__all__ = ["Finding", "Rule", "Case", "Outcome", "CaseResult", "Report", "FINDINGS", "run", "compare",
           "finding_keys", "get_finding", "versions", "STATUSES", "ATOL", "RTOL"]
