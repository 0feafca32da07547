# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Coverage: functionalizing torch's *own* backward formulas, over the OpInfo database
#
# The matrix answers the question for the legacy formulas of functorch#241. This notebook asks
# the converse: if vmap functionalized *every* backward (strategies `whole` and `hooks`, the ones
# that act on torch's C++ backward nodes), what would happen to the ops that work today, and what
# would it cost?
#
# The sweep follows PyTorch's `test_vmapvjp` methodology (float32 CPU OpInfo samples, every tensor
# arg and cotangent batched, each `(-1, None)` in_dims combination) with the matrix's own core:
# distinct values per batch entry, compared with a per-sample loop of torch's unbatched vjp at the
# workbench tolerance; a strategy that leaks transform state fails its record. `whole` and `hooks`
# run inside `funcbwd.batching.scoped_rules()` (batching rules for `aten::copy` and
# `aten::as_strided_scatter`, the two ops functionalization emits that torch 2.13 cannot batch
# well), `builtin` never does.
#
# The sweep takes about 20 minutes on 2 workers, so it is read from a saved result (what was run
# is in its `meta`: every sample of every OpInfo, at most 8 in_dims choices per sample):
# `python -m funcbwd coverage --all-samples --workers 2 --cost --out data/coverage-all.json.gz`. Everything below
# is computed from that file by `funcbwd.measure.coverage_summary` and `coverage_cost`.

# %%
import os

# Read when torch loads (so before any import of it): keeps torch's C++-side warnings, which are
# timestamped and go straight to stderr, out of the stored outputs. Python warnings are unaffected.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from funcbwd.measure import coverage_summary
from funcbwd.studies.coverage import cost as coverage_cost
from funcbwd.views import display

display.setup_notebook()
PATH = os.path.join("..", "data", "coverage-all.json.gz")
if os.path.exists(PATH):
    records = coverage_summary.load(PATH)
    meta = coverage_summary.load_meta(PATH)
    costs = coverage_summary.load_cost(PATH)
else:
    records, meta, costs = [], {}, []
    print(f"no saved sweep at {PATH}; run: python -m funcbwd coverage --all-samples --workers 2 --cost --out data/coverage-all.json.gz")
print({k: v for k, v in meta.items() if k != "wall_seconds"})

# %% [markdown]
# ## 1. Summary per strategy
#
# Records are op x sample x strategy. `not_applicable` records say why (e.g. no differentiable
# input, a random op); `fallback` counts records where vmap needed its slow per-sample loop;
# `passed_without_mechanism` counts passes where the strategy's own mechanism did not run (e.g.
# no backward node under vmap).

# %%
if records:
    summary = coverage_summary.summarize(records)
    print(coverage_summary.format_summary(summary, limit=12))

# %% tags=["nbval-ignore-output"]
if records:
    coverage_summary.summary_figure(records).show()

# %% [markdown]
# ## 2. Regressions (target: none with the scoped rules) and fixes
#
# A *regression* is a record where `builtin` passes and a functionalizing strategy fails or
# gives different numbers; a *fix* the reverse. Each regression carries the explanation the sweep
# identified, and `detail` the first in_dims choice that failed. On the first sample of every op
# there are none with the rules; over all samples, the ones printed below remain (at the time of
# writing: circular `pad` under whole/hooks, wrong numbers whenever the cotangent is batched at dim
# -1, i.e. a batch-last layout, and right at dim 0; traced_backward on `as_strided_scatter` and
# `stft`). Without the rules (`--no-rules`), `as_strided` (both variants), `as_strided_copy` and
# circular `pad` regress under both strategies: functionalization emits `as_strided_scatter`,
# which has no batching rule. (`as_strided.partial_views` then fails under builtin too at in_dims
# `(-1, -1)`: vmap's `as_strided` reads a batch-last input differently from the per-sample loop.)

# %%
if records:
    print("rules:", meta.get("rules"), "|", meta.get("rules_scope"))
    print("regressions:", len(summary["regressions"]), "| fixes:", len(summary["fixes"]))
    details = {(r["op"], coverage_summary.row_key(r)[1], r["strategy"]): r["detail"] for r in records}
    for r in summary["regressions"]:
        print(f"  REGRESSION {r['strategy']:6s} {r['op']}[{r['sample']}] {r['status']} {r['reason']} "
              f"({details[(r['op'], r['sample'], r['strategy'])]}): {r['explanation'][:100]}")
    for r in summary["fixes"]:
        print(f"  fix {r['strategy']:6s} {r['op']}[{r['sample']}] (builtin: {r['builtin_reason']})")

# %% [markdown]
# The rules are what removes those regressions. Computed here, live, on those ops' first sample and
# first in_dims choice, with and without the rules (a few seconds):

# %%
from funcbwd.measure import coverage_sweep

for rules in (False, True):
    recs, _ = coverage_sweep.run_sweep("as_strided,as_strided_copy,nn.functional.pad.circular",
                                       strategies=("builtin", "whole", "hooks"), rules=rules, max_in_dims=1)
    regs = coverage_summary.summarize(recs)["regressions"]
    print(f"rules={rules}: {len(regs)} regressions", *[f"{r['strategy']} {r['op']}: {r['reason']}" for r in regs], sep="\n  ")

# %% [markdown]
# ## 3. Slow fallbacks: which ATen ops make vmap loop, and what functionalizing changes

# %%
if records:
    for st in summary["strategies"]:
        top = list(summary["fallback_ops"].get(st, {}).items())[:10]
        print(f"{st:8s} slow-fallback ops (records): {', '.join(f'{k}={v}' for k, v in top) or '(none)'}")
    for st in summary["fallback_removed"]:
        print(f"{st:8s} fallback removed for: {', '.join(summary['fallback_removed'][st]) or '(none)'}")
        print(f"{st:8s} fallback introduced for: {', '.join(summary['fallback_introduced'][st]) or '(none)'}")

# %% [markdown]
# ## 4. The cost of functionalizing every backward, per op
#
# For every op whose first sample passes under both `builtin` and `whole` (with the rules): the
# batched backward (`vmap` of the `vjp_fn` over 64 cotangents, primals fixed, forward not timed),
# `whole` / `builtin`, timed interleaved in one process on the thread CPU clock with one torch
# thread (the ratio of the two arms' medians). The arms' results are compared before timing.
# Timings depend on the machine and its load; the distribution matters, not any one op.

# %%
if costs:
    print(coverage_cost.format_cost(coverage_cost.summarize_cost(costs)))
else:
    print("the saved sweep has no cost entries (run it with --cost)")

# %% tags=["nbval-ignore-output"]
if costs:
    coverage_cost.cost_figure(costs).show()

# %% [markdown]
# ## 5. `traced_backward`: torch's own backward traced once, functionalized, copies elided
#
# Under vmap, `traced_backward` traces the unbatched `vjp_fn` (all of torch's C++ nodes) with
# `make_fx(functionalize(vjp_fn), tracing_mode="real")`, elides its `aten.copy` nodes
# (`funcbwd.fx.elide`) and runs the graph on the batched cotangents. The saved tensors become graph
# constants, so a graph belongs to the primal values it was traced from, and the strategy only
# applies when the cotangents alone are batched: its records are scenario `vmap_cotangents`, next
# to builtin's records of the same scenario (its baseline). Trace time per record is in `detail`.

# %%
if records:
    tb = [r for r in records if r["strategy"] == "traced_backward"]
    if tb:
        base = {(r["op"], r["sample"]): r for r in records
                if r["strategy"] == "builtin" and r["scenario"] == "vmap_cotangents"}
        both = [(r, base.get((r["op"], r["sample"]))) for r in tb if r["status"] != "not_applicable"]
        print("tracing:", summary.get("tracing"))
        print("traced_backward fails where builtin (cotangents only) passes:")
        for r, b in both:
            if b and b["status"] == "pass" and r["status"] != "pass":
                print(f"  {r['op']}[{r['sample']}] {r['status']} {r['reason']}: {r['message'][:120]}")
        gone = [f"{r['op']} ({', '.join(sorted(set(b['fallback_ops']) - set(r['fallback_ops'])))})"
                for r, b in both if b and r["status"] == "pass" and set(b["fallback_ops"]) - set(r["fallback_ops"])]
        print(f"slow fallback removed by tracing ({len(gone)}):", ", ".join(gone) or "(none)")
    else:
        print("the saved sweep did not run traced_backward")

# %% [markdown]
# ## 6. The records that change a status against `builtin` (sortable: click a header)
#
# Of the op x sample rows where some strategy does not simply pass (failure, wrong result or slow
# fallback), the table shows those where a functionalizing strategy *changes a status* against
# `builtin` (a regression or a fix); rows that only lose the slow fallback are counted, and listed
# with every other differing row in `python -m funcbwd report`.

# %%
interesting = coverage_summary.differing(records) if records else []
changes = {key: coverage_summary.change(per) for key, per in coverage_summary.by_key(interesting).items()}
batched_only = [key for key, c in changes.items() if c and all(t.startswith("batched:") for t in c.split())]
changed = [r for key, per in coverage_summary.by_key(interesting).items()
           if changes[key] and key not in batched_only for r in per.values()]
if records:
    print(len(changes), "of", len(coverage_summary.by_key(records)), "op x sample rows do not simply pass;",
          len(batched_only), "only lose vmap's slow fallback under a functionalizing strategy (listed in the report);",
          len(coverage_summary.by_key(changed)), "change a status against builtin (below)")

# %%
display.Rich(f"{len(changed)} records (sortable HTML table)", coverage_summary.table_html(changed)) if records else None
