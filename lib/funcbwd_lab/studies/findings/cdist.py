"""Finding: ``vmap(vjp)`` of ``torch.cdist`` when only the cotangents are batched.

The repro, the family of cases drawing the bug's boundary, the claim, and the emulation of
``cdist_backward_batch_rule`` (as written and with the fix); checked by
:meth:`funcbwd_lab.studies.findings.check.Finding.check`, listed by :mod:`funcbwd_lab.studies.findings.findings`.
The OpInfo sweep found it: ``cdist`` mismatches in 130 of its 256 samples in ``vmap_all_args``
(the in_dims choice that batches only the cotangents) and in ``vmap_cotangents``, under every
strategy, builtin included; every p but 0 (data/coverage-all.json.gz).
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.findings.check import Case, Finding, Rule, sum_to

CDIST_REPRO = '''\
import torch
from torch.func import vjp, vmap

torch.manual_seed(0)
x1, x2 = torch.randn(3, 4), torch.randn(5, 4)  # not batched
_, vjp_fn = vjp(lambda a, b: torch.cdist(a, b), x1, x2)  # p=2
cotangents = torch.randn(3, 3, 5)  # a batch of 3 cotangents, distinct entries
looped = torch.stack([vjp_fn(c)[0] for c in cotangents])  # per-sample loop: the reference
batched = vmap(vjp_fn)(cotangents)[0]  # every entry is the gradient for cotangents[0]
print("vmap:", batched, "per-sample loop:", looped, sep="\\n")
'''

#: ``torch.cdist``'s compute_mode names as ``aten::_cdist_forward`` takes them
MODES = {None: None, "use_mm_for_euclid_dist_if_necessary": 0, "use_mm_for_euclid_dist": 1,
         "donot_use_mm_for_euclid_dist": 2}


def _cdist_case(kind: str, p: float = 1.0, *, x1: tuple = (3, 4), x2: tuple = (5, 4), batch: int = 3,
                wrt: int = 0, mode: str | None = None, ct_dim: int = 0) -> Case:
    """x1, x2 (3, 4) and (5, 4) and a batch of 3 unless the label says otherwise.

    kind: vjp (``vmap(vjp_fn)``, only the cotangents batched; ``ct_dim`` their batch dim),
    x1_batched / x2_batched (``vmap`` over that input and the cotangents), jacrev (``jacrev``
    w.r.t. x1) and is_grads_batched (``torch.autograd.grad(..., is_grads_batched=True)``, the
    legacy vmap). ``wrt``: the gradient shown, of x1 (0) or x2 (1)."""
    head = ("import torch\nfrom torch.func import jacrev, vjp, vmap\n\ntorch.manual_seed(0)\n"
            f"x1, x2 = torch.randn{tuple(x1)}, torch.randn{tuple(x2)}\n"
            f"p{', mode' if mode else ''} = {_literal(p)}{f', {mode!r}' if mode else ''}\n"
            f"f = lambda a, b: torch.cdist(a, b, p=p{', compute_mode=mode' if mode else ''})\n"
            "out = f(x1, x2)\n")
    cts = (f"cotangents = torch.randn({batch}, *out.shape)  # distinct entries\n" if not ct_dim else
           f"ct_dim = {ct_dim}  # the batch dim of the cotangents\ncotangents = torch.randn(*out.shape, {batch})\n")
    if kind == "vjp":
        loop_over = "cotangents.unbind(ct_dim)" if ct_dim else "cotangents"
        body = (cts + f"wrt = {wrt}  # the gradient of x{wrt + 1}\n_, vjp_fn = vjp(f, x1, x2)\n"
                f"looped = torch.stack([vjp_fn(c)[wrt] for c in {loop_over}])\n"
                f"batched = vmap(vjp_fn{', in_dims=ct_dim' if ct_dim else ''})(cotangents)[wrt]\n")
        what = f"vmap(vjp_fn){' cotangents batch-last' if ct_dim else ''}, grad of x{wrt + 1}"
    elif kind in ("x1_batched", "x2_batched"):
        mine = kind[:2]
        arg = "(s, x2)" if mine == "x1" else "(x1, s)"
        body = (cts + f"wrt = {wrt}\nxs{mine[1]} = torch.randn({batch}, *{mine}.shape)  # {mine} batched too\n"
                f"per_sample = lambda s, c: vjp(f, *{arg})[1](c)[wrt]\n"
                f"looped = torch.stack([per_sample(s, c) for s, c in zip(xs{mine[1]}, cotangents)])\n"
                f"batched = vmap(per_sample)(xs{mine[1]}, cotangents)\n")
        what = f"vmap over {mine} and cotangents, grad of x{wrt + 1}"
    elif kind == "jacrev":
        body = ("cotangents = torch.eye(out.numel()).reshape(-1, *out.shape)  # jacrev's batch: one per output\n"
                "jacobian_shape = out.shape + x1.shape\n_, vjp_fn = vjp(f, x1, x2)\n"
                "looped = torch.stack([vjp_fn(c)[0] for c in cotangents]).reshape(jacobian_shape)\n"
                "batched = jacrev(f)(x1, x2)\n")
        batch = x1[-2] * x2[-2] * (x1[0] if len(x1) == 3 else 1)
        what = "jacrev w.r.t. x1"
    else:  # is_grads_batched
        body = (cts + "a = x1.clone().requires_grad_()\nout_a = f(a, x2)\n"
                "looped = torch.stack([torch.autograd.grad(out_a, a, c, retain_graph=True)[0] for c in cotangents])\n"
                "batched = torch.autograd.grad(out_a, a, cotangents, is_grads_batched=True)[0]\n")
        what = "autograd.grad(is_grads_batched=True)"
    shapes = "" if (tuple(x1), tuple(x2)) == ((3, 4), (5, 4)) else f", x1 {tuple(x1)}, x2 {tuple(x2)}"
    label = (f"{what}, p={p:g}{shapes}" + (f", batch {batch}" if kind != "jacrev" and batch != 3 else "")
             + (f", {mode}" if mode else ""))
    params = {"kind": kind, "p": p, "batch": batch, "mode": mode, "rows": (x1[-2], x2[-2])}
    # emulated: every program that reaches aten::_cdist_backward through functorch's vmap; not the
    # matrix-multiply path for p=2 (cdist decomposes into _euclidean_dist, another rule) nor the
    # legacy vmap of is_grads_batched
    return Case(label, head + body, params, emulable=kind != "is_grads_batched" and not _mm_path(params))


def _literal(p: float) -> str:
    return "float('inf')" if p == float("inf") else repr(p)


def _mm_path(p: dict) -> bool:
    """Whether cdist takes its matrix-multiply path (``torch.cdist`` in aten/src/ATen/native/
    Distance.cpp: ``p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))``), which never
    reaches ``_cdist_forward`` / ``_cdist_backward``."""
    mode = MODES[p["mode"]] or 0
    return p["p"] == 2 and (mode == 1 or (mode == 0 and max(p["rows"]) > 25))


def _cdist_cases() -> tuple[Case, ...]:
    c = _cdist_case
    return (
        c("vjp", 1.0), c("vjp", 0.0), c("vjp", 0.5), c("vjp", 3.0), c("vjp", float("inf")),
        c("vjp", 1.0, batch=1), c("vjp", 2.0, wrt=1), c("vjp", 1.0, ct_dim=2),
        c("vjp", 1.0, x1=(2, 3, 4), x2=(2, 5, 4)), c("vjp", 1.0, x1=(1, 3, 4), x2=(2, 5, 4)),
        c("vjp", 2.0, x1=(25, 4)), c("vjp", 2.0, x1=(26, 4)),
        c("vjp", 2.0, mode="use_mm_for_euclid_dist"), c("vjp", 2.0, x1=(30, 4), mode="donot_use_mm_for_euclid_dist"),
        c("x1_batched", 1.0), c("x1_batched", 1.0, wrt=1), c("x2_batched", 2.0, wrt=1),
        c("jacrev", 1.0), c("jacrev", 0.0), c("is_grads_batched", 1.0),
    )


def _cdist_claim(p: dict) -> bool:
    """Affected iff only the cotangents are batched (vmap(vjp_fn), jacrev), the batch has more
    than one entry, p is not 0, and cdist takes its ``_cdist_forward`` path."""
    return p["kind"] in ("vjp", "jacrev") and p["batch"] > 1 and p["p"] != 0 and not _mm_path(p)


# ------------------------------------------------------------------------------ the rule, emulated
def _front(t: torch.Tensor, bdim: int | None) -> torch.Tensor:
    return t if bdim is None else t.movedim(bdim, 0)


def _pad_to_logical_rank(t: torch.Tensor, bdim: int | None, rank: int) -> torch.Tensor:
    """``maybePadToLogicalRank``: a batched tensor gets size-1 dims after its batch dim; an
    unbatched one is returned unchanged."""
    if bdim is None:
        return t
    return t.reshape(t.shape[:1] + (1,) * (rank - (t.dim() - 1)) + t.shape[1:])


def _binary_pointwise_helper(a, a_b, b, b_b):
    """functorch's ``_binary_pointwise_helper`` (BatchRulesBinaryOps.cpp): batch dims to the
    front, the batched tensors padded to the larger logical rank."""
    rank = max(a.dim() - (a_b is not None), b.dim() - (b_b is not None))
    return (_pad_to_logical_rank(_front(a, a_b), a_b, rank), _pad_to_logical_rank(_front(b, b_b), b_b, rank))


def cdist_backward_batch_rule(grad, grad_b, x1, x1_b, x2, x2_b, p, cdist, cdist_b, fixed: bool,
                              fix_cdist: bool = True):
    """``cdist_backward_batch_rule`` on physical tensors (``*_b``: batch dim or None), calling the
    real ``aten::_cdist_backward`` kernel: (result, its batch dim or None).

    As written, x1 gets a batch dim only when ``cdist`` has one and ``grad`` only when x1 or x2
    has one; with only ``grad`` batched the kernel (batch size from x1 and x2: none) reads the
    first entry of ``grad`` and the result is returned unbatched. The fix gives x1 and ``cdist``
    the batch dim of ``grad`` too (``fix_cdist=False``: x1 only, to show the second part is
    needed)."""
    if (cdist_b is not None or (fixed and grad_b is not None)) and x1_b is None:
        bs = cdist.shape[cdist_b] if cdist_b is not None else grad.shape[grad_b]
        x1, x1_b = x1.expand(bs, *x1.shape).contiguous(), 0  # ensure_has_bdim(x1, false, bs)
    x1_, x2_ = _binary_pointwise_helper(x1, x1_b, x2, x2_b)
    grad_ = _front(grad, grad_b)
    if (x1_b is not None or x2_b is not None) and grad_b is None:
        grad_ = grad_.expand(x1_.shape[0] if x1_b is not None else x2_.shape[0], *grad_.shape).contiguous()
    if fixed and fix_cdist and cdist_b is None and x1_b is not None:
        cdist = cdist.expand(x1_.shape[0], *cdist.shape).contiguous()
    out = torch.ops.aten._cdist_backward(grad_, x1_, x2_, p, cdist)
    return out, (0 if x1_b is not None or x2_b is not None else None)


def emulate_cdist(ns: dict, fixed: bool, fix_cdist: bool = True) -> torch.Tensor:
    """The forward (``BINARY_POINTWISE(_cdist_forward)``: batched iff an input is), then the
    gradient of ``tools/autograd/derivatives.yaml`` for the input shown: x1's is
    ``_cdist_backward(grad.contiguous(), x1, x2, p, result)``, x2's
    ``_cdist_backward(grad.mT().contiguous(), x2, x1, p, result.mT().contiguous())``, through the
    rule; an unbatched result is the same for every entry; then autograd's sum_to."""
    p, mode, wrt = ns.get("p", 2.0), MODES[ns.get("mode")], ns.get("wrt", 0)
    x1, x2 = ns["x1"], ns["x2"]
    a, a_b = (ns["xs1"], 0) if "xs1" in ns else (x1, None)
    b, b_b = (ns["xs2"], 0) if "xs2" in ns else (x2, None)
    cts = ns["cotangents"].movedim(ns.get("ct_dim", 0), 0)
    fa, fb = _binary_pointwise_helper(a, a_b, b, b_b)
    cd = torch.ops.aten._cdist_forward(fa, fb, p, mode)
    cd_b = 0 if a_b is not None or b_b is not None else None
    if wrt == 0:
        out, out_b = cdist_backward_batch_rule(cts, 0, a, a_b, b, b_b, p, cd, cd_b, fixed, fix_cdist)
    else:
        out, out_b = cdist_backward_batch_rule(cts.mT, 0, b, b_b, a, a_b, p, cd.mT.contiguous(), cd_b,
                                               fixed, fix_cdist)
    per_entry = out if out_b == 0 else out.expand(cts.shape[0], *out.shape)
    result = sum_to(per_entry, (x1 if wrt == 0 else x2).shape)
    return result.reshape(ns["jacobian_shape"]) if "jacobian_shape" in ns else result


CDIST = Finding(
    key="cdist_batched_cotangents",
    title="vmap(vjp) of torch.cdist gives every batch entry the gradient of the first cotangent",
    torch_seen="2.13.0",
    summary=("When only the cotangents are batched (`vmap(vjp_fn)(cotangents)`, and so `jacrev`), "
             "the gradient of `torch.cdist` for *every* batch entry is the gradient for the first "
             "cotangent, for both inputs, with no error or warning. It affects every `p` but 0 "
             "whenever cdist takes its `_cdist_forward` path: `p != 2`, or `p == 2` with at most "
             "25 rows in both inputs or `compute_mode='donot_use_mm_for_euclid_dist'`; also with "
             "batched (3-d, broadcast) inputs and batch-last cotangents. Batching x1 or x2 as well, "
             "`p=0` (a zero gradient), the matrix-multiply path of `p=2` and the legacy "
             "`autograd.grad(..., is_grads_batched=True)` give the right answer."),
    repro=CDIST_REPRO,
    repro_params={"kind": "vjp", "p": 2.0, "batch": 3, "mode": None, "rows": (3, 5)},
    rule=Rule(
        file="aten/src/ATen/functorch/BatchRulesBinaryOps.cpp",
        function="cdist_backward_batch_rule",
        op="aten::_cdist_backward",
        introduced_by="pytorch/functorch#306",
        read_at=("pytorch/pytorch@05083ee61df2 (the rule), aten/src/ATen/native/Distance.cpp "
                 "(_cdist_backward) and tools/autograd/derivatives.yaml (_cdist_forward); torch 2.13.0 "
                 "is built from cf30153c4c13 (torch.version.git_version)"),
        flaw=("The rule gives x1 a batch dim only if `cdist` has one (`if (cdist_bdim && !x1_bdim)`) "
              "and `grad` one only if x1 or x2 has one. With only `grad` batched (x1, x2 and the "
              "saved result are not, as in `vmap(vjp_fn)`) it calls `at::_cdist_backward(grad_, x1, "
              "x2, p, cdist)` with `grad_` of shape `(B, P, R)` and returns `out_bdim = nullopt` "
              "(`if (x1_bdim || x2_bdim) { out_bdim = 0; }`). `_cdist_backward` takes its batch "
              "size from x1 and x2 alone (none here) and reads the first `P * R` values of the "
              "contiguous `grad`, i.e. entry 0; the unbatched result then stands for every entry. "
              "x2's gradient is the same op on `grad.mT()` (derivatives.yaml), so it is wrong the "
              "same way; p=0 hides it (that gradient is zero)."),
        fix=("treat a batched `grad` like a batched `cdist`: `if ((cdist_bdim || grad_bdim) && "
             "!x1_bdim)` give x1 the batch dim (size from whichever is batched), give `cdist` one "
             "too (`ensure_has_bdim(cdist, cdist_bdim.has_value(), bs).contiguous()`: the kernel "
             "reads it per batch entry, and left unbatched it is wrong for every p but 0 and 1), "
             "and `out_bdim = 0` follows."),
    ),
    claim_text=("only the cotangents are batched (`vmap(vjp_fn)`, `jacrev`; the inputs and the "
                "saved result are not), the batch has more than one entry, p is not 0, and cdist "
                "takes its `_cdist_forward` path (p != 2, or p == 2 without the matrix-multiply "
                "path: at most 25 rows in both inputs, or compute_mode='donot_use_mm_for_euclid_dist')."),
    claim=_cdist_claim,
    cases=_cdist_cases,
    emulate=emulate_cdist,
)
