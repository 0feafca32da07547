# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Coverage: functionalizing torch's *own* backward formulas, over the OpInfo database
#
# The matrix answers the question for the 8 legacy formulas of functorch#241. This notebook asks
# the converse: if vmap functionalized *every* backward (strategies `whole` and `hooks`, the only
# ones that act on torch's C++ backward nodes), what would happen to the ops that work today?
# The sweep follows PyTorch's `test_vmapvjp` methodology (float32 CPU OpInfo samples, every tensor
# arg and cotangent batched, each `(-1, None)` in_dims combination, atol = rtol = 1e-4).
#
# The sweep takes minutes, so it is read from a saved result:
# `python -m funcbwd coverage --out data/coverage-default.json`. Everything below is computed from
# that file by `funcbwd.measure.coverage` functions.

# %%
import os

# Read when torch loads (so before any import of it): keeps torch's C++-side warnings, which are
# timestamped and go straight to stderr, out of the stored outputs. Python warnings are unaffected.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from funcbwd.measure import coverage
from funcbwd.views import display

display.setup_notebook()
PATH = os.path.join("..", "data", "coverage-default.json")
if os.path.exists(PATH):
    records = coverage.load(PATH)
    meta = coverage.load_meta(PATH)
else:
    records, meta = [], {}
    print(f"no saved sweep at {PATH}; run: python -m funcbwd coverage --out data/coverage-default.json")
print({k: v for k, v in meta.items() if k != "wall_seconds"})

# %% [markdown]
# ## 1. Summary per strategy
#
# Records are op x sample x strategy; `skipped` / `unavailable` are samples the methodology cannot
# sweep (e.g. no differentiable output). `fallback` counts records where vmap needed its slow
# per-sample loop.

# %%
if records:
    summary = coverage.summarize(records)
    print(coverage.format_summary(summary, limit=12))

# %% tags=["nbval-ignore-output"]
if records:
    coverage.summary_figure(records).show()

# %% [markdown]
# ## 2. What functionalizing everything changes
#
# A *regression* is a record where `builtin` passes and the strategy fails; a *fix* the reverse.
# Each regression carries the mechanism the sweep identified.

# %%
if records:
    print("regressions:", len(summary["regressions"]), "| fixes:", len(summary["fixes"]))
    for st in summary["strategies"]:
        print(f"{st:8s} fallback removed for: {', '.join(summary['fallback_removed'].get(st, [])) or '(none)'}")
        print(f"{st:8s} fallback introduced for: {', '.join(summary['fallback_introduced'].get(st, [])) or '(none)'}")

# %% [markdown]
# ## 3. The records that differ (sortable: click a header)
#
# Only op x sample rows where some strategy does not simply pass (failure, wrong result, slow
# fallback or a change against `builtin`); the full table is in `python -m funcbwd report`.

# %%
if records:
    by_key = {}
    for r in records:
        by_key.setdefault((r["op"], r["sample"]), []).append(r)
    interesting = [r for rs in by_key.values()
                   if any(x["status"] not in ("pass", "skipped", "unavailable") or x["fallback_ops"] for x in rs)
                   for r in rs]
    print(len({(r["op"], r["sample"]) for r in interesting}), "of", len(by_key), "op x sample rows differ")
    assert all(r["strategy"] in summary["strategies"] for r in interesting)

# %%
display.Rich(f"{len(interesting)} records (sortable HTML table)", coverage.table_html(interesting)) if records else None
