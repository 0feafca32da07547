# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Your code: in-place code nobody here wrote, under torch.func
#
# Two tools for the "vmap: inplace arithmetic ... is not possible" family. First
# `funcbwd.vmap` / `funcbwd.allow_inplace()`, which need no change to the code: torch's own vmap
# first, and only where that raises an in-place error a mode that makes a tensor batched when a
# per-sample value is first written into it (functorch#1025's "lazy" option). It is measured on a
# corpus of cases re-created from public libraries (`lib/funcbwd_lab/studies/yourcode/cases/`,
# counted where it is shown). Then the decorator, `funcbwd.functionalized` (the workbench's
# `traced` recommendation as a tool), on the public reports it was built on
# (`lib/funcbwd_lab/studies/yourcode/issue_cases.py`), each result
# checked against a per-sample loop of the function as written and against torch's own gradient
# of an out-of-place rewrite; what `python -m funcbwd doctor` says, the cache's bound, and the
# saved measurements.

# %% [markdown]
# Setup: the cases and the evaluation come from the library. funcbwd's own warnings show (e.g.
# `funcbwd.PerSampleLoopWarning` when a call runs once per batch entry); of torch's, only vmap's
# slow-fallback performance notice is silenced (`display.setup_notebook`: the plain runs it
# concerns fail anyway, and the tables record the fallback).

# %%
import inspect

import torch

import funcbwd
from funcbwd.errors import first_line
from funcbwd_lab.studies.yourcode import issue_cases as cases
from funcbwd_lab.tables import fit, shorten
from funcbwd_lab.views import display

display.setup_notebook()
print(fit(f"torch {torch.__version__}; {len(cases.CASES)} public reports the decorator was built on; "
          f"transforms: {', '.join(cases.TRANSFORMS)}"))

# %% [markdown]
# ## No code change: `funcbwd.vmap`
#
# pytorch3d's `_sqrt_positive_part` (as it was before upstream rewrote it with `torch.where`)
# writes through a per-sample boolean mask into `torch.zeros_like(x)`. Plain `torch.func` cannot
# batch the mask's dynamic shape; `funcbwd.vmap` runs the code as written.

# %%
from funcbwd_lab.studies.yourcode.cases import CASES
from funcbwd_lab.studies.yourcode.check import run_cell
from funcbwd_lab.studies.yourcode.case import identity

sqrt_case = CASES["pytorch3d:_sqrt_positive_part"]
print(inspect.getsource(sqrt_case.fn(identity)))
xs = torch.randn(8, 4)
try:
    torch.func.vmap(torch.func.jacrev(sqrt_case.fn(identity)))(xs)
except RuntimeError as e:
    print("torch.func.vmap:", shorten(first_line(str(e)), 80))
jac = funcbwd.vmap(torch.func.jacrev(sqrt_case.fn(identity)))(xs)
want = torch.stack([torch.autograd.functional.jacobian(sqrt_case.rewrite, x) for x in xs])
assert torch.allclose(jac, want)
print("funcbwd.vmap: equal to the per-sample loop of torch's autograd on the rewrite")

# %% [markdown]
# Every transform, each checked against that loop (`ok`: equal within 1e-4), plain and with
# `with funcbwd.allow_inplace():` around the call. An old-style `autograd.Function` from entmax
# (`forward(ctx, ...)`, which torch.func refuses outright, with an in-place backward) goes the
# same way: the mode runs it as the equivalent setup_context-style Function.

# %%
for name in ("pytorch3d:_sqrt_positive_part", "entmax:SparsemaxFunction"):
    case = CASES[name]
    print(fit(f"{name}: {case.source}"))
    for t in ("vmap", "vmap_vjp", "vmap_jacrev", "jacfwd", "hessian", "vmap_vmap"):
        if t in case.undefined:
            print(f"  {t:<12} not defined: {case.undefined[t][:70]}")
            continue
        plain = run_cell(t, case.fn(identity), case)[0]
        mode = run_cell(t, case.fn(identity), case, within=funcbwd.allow_inplace)[0]
        print(f"  {t:<12} plain {plain:<5} allow_inplace {mode}")
        assert mode == "ok"

# %% [markdown]
# ## On the corpus of public libraries' code
#
# The saved run (`data/yourcode-corpus.json`, `python -m funcbwd_lab.studies.yourcode.run`): every
# case under every transform with each mechanism: plain torch.func, the decorator, the two
# options of functorch#1025 (factories batched at once, as a prototype; lazy promotion) and the
# shipped mode (plain first). Rendered from the saved data; the tests re-run the plain and mode
# columns and compare.

# %%
import json
from pathlib import Path

from IPython.display import Markdown

from funcbwd_lab.views import corpus as corpus_view

saved = json.loads((Path("..") / "data" / "yourcode-corpus.json").read_text())
Markdown(corpus_view.markdown(saved))

# %% [markdown]
# What each mechanism costs where it fixes, in time and peak memory, against the hand rewrite
# (`data/yourcode-cost.json`, `python -m funcbwd_lab.studies.yourcode.cost`: vmap(vjp) and
# vmap(jacrev) at batch 64 and 512, interleaved thread-CPU timings on a shared 2-core machine;
# peak memory from torch's profiler allocation events). Rendered from the saved data; each target
# says met or missed.

# %%
cost = json.loads((Path("..") / "data" / "yourcode-cost.json").read_text())
assert cost["summary"]["target_basis"] == ["vmap_vjp", "vmap_jacrev"]
Markdown(corpus_view.cost_markdown(cost))

# %% [markdown]
# ## The decorator: fix your own code in five lines
#
# A fresh `torch.zeros(x.shape)` written in place is unbatched; under `vmap` the batched value
# cannot go into it. Decorate the function; outside every transform it runs as written; under
# them it runs as a traced, checked graph.

# %%
@funcbwd.functionalized
def f(x):
    y = torch.zeros(x.shape)
    y[0] = x[0] * 2
    return y

x = torch.randn(8, 3, 4)
jac = torch.func.vmap(torch.func.jacrev(f))(x)   # plain torch: "vmap: inplace arithmetic ..."
assert torch.allclose(jac[:, 0, :, 0, :], 2 * torch.eye(4).expand(8, 4, 4))
assert torch.equal(f(x[0]), torch.cat([2 * x[0, :1], torch.zeros(2, 4)]))
print(jac.shape, f.cache_info())


# %% [markdown]
# A helper to show one case: its source, then one row per transform: what plain `torch.func`
# does, what the wrapped function does, and the two comparisons. Each case's cell asserts the
# outcome the upstream report describes.

# %%
def show(name):
    case = cases.CASES[name]
    print(fit(f"{case.name}: {case.citation}"), fit(f"  {case.what}"), sep="\n")
    rows = [cases.evaluate(case, t) for t in cases.TRANSFORMS]
    for r in rows:
        if not r["defined"]:
            print(fit(f"  {r['transform']:<12} not defined: {r['why']}"))
            continue
        print(f"  {r['transform']:<12} plain {r['plain']:<4}  wrapped {r['wrapped']:<4}  "
              f"vs loop {r['vs_loop']:<3}  vs torch {r['vs_torch']:<3}  {shorten(r['plain_error'], 30)}")
    return {r["transform"]: r for r in rows}


# %% [markdown]
# ## pytorch#103329: `torch.zeros(x.shape)` then item assignment
#
# The report (2023, open): vmapping a function that makes `mat = torch.zeros(x.shape)` and sets
# `mat[0, 0] = mat[0, 1] + x[0, 0]` fails; `torch.zeros_like(x)` would work. `vmap(functionalize(f))`
# fixes plain vmap, but `vmap(jacrev(functionalize(f)))` fails with "derivative for aten::copy is
# not implemented": eliding the copy is what that needs.

# %%
print(inspect.getsource(cases.zeros_then_item_assignment))
r = show("pytorch#103329")
assert {t for t, c in r.items() if c["plain"] == "fail"} == {"vmap", "vmap_vjp", "vmap_jacrev"}
assert all(c["wrapped"] == c["vs_loop"] == c["vs_torch"] == "ok" for c in r.values())

# %% [markdown]
# ## pytorch#97248: `torch.empty` then `copy_` from one of two arguments, batched either way
#
# The issue asking for a systematic API (2022, open) shows that no single `new_empty` call fixes
# both `vmap(f, (0, None))` and `vmap(f, (None, 0))`; the suggested rewrite is
# `torch.cat([x, y]).new_empty(x.shape)`. The wrapper needs neither.

# %%
print(inspect.getsource(cases.empty_then_copy))
rx, ry = show("pytorch#97248 (x batched)"), show("pytorch#97248 (y batched)")
for r in (rx, ry):
    assert {t for t, c in r.items() if c["plain"] == "fail"} == {"vmap", "vmap_vjp", "vmap_jacrev"}
    assert all(c["wrapped"] == c["vs_loop"] == c["vs_torch"] == "ok" for c in r.values())

# %% [markdown]
# ## functorch#105: slice assignment into a fresh tensor inside per-sample gradients
#
# The report (2021): per-sample gradients (`vmap(grad(loss))` over the data) of a model that
# writes features into slices of a fresh tensor fail with "vmap: aten::copy_(self, *extra_args) is
# not possible". Here the weights are unbatched and the data batched. Wrapped, one more torch
# limit appears: functionalizing `h[::2] = v` records `slice_scatter` with an open end
# (`sys.maxsize`), which torch 2.13's batched `slice_scatter` rejects with step 2 ("invalid size,
# possible overflow?", also for plain `vmap(functionalize(f))`); the tool clamps slice ends to the
# size, which computes the same (`funcbwd.fx.slice_bounds`).

# %%
print(inspect.getsource(cases.features_into_fresh_tensor))
r = show("functorch#105")
assert {t for t, c in r.items() if c["plain"] == "fail"} == {"vmap", "vmap_vjp", "vmap_jacrev"}
assert all(c["wrapped"] == c["vs_loop"] == c["vs_torch"] == "ok" for c in r.values())

# %% [markdown]
# ## functorch#207: a custom Function whose backward masks in place
#
# From the thread on `autograd.Function` under functorch transforms: `ReLUAlpha`'s backward
# clones the cotangent and writes `grad_input[input < 0] = 0`, `grad_input[input == 0] = alpha`.
# In the `setup_context` style torch.func needs (with `generate_vmap_rule`), per-sample
# Jacobians still fail: the batched boolean mask makes `index_put` value-dependent under vmap.
# `@funcbwd.functionalized` on the class runs its backward as a graph in which such a write is a
# `where` (checked against the un-rewritten graph). `jacfwd` and `hessian` are not defined for
# this Function: it has no `jvp`, and torch refuses forward AD through it, wrapped or not.

# %%
print(inspect.getsource(cases.ReLUAlpha.backward))
r = show("functorch#207")
assert {t for t, c in r.items() if c.get("plain") == "fail"} == {"vmap_vjp", "vmap_jacrev"}
assert all(c["wrapped"] == c["vs_loop"] == c["vs_torch"] == "ok" for c in r.values() if c["defined"])

# %% [markdown]
# ## The doctor
#
# `python -m funcbwd doctor MODULE:FUNC --args "..."` runs a function under each transform,
# plain and wrapped, and for each failure names the first in-place call that broke (file:line in
# the user's code) and what functionalization made of the in-place calls. The same report, in
# process, for the first case:

# %%
from funcbwd.doctor import report

args = (torch.randn(5, 6), torch.randn(5, 6))
rows = report.diagnose(cases.zeros_then_item_assignment, args, ["vmap", "jacrev", "jacfwd"])
text = report.render("funcbwd_lab.studies.yourcode.issue_cases:zeros_then_item_assignment", rows,
                     report.graph_diff(cases.zeros_then_item_assignment, args))
print(fit(text))
assert "lib/funcbwd_lab/studies/yourcode/issue_cases.py:" in text
assert "mat[0, 0] = mat[0, 1] + x[0, 0]" in text
assert all(r.wrapped.ok for r in rows) and not rows[0].plain.ok

# %% [markdown]
# ## The cache is bounded
#
# One wrapper keeps at most `maxsize` signatures (default 256), least recently used out first;
# `cache_info()` reports it. Evicted graphs leave nothing behind (torch.fx would otherwise keep
# every compiled graph's source for the life of the process).

# %%
g = funcbwd.functionalized(cases.zeros_then_item_assignment, maxsize=4)
for n in range(2, 12):
    xs = torch.randn(3, n, 2)
    torch.func.vmap(g)(xs, xs)
info = g.cache_info()
print(info)
assert (info.misses, info.currsize, info.maxsize) == (10, 4, 4)

# %% [markdown]
# ## Cost, first call and memory (saved measurements)
#
# From `data/yourcode-bench.json` (`funcbwd_lab.studies.yourcode.bench.run`, paired interleaved
# timings on a shared 2-core machine; regenerate with the command in docs/your-code.md). The cost
# is the batched `vmap(vjp)` of the wrapped function over the out-of-place hand rewrite. First
# calls are measured in fresh processes; torch's own first-call costs (functionalization's meta
# kernels importing `sympy`, `torch.func`'s backward importing `torch._dynamo`) are shown apart
# from the tool's.

# %%
import json
from pathlib import Path

from funcbwd_lab.studies.yourcode import bench

saved = json.loads(Path("../data/yourcode-bench.json").read_text())
print(fit(bench.render(saved)))
assert saved["meta"]["torch"] == torch.__version__ and not saved["meta"]["quick"]
