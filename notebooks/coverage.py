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
# # Coverage: torch's *own* backward formulas, in every composition functorch tests
#
# The matrix answers the design question for the legacy formulas of functorch#241. This notebook
# asks the converse: if a functionalizing strategy ran *every* backward, what would happen to the
# ops that work today, and which of today's failures would it fix?
#
# The sweep runs every OpInfo with autograd through the compositions of functorch's
# `test/functorch/test_ops.py` (`vmapvjp`, `vmapvjpvjp`, `vmapjvpvjp`, `vmapjvpall`, `vjpvmap`),
# every in_dims choice (no cap), with distinct batch entries, under `builtin` (torch as is: the
# baseline) and the three strategies that act on torch's C++ backward nodes: `whole`, `hooks` and
# `traced_backward`. Every record is one cell of the same engine as the matrix
# (`funcbwd_lab.run.runner`): compared with a per-sample loop and with torch's own gradient, the
# caller's tensors checked, the error measured, the tolerance by dtype.
#
# It takes hours on 2 cores, so it runs in the background (`python -m funcbwd_lab coverage --workers 2
# --out data/coverage.json.gz --force`, resumable with `--resume`) and this notebook reads the
# saved file.
# Every count below is computed from the records by `funcbwd_lab.studies.coverage.summary` and
# `verdicts`; the rendering is `funcbwd_lab.studies.coverage.render`.

# %%
import os

# Read when torch loads (so before any import of it): keeps torch's C++-side warnings, which are
# timestamped and go straight to stderr, out of the stored outputs. Python warnings are unaffected.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from funcbwd_lab.studies.coverage import charts, data, render, summary, verdicts
from funcbwd_lab.tables import fit
from funcbwd_lab.views import display

display.setup_notebook()
PATH = os.path.join("..", "data", data.FILE_NAME)
doc = data.load(PATH)
records = doc["records"]
print(fit(render.meta_line(doc["meta"])))
print(len(records), "records")

# %% [markdown]
# ## 1. Per composition and strategy
#
# A record is op x sample x dtype x composition x strategy. `budget` means the cell's time budget
# ran out before every in_dims choice ran: never a pass. `n/a` records say why (no differentiable
# input, a random op, no backward node in the composition...). `slow fb` counts passes where vmap
# needed its slow per-sample loop. A *regression* is a cell where `builtin` passes and the strategy
# fails or gives a different result; a *fix* the reverse, with the strategy's own mechanism run; an
# *in-place fix* a fix of vmap's in-place error, the failure this project is about.

# %%
s = summary.summarize(records)
print(render.text(doc, s))

# %% tags=["nbval-ignore-output"]
charts.summary_figure(s).show()

# %% [markdown]
# ## 2. Where vmap's in-place error remains today
#
# The cells where `builtin` fails with "vmap: inplace ... is not possible", by composition: these
# are the failures functionalizing the backward is meant to fix. Below, for each strategy, how many
# of them it fixes (passes with its mechanism run), does not fix, or leaves unresolved (budget).

# %%
from collections import Counter

inplace = s["inplace_failures"]
lines = [f"{len(inplace)} cells where builtin fails with vmap's in-place error: "
         f"{dict(Counter(f['cell'][3] for f in inplace))}"]
for st in ("whole", "hooks", "traced_backward"):
    lines.append(f"  {st:16s} {summary.inplace_fixed_by(records, st)}")
for f in inplace[:12]:
    op, smp, dtype, comp = f["cell"]
    lines.append(f"  {op}[{smp}] {dtype} {comp}: {f['message'].splitlines()[0]}")
print(fit("\n".join(lines)))

# %% [markdown]
# Where a strategy ran out of the sweep's 3 s budget on these cells, the deep pass re-ran them with
# 120 s per cell (`python -m funcbwd_lab.studies.coverage.deep`, saved in `data/coverage-deep.json`):
# a pass there ran every in_dims choice. The cells found in place after it ran (the in-place shape
# error, native_group_norm) are pending there and were re-run apart at 30 s per cell
# (`data/coverage-deep-pending.json`).

# %%
import json

from funcbwd_lab.studies.coverage import deep

deep_doc = json.loads(open(os.path.join("..", "data", deep.FILE_NAME)).read())
later = json.loads(open(os.path.join("..", "data", "coverage-deep-pending.json")).read())
waiting = {f"{c[0]} {c[3]}" for c in deep.pending(records, deep_doc)}
assert set(deep_doc["records"]) | waiting == {f"{c[0]} {c[3]}" for c in deep.inplace_cells(records)}
assert deep.pending(records, {"records": {**deep_doc["records"], **later["records"]}}) == []
print(deep.format_result(deep_doc))
print(f"pending after it ran, re-run at 30 s per cell: {len(waiting)} cells")
print(deep.format_result(later))

# %% [markdown]
# ## 3. Regressions, with their reasons
#
# Every regression, grouped by strategy, composition and the error's first line, with the ops of
# each group (cells per op, where more than one).

# %%
display.Rich(render.regressions_text(s["regressions"]), render.regressions_html(s["regressions"]))

# %% [markdown]
# ## 4. Upstream's expected failures, each with a computed verdict
#
# functorch's `test_ops.py` keeps its expected failures as data (`xfail`, `skip`, with a reason).
# Our copy of them (`funcbwd_lab.studies.coverage.upstream`, with its source commit) gets a verdict per
# entry from the records of the same op and composition: `reproduced`, `stale` (passes on torch
# 2.13 on every sample, as upstream's test loops over every sample), `fixed` (an in-place failure a functionalizing strategy fixes, with no regression on the
# op), `torch_bug`, `harness` (not comparable here, and why) or `unresolved` (e.g. builtin passes
# the samples run, but the sweep capped them: one sample is not upstream's test). Each verdict's
# evidence says how many samples it rests on.

# %%
vs = doc["upstream_xfails"]
lines = [f"{len(vs)} upstream entries: {dict(Counter(v['verdict'] for v in vs))}"]
for v in vs:
    if v["verdict"] in ("fixed", "stale"):
        op = v["op"] + ("." + v["variant"] if v["variant"] else "")
        lines.append(f"  {v['verdict']:6s} {v['test']:28s} {op:28s} {v['evidence']}")
print(fit("\n".join(lines)))

# %%
import IPython.display

groups = [(verdict, f"{len(rows)} entries ({meaning})", verdict in render.OPEN_VERDICTS,
           [[r[0], r[1], r[2], r[4], r[5]] for r in rows])
          for verdict, meaning in verdicts.VERDICTS.items()
          if (rows := render.verdict_rows([v for v in vs if v["verdict"] == verdict]))]
for group in groups:  # one output per verdict (each under its own size budget)
    IPython.display.display(display.Rich(f"{group[0]}: {group[1]}", display.grouped_tables(
        ("test", "op", "kind", "upstream's reason", "evidence"), [group], nowrap=(0, 2))))

# %% [markdown]
# ## 5. The verdicts are computed, not copied: check one
#
# A verdict is recomputed from the records and the sweep's sample caps (`meta`) by
# `verdicts.upstream_verdicts`; here, for the saved document, the recomputation agrees with what
# the file says, entry by entry, and no `stale` rests on fewer samples than the op has.

# %%
again = verdicts.upstream_verdicts(records, meta=doc["meta"])
same = sum(a["verdict"] == b["verdict"] for a, b in zip(again, vs))
print(f"{same} of {len(vs)} saved verdicts equal their recomputation")
assert same == len(vs)
assert all("cap" not in v["evidence"] for v in vs if v["verdict"] == "stale")

# %% [markdown]
# ## 6. The cost of functionalizing every backward, per op
#
# For every op whose first `vmapvjp` sample passes under both `builtin` and `whole`: the batched
# backward (`vmap` of the `vjp_fn` over 64 cotangents, primals fixed, forward not timed), `whole` /
# `builtin`, timed interleaved in one process on the thread CPU clock with one torch thread (the
# ratio of the two arms' medians; the arms' results compared before timing). Saved in
# `data/coverage-cost.json`; timings depend on the machine and its load, so the distribution
# matters, not any one op.

# %%
from funcbwd_lab.studies.coverage import cost as coverage_cost

costs = json.loads(open(os.path.join("..", "data", coverage_cost.COST_FILE)).read())["cost"]
print(fit(coverage_cost.format_cost(coverage_cost.summarize_cost(costs))))

# %% tags=["nbval-ignore-output"]
coverage_cost.cost_figure(costs).show()

# %% [markdown]
# ## 7. `traced_backward` against vmap's slow fallback
#
# Where `builtin` passes only through vmap's slow per-sample fallback, does tracing torch's own
# backward into a functionalized graph (`traced_backward`) remove the loop, and how much faster is
# the batched backward? Saved in `data/fallback-speedup.json`
# (`python -m funcbwd_lab.studies.coverage.fallback_speedup --coverage data/coverage.json.gz`).

# %%
from funcbwd_lab.studies.coverage import fallback_speedup

speed = json.loads(open(os.path.join("..", "data", fallback_speedup.FILE_NAME)).read())
print(fit(fallback_speedup.format_result(speed)))
