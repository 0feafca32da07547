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
# # Overhead and copies: what does functionalizing a backward cost?
#
# The design thread (functorch#241) worried about two costs of functionalizing backward formulas:
# wrapper/unwrap overhead ("thought minor") and *additional copies* ("in-place after clone becomes
# clone + out-of-place op, and functionalization does not remove the intermediate clone"), and
# asked: "how bad is the performance overhead for functionalization, really?"
#
# Two kinds of evidence here:
# - **copies**, counted from the formulas' FX graphs by `funcbwd_lab.studies.graphs.graphs.copy_table`, computed live
#   (deterministic, so the notebook tests compare them);
# - **time and memory**, from a saved benchmark (`python -m funcbwd_lab bench --quick --out
#   data/bench-quick.json`), shown as ratios measured within one run (machine-dependent, so their
#   cells are not compared).

# %%
import os

# Read when torch loads (so before any import of it): keeps torch's C++-side warnings, which are
# timestamped and go straight to stderr, out of the stored outputs. Python warnings are unaffected.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from funcbwd_lab.studies.graphs import graphs
from funcbwd_lab.ops import registry
from funcbwd_lab.views import display

display.setup_notebook()
BENCH = os.path.join("..", "data", "bench-quick.json")
print("saved bench results:", "present" if os.path.exists(BENCH) else "missing")

# %% [markdown]
# ## 1. Copies, counted
#
# Each test op's formula is captured (`make_fx`, fake tensors, first sample) in four forms: as
# written (`plain`), functionalized (what `per_formula`, `composite`, `hooks` and `whole` run), with
# functionalization's `aten.copy` elided (what `traced` runs), and torch's modern formula
# (`builtin`). Under vmap (batch 4) a formula vmap cannot batch shows vmap's per-sample fallback as
# extra copies (`stack`, repeated `copy`); `extra_*` columns are the excess over `builtin`.

# %%
copies = graphs.copy_table(ops=registry.TEST_OPS, vmap=True)
print(graphs.format_copy_table(copies))

# %% [markdown]
# The facts the table establishes, checked:

# %%
by = {(r["op"], r["form"]): r for r in copies}
ok = [op for op in registry.TEST_OPS if not by[(op, "functionalized")]["error"]]
more = [op for op in ok if by[(op, "functionalized")]["copies"] > by[(op, "traced")]["copies"]]
same = [op for op in ok if by[(op, "functionalized")]["copies"] == by[(op, "traced")]["copies"]]
failed = [op for op in registry.TEST_OPS if by[(op, "functionalized")]["error"]]
print("functionalized has more copies than traced:", ", ".join(more) or "(none)")
print("same copies:", ", ".join(same) or "(none)")
print("not capturable (data-dependent):", ", ".join(failed) or "(none)")
assert all(by[(op, "traced")]["copies"] <= by[(op, "functionalized")]["copies"] for op in ok)

# %% [markdown]
# Where functionalization *does* add copies, it is the `copy_` into a view (diag): the
# functionalized `aten::copy` has no batching rule, so vmap loops over the batch and stacks.
# Eliding the copy (traced) leaves the one `diagonal_scatter` a functional formula must do.
# For the scatter/index_add family functionalization only swaps `op_` for `op`: no extra copies.

# %% [markdown]
# ## 2. Batched backward time, from the saved benchmark
#
# Per op, `vmap(vjp_fn)` time over batch sizes against three references: `handfixed`
# (`ratio_vs_handfixed`: core's modern out-of-place formula run in Python through the same
# legacy-op machinery, so the ratio is what functionalizing costs), `builtin`
# (`ratio_vs_builtin`: torch's C++ formula, which adds the cost of running a formula in Python at
# all) and the per-sample loop (`speedup_vs_loop`, higher is better). Lower ratios are better;
# the targets are computed from the same run and printed met or missed with their numbers.

# %% tags=["nbval-ignore-output"]
saved_bench = None
if os.path.exists(BENCH):
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import text as bench_text
    from funcbwd_lab.studies.bench import charts as plots

    saved_bench = bench_results.load(BENCH)
    figures = plots.all_figures(saved_bench)
    print(bench_text.format_summary(saved_bench))
else:
    figures = {}
    print(f"no saved bench results at {BENCH}; run: python -m funcbwd_lab bench --quick --out data/bench-quick.json")

# %% tags=["nbval-ignore-output"]
for name in ("ratio_vs_handfixed", "ratio_vs_builtin", "speedup_vs_loop"):
    if name in figures:
        figures[name].show()

# %% [markdown]
# ### Is handfixed the floor?
#
# `x handfixed` is the cost of functionalizing only where handfixed does no more work than a
# functional formula must. At large inputs it can do more: under vmap, `grad.new_zeros(sizes)` is
# a batched tensor of zeros, and `diagonal_scatter` / `index_add` then write a copy of all of it,
# where the functionalized legacy formula scatters into unbatched zeros. Computed from the same
# run (`funcbwd_lab.studies.bench.results.reference_check`): at each op and size, traced and builtin
# against handfixed over batch >= 64; handfixed is *not the floor* where a functional formula is
# faster beyond the run's noise at every such batch.

# %% tags=["nbval-ignore-output"]
if saved_bench is not None:
    print(bench_text.format_reference_check(saved_bench))

# %% [markdown]
# So at large inputs the cost is drawn against the cheaper of handfixed and builtin at each batch
# (`ratio_vs_floor`, the series `min(handfixed, builtin)`): a ratio above 1.0 there is time a
# strategy spends beyond the cheapest formula this run timed.

# %% tags=["nbval-ignore-output"]
if "ratio_vs_floor_large" in figures:
    figures["ratio_vs_floor_large"].show()

# %% [markdown]
# ## 3. Cost when vmap is off
#
# A strategy that installs itself on every backward (hooks) pays even when nothing is batched.
# Microseconds per autograd node over a backward with no strategy; `noop_hook` is a Python pre/post
# hook doing nothing, the floor for any hook-based approach.

# %% tags=["nbval-ignore-output"]
if "overhead" in figures:
    figures["overhead"].show()

# %% [markdown]
# ## 4. Copies and memory as measured by the benchmark
#
# The copies chart plots the counted copies above per strategy; the memory chart shows the bytes
# the batched backward allocates (torch.profiler memory events) relative to `builtin`.

# %% tags=["nbval-ignore-output"]
for name in ("copies", "memory"):
    if name in figures:
        figures[name].show()

# %% [markdown]
# ## 5. Where the time goes
#
# One cell's batched backward (`vmap(vjp_fn)` over 64 cotangents of diag), broken into Python in
# funcbwd's own strategy code, vmap dispatch and slow fallback, and aten kernel time
# (`python -m funcbwd_lab profile diag --strategy S`), read from the profile section the same saved
# benchmark run measured (`funcbwd_lab.studies.bench.profile_section`; profiling here would store a live timing
# that changes on every run). `per_formula` pays vmap's per-sample fallback for `aten::copy`;
# `traced` has no fallback left, and most of what remains is torch's own Python around `vmap` and
# `vjp`, paid by every strategy alike.

# %% tags=["nbval-ignore-output"]
breakdowns = {}
if saved_bench is not None:
    from funcbwd_lab.studies.bench import profile_section as bench_profile
    from funcbwd_lab.studies.bench import profile

    breakdowns = bench_profile.breakdowns(saved_bench)
    for st, b in breakdowns.items():
        print(f"== {st}")
        print(profile.format_table(b))
    for why in bench_profile.missing(saved_bench):
        print("not profiled:", why)

# %% tags=["nbval-ignore-output"]
if "traced" in breakdowns:
    profile.figure(breakdowns["traced"]).show()
