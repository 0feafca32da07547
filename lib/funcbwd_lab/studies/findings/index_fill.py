"""Finding: ``vmap`` of ``index_fill`` with an unbatched self and a batched 0-dim value.

The repro, the family of cases drawing the bug's boundary, the claim, and the emulation of
``index_fill_int_tensor_batch_rule_impl`` (as written and with the fix); checked by
:meth:`funcbwd_lab.studies.findings.check.Finding.check`, listed by :mod:`funcbwd_lab.studies.findings.findings`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.findings.check import Case, Finding, Rule

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


def emulate_index_fill(ns: dict, fixed: bool) -> torch.Tensor:
    """``index_fill_int_tensor_batch_rule(_impl)`` with a batched value: ``ensure_has_bdim``
    expands an unbatched self (every batch entry is the same memory), then a per-entry loop
    fills each ``select(0, i)`` in place, so the last entry's value wins everywhere. The fix
    materializes the expanded self (``clone``) before the loop, as the non-loop path already does."""
    dim, values = ns["dim"], ns["values"]
    batch = values.shape[0]
    if "xs" in ns:
        self_ = ns["xs"].clone()
    else:
        self_ = ns["x"].clone().expand(batch, *ns["x"].shape)  # clone, then ensure_has_bdim
        if fixed:
            self_ = self_.clone()
    index_ = ns["indices"] if "indices" in ns else ns["index"].expand(batch, *ns["index"].shape)
    for i in range(batch):
        self_.select(0, i).index_fill_(dim, index_.select(0, i), values.select(0, i))
    return self_


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
