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
# # Installed libraries: the tool on the code users run
#
# The corpus re-creates in-place code; this chapter reads a study that re-creates nothing. Fifteen
# libraries are installed from the package index at pinned versions (`locks/libraries.txt`, into
# `build/libraries`, beside the venv), and their public functions and modules are called as their
# users call them, under torch.func transforms, plain and inside `funcbwd.allow_inplace()`. Each
# cell is compared with a per-sample loop of eager autograd on the same call, outputs and the
# caller's state (a module's buffers) both. This chapter only renders the saved run
# (`data/libraries.json`): it needs none of the libraries. How it was computed, and how to
# compute it again: `docs/libraries.md`.

# %%
from IPython.display import Markdown

from funcbwd_lab.studies.libraries import render
from funcbwd_lab.studies.libraries.verdicts import rows, summarize

data = render.load()
blocks = render.blocks(data)
Markdown(blocks["headline"])

# %% [markdown]
# ## One verdict per cell
#
# `fixed` needs the mode's answer to equal the loop's, outputs and state, on two calls; `wrong` is
# the worst outcome (an answer other than the loop's with no error); `no_reference` is a cell
# where eager autograd itself refuses the call, so nothing can be fixed there.

# %%
Markdown(blocks["verdicts"])

# %%
Markdown(blocks["libraries"])

# %% [markdown]
# ## Why plain torch.func fails, and what is left
#
# The cause is read from the error each cell ends with. The first table is the problem as users
# meet it; the second is what the mode leaves, the work list for the tool.

# %%
Markdown(blocks["plain_causes"])

# %%
Markdown(blocks["left"])

# %% [markdown]
# ## The wrong answers
#
# Each is a cell where the mode answered and the loop disagrees. Where only the caller's state
# differs, the mode borrowed a module's buffer for the call and gave it back unchanged, where a
# per-sample loop would have updated it once per sample: the contract of issue 37 makes that a
# refusal unless the caller opts in.

# %%
Markdown(blocks["wrong"])

# %% [markdown]
# ## One library at a time
#
# Every cell of one library, with the error each arm ended with (change `LIBRARY`).

# %%
LIBRARY = "torchdiffeq"
for r in rows(data):
    if r["library"] == LIBRARY:
        print(f"{r['case'][:44]:44s} {r['transform']:15s} {r['verdict']:12s} "
              f"{(r['detail'] or '')[:26]}")

# %% [markdown]
# ## What it costs
#
# A benchmark of one run (ratios measured together), not a test.

# %%
Markdown(blocks["bench"])

# %% [markdown]
# ## Every case
#
# The call as users write it, its verdict per transform, and the file of the library's tests or
# docs that calls it so: 197 rows of 12 columns, wider than a notebook's column, so the table lives
# in [docs/libraries.md](../docs/libraries.md#every-case) (rendered from the same data). Here, the
# cases of one verdict at a time (change `VERDICT`):

# %%
VERDICT = "refused"
for r in rows(data):
    if r["verdict"] == VERDICT:
        print(f"{r['case'][:60]:60s} {r['transform']:15s} {r['library']}")

# %%
summary = summarize(data)
print(f"{summary['cases']} cases, {summary['cells']} cells, "
      f"{summary['fixed']} of {summary['plain_failing']} plain-failing cells fixed")
