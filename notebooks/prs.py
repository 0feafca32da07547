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
# # The small PRs, run on the installed torch
#
# Three changes the evidence supports apart from the large one, each kept in `docs/prs/` as a diff
# against a named pytorch commit: **vmap decompositions** for `cummaxmin_backward`,
# `unfold_backward` and `squeeze_copy.dim`; **binary_cross_entropy's double-backward guard**
# (`grad_output` joins the `isTensorSubclassLike` check); **`aten::copy`'s batching rule, derivative
# and forward-AD formula**. Here the same kernels, built out of tree against the installed torch
# (`funcbwd_lab.studies.prs.build`, about 30 s the first time, then cached under `build/`), run
# live with and without them, each compared with the per-sample loop; then the upstream test
# entries each retires, from the saved run of functorch's own `test_ops.py`.

# %% tags=["nbval-ignore-output"]
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # read when torch loads: no C++ warnings in outputs
import warnings

import torch
from torch.func import functionalize, jacrev, vjp, vmap

from funcbwd_lab.studies.prs import build, effects, upstream
from funcbwd_lab.studies.review import copy_repro

warnings.simplefilter("ignore")
why = build.available()
print("kernels:", "loaded" if not why else why)

# %% [markdown]
# ## vmap decompositions
#
# `cummax`'s backward calls `cummaxmin_backward`, which is `CompositeImplicitAutograd` but not in
# functorch's decomposition list, so vmap runs it once per batch entry. With vmap's slow fallback
# disabled (as functorch's `test_vmapvjp_has_batch_rule` runs), torch raises; with the
# decomposition registered at `FuncTorchBatchedDecomposition` it runs batched and equals the loop:

# %%
if not why:
    rows = effects.decompositions(build)
    for r in rows:
        print(f"{r['case']:<24} without: {effects.describe(r['without']):<42} with: {r['with']}")

# %% [markdown]
# ## binary_cross_entropy's double-backward guard
#
# `vmap` over `vjp` of `vjp` of `F.binary_cross_entropy`, every `in_dims` choice of (input,
# target, cotangent, two outer cotangents). Torch's guard leaves `grad_output` out; the same node
# rebuilt out of tree with torch's guard (the mutation) fails where torch does, the fixed guard
# nowhere:

# %%
if not why:
    for label, counts in effects.bce(build).items():
        print(f"{label:<28}", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))

# %% [markdown]
# ## `aten::copy`'s rules, and pytorch#103329
#
# The batching rule keeps upstream copy's contract per sample: dst's values and layout, src
# broadcast and cast. Checked on dst layouts (dense, transposed, with a storage offset, strided,
# expanded) x sources x batch dims, values and `as_strided` reads of dst's geometry:

# %%
if not why:
    print("layout cases:", effects.copy_rule(build))

# %% [markdown]
# The issue's own repro is `vmap(jacrev(f))` of a function that writes into `torch.zeros` in
# place: copy's rules cannot help it (the write is the user's). Functionalizing `f` first is what
# needs them:

# %%
if not why:
    for r in copy_repro.run()["rows"]:
        print(r["composition"])
        for k in ("neither", "derivative and forward AD", "all three rules"):
            print(f"  {k:<26} {effects.describe(r[k])}")

# %% [markdown]
# ## The upstream entries each PR retires
#
# Saved by `python -m funcbwd_lab.studies.prs.upstream --out data/prs-upstream.json`: each entry of
# functorch's `test_ops.py` (pytorch@28a580b0d2) run through unittest in a fresh interpreter, once
# without and once with the PR's kernels, its `xfail` in place (so a pass reports an *unexpected
# success*: the entry is retired). The controls must stay expected failures with every kernel.

# %%
from funcbwd_lab.tables import fit

saved = upstream.load(os.path.join("..", "data"))
for r in saved["rows"]:
    print(f"{r['pr']:<26} {r['method']}")
    print(f"{'':<26} {r['without']['outcome']} -> {r['with']['outcome']}")
print(fit(f"retired: {saved['retired']} of {saved['entries']} entries on torch {saved['torch']}; "
          f"files: {', '.join(k + (' (excerpt)' if v['excerpt'] else '') for k, v in saved['files'].items())}"))

# %% [markdown]
# The diffs themselves: `docs/prs/*.diff` (with a README each). The decompositions' change to
# functorch, for one:

# %%
diff = open(os.path.join("..", "docs", "prs", "batch-rule-decompositions.diff")).read()
print("\n".join(ln for ln in diff.splitlines() if ln.startswith(("+", "-", "@@")))[:1500])
