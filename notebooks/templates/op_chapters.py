"""Per-op chapters of the op notebooks: what is particular to each op, in prose written for it.

``tools/build_notebooks.py`` fills the shared template (``op_notebook.py``) with these: ``TITLE``
and ``LEDE`` open the notebook, ``INTRO`` (a few sentences, then a short cell whose output
asserts itself) follows the setup cell, ``EXTRA`` (prod, masked_select) follows the matrix
chapter. Cells are jupytext percent-format text and may use the setup cell's names (``OP``,
``spec``, ``registry``, ``runner``, ``first_line``, ``fit``, ``available``; printed lines fit 100
columns, ``fit`` wraps longer ones at spaces). Edit here, then run
``python tools/build_notebooks.py generate``.
"""

from __future__ import annotations

import textwrap


def md(text: str) -> str:
    """A markdown cell from plain text."""
    lines = textwrap.dedent(text).strip("\n").splitlines()
    return "# %% [markdown]\n" + "\n".join(f"# {line}" if line.strip() else "#" for line in lines) + "\n"


def code(text: str) -> str:
    """A code cell from source text."""
    return "\n# %%\n" + textwrap.dedent(text).strip("\n") + "\n"


TITLE = {
    "diag": "`diag`: a copy_ into a diagonal view, under `vmap(vjp(f))`",
    "index_select": "`index_select`: index_add_ into zeros, under `vmap(vjp(f))`",
    "topk": "`topk`: the shared value-selecting reduction backward, under `vmap(vjp(f))`",
    "sort": "`sort`: the shared value-selecting reduction backward, under `vmap(vjp(f))`",
    "mode": "`mode`: the shared value-selecting reduction backward, under `vmap(vjp(f))`",
    "masked_select": "`masked_select`: a data-dependent output shape, under `vmap(vjp(f))`",
    "clamp": "`clamp`: an in-place mask that fails only under mixed batching",
    "prod": "`prod`: a backward that branches on its data, under `vmap(vjp(f))`",
}

LEDE = {
    "diag": "The legacy backward writes the grad into a diagonal view of unbatched zeros, but only "
            "for non-square matrices: vectors and square matrices take an out-of-place branch.",
    "index_select": "The legacy backward accumulates the grad into unbatched zeros with "
                    "`index_add_` (repeated indices need the sum): the write vmap refuses.",
    "topk": "The legacy backward is `value_selecting_reduction_backward`, one formula shared with "
            "sort and mode: zeros, then `scatter_` in place.",
    "sort": "The legacy backward is `value_selecting_reduction_backward`, one formula shared with "
            "topk and mode: zeros, then `scatter_` in place.",
    "mode": "The legacy backward is `value_selecting_reduction_backward`, one formula shared with "
            "topk and sort: zeros, then `scatter_` in place.",
    "masked_select": "The legacy backward's `masked_scatter_` is functionalizable; the forward's "
                     "output shape (one entry per `True` in the mask) cannot be batched over masks.",
    "clamp": "The legacy backward's in-place `logical_and_` fails under vmap in one batching only: "
             "an unbatched target receiving a batched operand.",
    "prod": "The legacy backward has no in-place op: it branches on how many zeros its input holds, "
            "which no functionalization can remove. A negative control.",
}

_CLAMP = md(r'''
## What is particular to clamp: mixed batching

clamp's legacy backward builds its mask with an in-place op, `(self >= min).logical_and_(self <=
max)`. That write is harmless in most batchings: the target `self >= min` is batched whenever
`self` or `min` is, and then it can hold a batch of results. It fails in one *mixed* batching
only: `self` and `min` unbatched (the target is a plain tensor) while `max` is batched (the
operand `self <= max` is a batch). The cell runs the formula under vmap for every choice of
batched arguments, and the functionalized formula against a per-sample loop for each.
''') + code(r'''
import itertools

import torch
from torch.func import functionalize, vmap

from funcbwd_lab.ops.discussion import clamp as L

x, lo, hi = spec.sample("Tensor min/max (max broadcast)").args
grad = torch.ones(3, 4)


def grad_self(s, mn, mx):  # the legacy formula's grad for self
    return L.clamp_backward(grad, s, mn, mx, False)[0]


raised = {}
print(f"{'batched':14s} {'as written':12s} functionalized")
for batched in itertools.product((False, True), repeat=3):
    if not any(batched):
        continue
    args = [torch.stack([t, t + 0.1]) if b else t for t, b in zip((x, lo, hi), batched)]
    in_dims = tuple(0 if b else None for b in batched)
    try:
        vmap(grad_self, in_dims=in_dims)(*args)
        as_written = "ok"
    except RuntimeError as e:
        raised[batched], as_written = first_line(str(e), 90), "raises"
    fixed = vmap(functionalize(grad_self), in_dims=in_dims)(*args)
    loop = torch.stack([grad_self(*[a[i] if b else a for a, b in zip(args, batched)]) for i in range(2)])
    assert torch.equal(fixed, loop)
    print(f"{'+'.join(n for n, b in zip(('self', 'min', 'max'), batched) if b):14s} {as_written:12s} = loop")
print(fit("\n".join(raised.values())))
# only max batched: the target (self >= min) is unbatched, the operand (self <= max) batched
assert list(raised) == [(False, False, True)]
''')

_PROD = md(r'''
## What is particular to prod: no in-place op, but three branches chosen by the data

prod's legacy backward has no in-place op at all, so there is nothing for functionalization to
rewrite. It counts the zeros of its input (`(input == 0).nonzero()`) and picks one of three
formulas: no zero, `grad * result / input`; one zero, exclusive cumulative products from both
ends; two or more, all zeros. The cell checks each branch against torch's gradient on the three
full-reduction samples, then batches the *inputs*: each entry may need another branch and a
batched tensor has no single zero count, so vmap refuses, functionalized or not. A batch of
*cotangents* for one input takes one branch, and works.
''') + code(r'''
import torch
from torch.func import functionalize, vmap

from funcbwd_lab.ops.discussion import prod as L

for smp in spec.samples()[:3]:  # the full reductions: no zeros, one zero, two zeros
    x = smp.args[0]
    zeros = int((x == 0).sum())
    branch = {0: "grad * result / input", 1: "prod_safe_zeros_backward (cumprods)"}.get(zeros, "zeros_like(input)")
    xr = x.clone().requires_grad_()
    expected = torch.autograd.grad(torch.prod(xr), xr)[0]
    got = L.prod_backward(torch.tensor(1.0), x, torch.prod(x))
    assert torch.allclose(got, expected), smp.name
    print(f"{smp.name:16s} {zeros} zero(s) -> {branch:38s} = torch's gradient")

batch = torch.stack([smp.args[0] for smp in spec.samples()[:3]])  # one entry per branch
for label, fn in (("as written", L.prod_backward), ("functionalized", functionalize(L.prod_backward))):
    try:
        vmap(lambda x: fn(torch.tensor(1.0), x, torch.prod(x)))(batch)
        raise AssertionError(f"{label}: a batch of inputs did not raise")
    except RuntimeError as e:
        print(fit(f"vmap over inputs, {label}: {first_line(str(e), 100)}"))

x = spec.sample("full, one zero").args[0]
grads = torch.randn(4, generator=torch.Generator().manual_seed(0))  # a batch of cotangents
batched = vmap(lambda g: L.prod_backward(g, x, torch.prod(x)))(grads)
assert torch.allclose(batched, torch.stack([L.prod_backward(g, x, torch.prod(x)) for g in grads]))
print("vmap over cotangents only (one input, so one branch): = per-sample loop")
''')

_MASKED_SELECT = md(r'''
## What is particular to masked_select: the output's shape depends on the mask's values

The backward's in-place `masked_scatter_` is functionalizable like any other. The forward is the
problem: `masked_select` returns one entry per `True` in the mask, so two masks of the same shape
give outputs of different lengths, and a batch of masks would need a batch of differently shaped
tensors. vmap refuses (functorch lists masked_select as "not possible due to dynamic shapes"),
whatever the backward does. With the mask fixed, batching the input or the cotangents is fine. The
matrix's `vmap_all_args` scenario batches the mask too (its `in_dims` below), so it fails for
every strategy, while `vmap_cotangents` passes once the formula is functionalized.
''') + code(r'''
import torch
from torch.func import vmap

x, m = spec.sample("3x4 mask broadcast (4,)").args
masks = torch.stack([m, torch.ones_like(m)])  # same shape, different number of True entries
lengths = [torch.masked_select(x, mk).numel() for mk in masks]
print("output length per mask:", lengths)
assert len(set(lengths)) > 1
try:
    vmap(torch.masked_select, in_dims=(None, 0))(x, masks)
    raise AssertionError("a batch of masks did not raise")
except RuntimeError as e:
    print(fit(f"vmap over masks: {first_line(str(e), 90)}"))
print("vmap over inputs, mask fixed:", tuple(vmap(torch.masked_select, in_dims=(0, None))(torch.stack([x, x]), m).shape))

for scenario in ("vmap_cotangents", "vmap_all_args"):
    cell = runner.run(OP, scenario, "per_formula", spec.sample("3x4 mask broadcast (4,)"))
    print(fit(f"per_formula, {scenario}: {cell.status} {cell.reason} {cell.detail}".rstrip()))
    assert (cell.status, cell.reason) == (("pass", "") if scenario == "vmap_cotangents" else ("fail", "data_dependent"))
''')

_DIAG = md(r'''
## What is particular to diag: only the non-square branch writes in place

diag's legacy backward has two branches. A vector input, or a square matrix, gets `grad.diag(k)`:
out of place, and vmap batches it. A non-square matrix gets zeros of the input's shape, takes
their `k`-th diagonal as a *view* and `copy_`s the grad into it. The write reaches the zeros
through the view (first output below); under vmap the zeros are unbatched and the grad is a batch,
so the copy fails. The cell runs the formula as written (`plain`) on a batch of cotangents for
every sample: exactly the non-square ones fail.
''') + code(r'''
import torch

z = torch.zeros(3, 5)
z.diagonal(1).copy_(torch.tensor([1.0, 2.0, 3.0]))  # the view writes through to the zeros
print(z)
assert z.sum() == 6 and torch.equal(z.diagonal(1), torch.tensor([1.0, 2.0, 3.0]))

in_place = []
for smp in spec.samples():
    sizes = list(smp.args[0].shape)
    copies = len(sizes) == 2 and sizes[0] != sizes[1]  # the formula's branch, as in its source
    cell = runner.run(OP, "vmap_cotangents", "plain", smp)
    print(fit(f"{smp.name:15s} {'zeros + copy_' if copies else 'grad.diag(k)':14s} plain under vmap: {cell.status} {cell.reason}"))
    assert (cell.status == "fail") == copies
    in_place.append(copies)
assert any(in_place) and not all(in_place)
''')

_INDEX_SELECT = md(r'''
## What is particular to index_select: index_add_ accumulates repeated indices

index_select may pick the same row twice, so its backward must *add* the grads of repeated
indices: the legacy formula `zeros(self_sizes).index_add_(dim, index, grad)` does that, in place,
into unbatched zeros. The first output shows the accumulation (a row selected twice gets twice the
grad, a row never selected gets none); then a batch of cotangents: the formula as written raises,
functionalized (`index_add_` becomes the out-of-place `index_add`) it equals the per-sample loop,
repeated rows included.
''') + code(r'''
import torch
from torch.func import functionalize, vmap

from funcbwd_lab.ops.discussion import index_select as L

x, dim, index = spec.sample("dim0 repeated").args
print("index:", index.tolist())
ones = torch.ones(len(index), x.shape[1])
g = L.index_select_backward(ones, list(x.shape), dim, index)
print("grad of x for a cotangent of ones, column 0:", g[:, 0].tolist())
assert torch.equal(g[:, 0], torch.bincount(index, minlength=x.shape[0]).float())  # row i: times i was selected

grads = torch.randn(3, len(index), x.shape[1], generator=torch.Generator().manual_seed(0))
loop = torch.stack([L.index_select_backward(gr, list(x.shape), dim, index) for gr in grads])
try:
    vmap(L.index_select_backward, in_dims=(0, None, None, None))(grads, list(x.shape), dim, index)
    raise AssertionError("the legacy formula did not raise under vmap")
except RuntimeError as e:
    print(fit(f"as written, under vmap: {first_line(str(e), 80)}"))
fixed = vmap(functionalize(L.index_select_backward), in_dims=(0, None, None, None))(grads, list(x.shape), dim, index)
assert torch.allclose(fixed, loop)
print("functionalized, under vmap: = per-sample loop (repeated rows accumulated)")
''')

_REDUCTION = r'''
import torch
from torch.func import functionalize, vmap

from funcbwd_lab.ops.discussion import value_selecting as L

shared = {name: registry.get_op(name).formula for name in ("topk", "sort", "mode")}
for name, formula in shared.items():
    print(f"{name:5s} -> {formula.__module__}.{formula.__name__}")
assert set(shared.values()) == {L.value_selecting_reduction_backward}

smp = spec.sample()
outs = spec.torch_op(*smp.args)
grads = torch.randn((3, *outs[0].shape), generator=torch.Generator().manual_seed(0))
args = [spec.formula_args(smp.args, outs, (g,)) for g in grads]  # (grad, dim, indices, sizes, keepdim)
print(fit(f"{OP} [{smp.name}]: dim={args[0][1]}, indices {tuple(args[0][2].shape)}, sizes {args[0][3]}, keepdim={args[0][4]}"))
loop = torch.stack([L.value_selecting_reduction_backward(*a) for a in args])
rest = args[0][1:]
try:
    vmap(L.value_selecting_reduction_backward, in_dims=(0, None, None, None, None))(grads, *rest)
    raise AssertionError("the legacy formula did not raise under vmap")
except RuntimeError as e:
    print(fit(f"as written, under vmap: {first_line(str(e), 80)}"))
fixed = vmap(functionalize(L.value_selecting_reduction_backward), in_dims=(0, None, None, None, None))(grads, *rest)
assert torch.allclose(fixed, loop)
print("functionalized, under vmap: = per-sample loop")
'''

INTRO = {
    "clamp": _CLAMP,
    "prod": _PROD,
    "masked_select": _MASKED_SELECT,
    "diag": _DIAG,
    "index_select": _INDEX_SELECT,
}
INTRO["topk"] = md(r'''
## What is particular to topk: one reduction formula shared with sort and mode

topk, sort and mode all select values along a dim and remember where they came from (the indices),
so core gave the three one backward, `value_selecting_reduction_backward`: zeros of the input's
shape, then `scatter_` of the grad to the selected positions, in place. One formula, three ops:
fixing it once fixed all three (functorch f7ad909b, core pytorch#76731). topk keeps `k` of the `n`
entries along its dim, so the scatter leaves zeros where nothing was selected; it passes
`keepdim=True` (its indices keep the reduced dim). The cell checks that the registry binds the
three ops to the same function, then runs it on a batch of cotangents for this op's first sample:
as written it raises, functionalized it equals the per-sample loop.
''') + code(_REDUCTION)
INTRO["sort"] = md(r'''
## What is particular to sort: one reduction formula shared with topk and mode

topk, sort and mode all select values along a dim and remember where they came from (the indices),
so core gave the three one backward, `value_selecting_reduction_backward`: zeros of the input's
shape, then `scatter_` of the grad to the selected positions, in place. One formula, three ops:
fixing it once fixed all three (functorch f7ad909b, core pytorch#76731). sort keeps all `n`
entries (a permutation), so the scatter writes every position exactly once; it passes
`keepdim=True`, like topk. The cell checks that the registry binds the three ops to the same
function, then runs it on a batch of cotangents for this op's first sample: as written it raises,
functionalized it equals the per-sample loop.
''') + code(_REDUCTION)
INTRO["mode"] = md(r'''
## What is particular to mode: one reduction formula shared with topk and sort

topk, sort and mode all select values along a dim and remember where they came from (the indices),
so core gave the three one backward, `value_selecting_reduction_backward`: zeros of the input's
shape, then `scatter_` of the grad to the selected positions, in place. One formula, three ops:
fixing it once fixed all three (functorch f7ad909b, core pytorch#76731). mode reduces its dim to
one value; of the three it is the one that can pass `keepdim=False`, where the formula first
unsqueezes the grad and the indices. The cell checks that the registry binds the three ops to the
same function, then runs it on a batch of cotangents for this op's first sample: as written it
raises, functionalized it equals the per-sample loop.
''') + code(_REDUCTION)

# After the matrix chapter: the computed matrix confirms what the opening chapter showed.
_CHECK = r'''
data_dependent: dict[str, list[str]] = {}
for r in results:
    if r.status == "fail" and r.reason == "data_dependent":
        data_dependent.setdefault(r.strategy, [])
        if r.scenario not in data_dependent[r.strategy]:
            data_dependent[r.strategy].append(r.scenario)
for st in available():
    print(fit(f"{st:12s} " + (", ".join(data_dependent.get(st, [])) or "no data-dependent failure")))
functionalizing = [st for st in available() if st not in ("plain", "builtin")]
assert any(st in data_dependent for st in functionalizing), "expected a data-dependent failure"
'''

EXTRA = {
    "prod": md(r'''
## Why functionalization is not the fix for prod

The opening chapter showed the branch on the data; the matrix above confirms it for every
strategy: those that only functionalize fail here for a data-dependent reason wherever the input
is batched (listed per strategy and scenario).
''') + code(_CHECK),
    "masked_select": md(r'''
## Why functionalization is not the fix for masked_select

The opening chapter showed that a batch of masks has no single output shape; the matrix above
confirms it for every strategy: wherever a scenario batches the mask, the failure is
data-dependent (listed per strategy and scenario), functionalized or not.
''') + code(_CHECK),
}
