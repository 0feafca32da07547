"""The bench (funcbwd_lab.studies.bench.bench*, timing), its charts (funcbwd_lab.studies.bench.charts) and README block,
and the scoped aten::copy vmap rule: the ratio, target and interval math on synthetic samples
(each with a mutation that flips its verdict), the harness on a tiny config. Never a timing
threshold: no assertion depends on how fast anything ran."""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import warnings

import plotly.graph_objects as go
import pytest
import torch

from funcbwd import internals
from funcbwd_lab import cli
from funcbwd_lab.batching.copy import batched_copy_rule, copy_rule_active
from funcbwd_lab.studies.bench import cli as bench_cli
from funcbwd.errors import BadInputError, UnknownNameError
from funcbwd_lab.studies.bench import bench
from funcbwd_lab.studies.bench import inputs as bench_inputs
from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.bench import text as bench_text
from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.bench.config import COPY_RULE, NO_STRATEGY, NOOP_HOOK, SCHEMA, BenchConfig
from funcbwd_lab.ops import registry
from funcbwd_lab.run import runner
from funcbwd_lab.views import readme
from funcbwd_lab.studies.bench import charts as plots


# ------------------------------------------------------------------------------ synthetic results
def _rec(op, batch, label, mode, samples, size="small"):
    return {"op": op, "size": size, "shape": "3x5", "batch": batch, "label": label,
            "strategy": label.split("+")[0], "mode": mode, "number": 1, "samples": samples,
            "median": statistics.median(samples)}


def _copy(label, copy_bytes, error=""):
    return {"label": label, "op": "diag", "form": label, "vmap": True, "copies": None if error else 1,
            "copy_bytes": None if error else copy_bytes, "extra_copy_bytes": None if error else copy_bytes - 48,
            "copy_ops": "", "error": error}


def _synthetic() -> dict:
    batched = [
        _rec("diag", 64, "builtin", "vmap", [1.0, 2.0, 3.0]),        # median 2
        _rec("diag", 64, "builtin", "loop", [20.0, 19.0, 21.0]),     # median 20
        _rec("diag", 64, "handfixed", "vmap", [2.5, 3.0, 3.5]),      # median 3
        _rec("diag", 64, "per_formula", "vmap", [3.0, 4.0, 100.0]),  # median 4 (outlier ignored)
        _rec("diag", 64, "per_formula", "loop", [40.0, 41.0, 39.0]),  # median 40
        _rec("diag", 64, COPY_RULE, "vmap", [2.2, 2.4]),             # median 2.3, shares per_formula's loop
        _rec("diag", 64, "traced", "vmap", [3.2, 3.3]),              # 1.083x handfixed, 1.625x builtin
        _rec("diag", 256, "builtin", "vmap", [5.0]),
        _rec("diag", 256, "handfixed", "vmap", [5.0]),
        _rec("diag", 256, "per_formula", "vmap", [5.5]),             # its loop was not timed
        _rec("diag", 256, "traced", "vmap", [5.0]),
        _rec("diag", 8, "per_formula", "vmap", [1.0]),               # no reference at this batch
        _rec("diag", 8, "handfixed", "vmap", [1.0]),
        _rec("diag", 8, "traced", "vmap", [1.0]),
        _rec("diag", 64, "builtin", "vmap", [10.0], size="large"),
        _rec("diag", 64, "handfixed", "vmap", [10.0], size="large"),
        _rec("diag", 64, "traced", "vmap", [9.0], size="large"),     # 0.9x builtin
    ]
    applicability = [{"op": "diag", "size": s, "label": lbl, "status": "pass", "reason": ""}
                     for s in ("small", "large") for lbl in ("builtin", "handfixed", "traced", "per_formula")]
    applicability.append({"op": "diag", "size": "small", "label": "hooks", "status": "fail",
                          "reason": "functionalization_assert"})
    overhead = [
        {"op": "diag", "label": NO_STRATEGY, "nodes": 4, "samples": [100e-6, 101e-6, 99e-6]},
        {"op": "diag", "label": NOOP_HOOK, "nodes": 4, "samples": [108e-6]},
        {"op": "diag", "label": "hooks", "nodes": 4, "samples": [110e-6]},
        {"op": "diag", "label": "whole", "nodes": 4, "samples": [], "error": "RuntimeError: no"},
    ]
    memory = [
        {"op": "diag", "size": "small", "batch": 64, "label": "builtin", "allocated_bytes": 100,
         "allocations": 1, "peak_bytes": 50},
        {"op": "diag", "size": "small", "batch": 64, "label": "handfixed", "allocated_bytes": 200,
         "allocations": 2, "peak_bytes": 60},
        {"op": "diag", "size": "small", "batch": 64, "label": "per_formula", "allocated_bytes": 250,
         "allocations": 9, "peak_bytes": 75},
    ]
    copies = {"status": "ok", "rows": [_copy("traced", 96), _copy("handfixed", 96), _copy("builtin", 48),
                                       _copy("per_formula", 0, error="RuntimeError: capture failed")]}
    clear = [1e-3 + i * 1e-6 for i in range(8)]
    claim = {"status": "ok", "graphs": [
        {"graph": "clear", "nodes": 100, "number": 1, "clock": "thread_cpu",  # +2 us/node every pair
         "samples": {"hooks": [c + 200e-6 for c in clear], NOOP_HOOK: clear}},
        {"graph": "noise", "nodes": 100, "number": 1, "clock": "thread_cpu",  # +-1 us/node, alternating
         "samples": {"hooks": [c + (100e-6 if i % 2 else -100e-6) for i, c in enumerate(clear)],
                     NOOP_HOOK: clear}},
    ]}
    return {"schema": SCHEMA, "config": {"name": "synthetic", "ops": ["diag"], "sizes": ["small", "large"],
                                         "batch_sizes": [8, 64, 256]},
            "environment": {"torch": "x", "cpu_count": 2, "torch_num_threads_used": 1},
            "applicability": applicability, "batched": batched, "overhead": overhead, "memory": memory,
            "copies": copies, "hooks_claim": claim, "elapsed_s": 1.0}


def _row(rows, **key):
    (r,) = [r for r in rows if all(r[k] == v for k, v in key.items())]
    return r


def _target(res, name, ops=("diag",)):
    (t,) = [t for t in bench_results.targets(res, ops=ops) if t["name"] == name]
    return t


def test_ratios_come_from_medians_of_the_raw_samples():
    rows = bench_results.ratios(_synthetic())
    r = _row(rows, batch=64, label="per_formula", size="small")
    assert r["median_s"] == 4.0 and r["builtin_median_s"] == 2.0 and r["loop_median_s"] == 40.0
    assert r["handfixed_median_s"] == 3.0 and r["ratio_vs_handfixed"] == pytest.approx(4 / 3)
    assert r["ratio_vs_builtin"] == pytest.approx(2.0)
    assert r["speedup_vs_loop"] == pytest.approx(10.0)
    assert r["speedup_vs_builtin_loop"] == pytest.approx(5.0)
    assert _row(rows, batch=64, label="builtin", size="small")["ratio_vs_builtin"] == pytest.approx(1.0)
    assert _row(rows, batch=64, label="handfixed", size="small")["ratio_vs_handfixed"] == pytest.approx(1.0)
    # the copy-rule variant is compared with per_formula's loop (the rule only acts under vmap)
    cr = _row(rows, batch=64, label=COPY_RULE)
    assert cr["ratio_vs_builtin"] == pytest.approx(1.15) and cr["speedup_vs_loop"] == pytest.approx(40 / 2.3)
    # what was not measured stays missing, never extrapolated
    assert math.isnan(_row(rows, batch=256, label="per_formula")["speedup_vs_loop"])
    assert _row(rows, batch=256, label="per_formula")["ratio_vs_handfixed"] == pytest.approx(1.1)
    assert math.isnan(_row(rows, batch=8, label="per_formula")["ratio_vs_builtin"])


def test_stored_medians_are_not_trusted():
    res = _synthetic()
    res["batched"][3]["median"] = 999.0
    assert _row(bench_results.ratios(res), batch=64, label="per_formula", size="small")["median_s"] == 4.0


def test_headline_picks_the_lowest_worst_case_ratio_vs_handfixed():
    d = bench_results.headline(_synthetic(), ops=("diag",))["per_op"]["diag"]
    assert d["best"] == COPY_RULE  # worst 2.3/3 (B=64 only) vs traced's 3.25/3 and per_formula's 4/3
    assert d["worst_ratio_vs_handfixed"] == pytest.approx(2.3 / 3)
    assert d["worst_ratio_vs_builtin"] == pytest.approx(1.15)
    assert set(d["all"]) == {"per_formula", COPY_RULE, "traced"}  # references are not candidates
    # B=256 has no loop timing: the minimum is over what was measured, not NaN
    assert d["all"]["per_formula"]["min_speedup_vs_loop"] == pytest.approx(10.0)
    assert bench_results.headline(_synthetic(), ops=("topk",))["per_op"]["topk"]["best"] is None
    big = bench_results.headline(_synthetic(), ops=("diag",), size="large")["per_op"]["diag"]
    assert big["best"] == "traced" and big["worst_ratio_vs_builtin"] == pytest.approx(0.9)


def test_targets_are_computed_and_each_can_flip():
    res = _synthetic()
    t1 = _target(res, "traced_vs_handfixed")  # 1.0 (B=8), 3.25/3 (B=64), 1.0 (B=256), 0.9 (large)
    assert t1["status"] == "met" and t1["value"] == pytest.approx(3.25 / 3)
    assert t1["where"]["batch"] == 64 and t1["where"]["size"] == "small"
    t2 = _target(res, "traced_vs_builtin_small")
    assert t2["status"] == "missed" and t2["value"] == pytest.approx(1.625)
    t3 = _target(res, "traced_vs_builtin_large")
    assert t3["status"] == "met" and t3["value"] == pytest.approx(0.9)
    t4 = _target(res, "traced_copy_bytes_vs_handfixed")
    assert t4["status"] == "met" and t4["value"] == 0
    # mutations: a slower traced sample, more traced copy bytes, a traced failure
    slow = copy.deepcopy(res)
    _row(slow["batched"], batch=64, label="traced", size="small")["samples"] = [3.4]
    assert _target(slow, "traced_vs_handfixed")["status"] == "missed"
    more = copy.deepcopy(res)
    more["copies"]["rows"][0]["copy_bytes"] = 128
    assert _target(more, "traced_copy_bytes_vs_handfixed")["value"] == 32
    assert _target(more, "traced_copy_bytes_vs_handfixed")["status"] == "missed"
    gone = copy.deepcopy(res)
    gone["batched"] = [r for r in gone["batched"] if r["label"] != "traced" or r["size"] != "large"]
    t3 = _target(gone, "traced_vs_builtin_large")
    assert t3["status"] == "missed" and t3["missing"] == ["diag"]
    # a target whose sizes were not run is not measured, not missed
    small_only = copy.deepcopy(res)
    small_only["config"]["sizes"] = ["small"]
    assert _target(small_only, "traced_vs_builtin_large")["status"] == "not measured"
    line = bench_text.target_line(t2)
    assert line.startswith("traced <= 1.2x builtin") and "MISSED, 1.62x" in line and "B=64" in line


def test_median_interval_is_the_sign_test_interval():
    xs = [float(x) for x in range(20)]
    assert timing.median_interval(xs) == (5.0, 14.0)  # n=20: x_(6), x_(15), coverage 0.959
    assert timing.median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # n=6: min..max, 0.969
    assert all(math.isnan(v) for v in timing.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]))  # 0.9375
    with pytest.raises(ValueError, match="differ in length"):
        timing.paired_difference([1.0], [1.0, 2.0])


def test_hooks_claim_reports_a_number_only_when_resolved():
    claim = bench_results.hooks_claim_result(_synthetic())
    clear, noise = claim["graphs"]
    assert clear["us_per_node"]["resolved"] and clear["us_per_node"]["median"] == pytest.approx(2.0)
    assert clear["verdict"] == "2.00 us/node"
    assert not noise["us_per_node"]["resolved"] and noise["verdict"] == "not resolved at this noise"
    assert noise["us_per_node"]["ci_low"] < 0 < noise["us_per_node"]["ci_high"]
    # mutation: the same noise around a +3 us/node shift is resolved
    res = _synthetic()
    g = res["hooks_claim"]["graphs"][1]["samples"]
    g["hooks"] = [h + 300e-6 for h in g["hooks"]]
    assert bench_results.hooks_claim_result(res)["graphs"][1]["us_per_node"]["resolved"]
    assert bench_results.hooks_claim_result({"hooks_claim": {"status": "skipped", "reason": "r"}}) \
        == {"status": "skipped", "reason": "r"}
    assert "not resolved at this noise" in bench_text.format_hooks_claim(_synthetic())


def test_cost_summary_per_strategy():
    cs = bench_results.cost_summary(_synthetic())
    t = cs["traced"]
    # the op's median over its B>=64 rows, every size: small 3.25/3 and 5/5, large 9/10
    assert t["batched_vs_handfixed"] == pytest.approx(statistics.median([3.25 / 3, 1.0, 0.9]))
    assert t["batched_vs_builtin_by_size"]["large"] == pytest.approx(0.9)
    assert t["extra_copy_bytes_vs_handfixed"] == 0 and t["extra_copy_bytes_vs_builtin"] == 48
    assert cs["hooks"]["ops_failing"] == ["diag"] and cs["hooks"]["vmap_off_ratio"] == pytest.approx(1.1)
    assert [v["verdict"] for v in cs["hooks"]["hooks_claim"]] == ["2.00 us/node", "not resolved at this noise"]
    assert cs["per_formula"]["copy_uncaptured"] == ["diag"]
    assert cs["handfixed"]["batched_vs_handfixed"] == pytest.approx(1.0)


def test_overhead_memory_and_copy_rows():
    ov = {r["label"]: r for r in bench_results.overhead_rows(_synthetic())}
    assert ov["hooks"]["ratio_vs_none"] == pytest.approx(1.1)
    assert ov["hooks"]["us_per_node_vs_none"] == pytest.approx(2.5)
    assert ov[NOOP_HOOK]["us_per_node_vs_noop_hook"] == pytest.approx(0.0)
    mem = {r["label"]: r for r in bench_results.memory_rows(_synthetic())}
    assert mem["per_formula"]["allocated_vs_builtin"] == pytest.approx(2.5)
    assert mem["per_formula"]["allocated_vs_handfixed"] == pytest.approx(1.25)
    assert mem["per_formula"]["peak_vs_builtin"] == pytest.approx(1.5)
    cr = {r["label"]: r for r in bench_results.copy_rows(_synthetic())}
    assert cr["traced"]["extra_copy_bytes_vs_handfixed"] == 0
    assert cr["builtin"]["extra_copy_bytes_vs_handfixed"] == -48
    assert cr["per_formula"]["extra_copy_bytes_vs_handfixed"] is None


def test_rel_iqr():
    assert timing.rel_iqr([1.0, 1.0, 1.0]) == 0.0
    assert timing.rel_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)
    assert math.isnan(timing.rel_iqr([1.0]))


# ------------------------------------------------------------------------------ charts and README
def _annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations if a.text]


def test_charts_label_references_targets_units_and_failures():
    res = _synthetic()
    ratio = plots.ratio_vs_batch(res, "small", "ratio_vs_handfixed")
    assert "handfixed" not in {t.name for t in ratio.data}  # the reference is a line, not a trace
    notes = _annotations(ratio)
    assert "handfixed = 1.0" in notes and any(n.startswith("target: traced <= 1.1x") for n in notes)
    assert any(n == "failed:<br>hooks (functionalization_assert)" for n in notes)
    assert "handfixed's (x" in ratio.layout.yaxis.title.text
    assert "batch size" in ratio.layout.xaxis.title.text
    copies = plots.copies_chart(res)
    fails = [t for t in copies.data if isinstance(t, go.Scatter)]
    assert [t.name for t in fails] == ["per_formula failed"] and list(fails[0].y) == [0]
    assert "(B)" in copies.layout.yaxis.title.text
    overhead = plots.overhead_chart(res)
    assert [t.name for t in overhead.data if isinstance(t, go.Scatter)] == ["whole failed"]
    assert "(us)" in overhead.layout.yaxis.title.text
    # mutation: nothing failed, nothing drawn as failed
    ok = copy.deepcopy(res)
    ok["applicability"] = [a for a in ok["applicability"] if a["status"] == "pass"]
    ok["copies"]["rows"] = ok["copies"]["rows"][:3]
    assert not any(n.startswith("failed") for n in _annotations(plots.ratio_vs_batch(ok)))
    assert not [t for t in plots.copies_chart(ok).data if isinstance(t, go.Scatter)]
    with pytest.raises(BadInputError, match="valid metrics"):
        plots.ratio_vs_batch(res, metric="speed")


def test_readme_block_is_computed_from_the_result():
    res = _synthetic()
    text = readme.bench_markdown(res)
    assert "| diag | `per_formula+copy_rule` | 0.77x | 1.15x |" in text
    for t in bench_results.targets(res):
        assert f"- {bench_text.target_line(t)}" in text
    assert "not resolved at this noise" in text and "python -m funcbwd_lab bench --quick --out" in text
    slow = copy.deepcopy(res)  # mutation: the block follows the data
    _row(slow["batched"], batch=64, label=COPY_RULE)["samples"] = [6.0]
    assert "| diag | `traced` |" in readme.bench_markdown(slow)


# ------------------------------------------------------------------------------ the harness
TINY = dict(ops=("index_select",), strategies=("per_formula", "hooks"), batch_sizes=(1, 4),
            sizes=("small",), repeats=2, loop_repeats=1, target_sample_s=1e-4, max_number=3,
            overhead_repeats=2, overhead_nodes=2, hooks_claim_nodes=20, hooks_claim_pairs=6,
            hooks_claim_sample_s=1e-4, memory_batches=(4,), copy_vmap_modes=(True,),
            check_batch=2, name="tiny")
LABELS = ("handfixed", "builtin", "per_formula", "hooks")


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    res = bench.run_bench(BenchConfig(**TINY))
    assert torch.get_num_threads() == threads  # the timing thread count is restored
    return res


def test_tiny_run_records_environment_and_every_sample(tiny):
    env = tiny["environment"]
    assert env["torch"] == torch.__version__
    assert env["torch_num_threads_default"] == torch.get_num_threads()
    assert env["torch_num_threads_used"] == 1 and env["cpu_count"] >= 1 and env["platform"]
    assert tiny["config"]["ops"] == ["index_select"] and tiny["config"]["batch_sizes"] == [1, 4]
    # the references are timed although not asked for; every label passes vmap_cotangents, as
    # decided by the matrix runner, not assumed
    assert {(a["label"], a["status"]) for a in tiny["applicability"]} == {(s, "pass") for s in LABELS}
    recs = tiny["batched"]
    assert {(r["label"], r["batch"], r["mode"]) for r in recs} == {
        (s, b, m) for s in LABELS for b in (1, 4) for m in ("vmap", "loop")}
    for r in recs:
        assert len(r["samples"]) == len(r["wall_samples"]) == (2 if r["mode"] == "vmap" else 1)
        assert r["clock"] == "thread_cpu" and "error" not in r
        assert all(t > 0 for t in r["samples"])


def test_tiny_run_sections_and_their_ratios(tiny):
    med = {(r["batch"], r["label"], r["mode"]): statistics.median(r["samples"]) for r in tiny["batched"]}
    for row in bench_results.ratios(tiny):
        b, lbl = row["batch"], row["label"]
        assert row["ratio_vs_handfixed"] == pytest.approx(med[(b, lbl, "vmap")] / med[(b, "handfixed", "vmap")])
        assert row["ratio_vs_builtin"] == pytest.approx(med[(b, lbl, "vmap")] / med[(b, "builtin", "vmap")])
        assert row["speedup_vs_loop"] == pytest.approx(med[(b, lbl, "loop")] / med[(b, lbl, "vmap")])
    assert {r["label"] for r in tiny["overhead"]} == {NO_STRATEGY, NOOP_HOOK, *LABELS}
    assert {r["label"] for r in tiny["memory"]} == set(LABELS)
    assert all(r["allocated_bytes"] > 0 for r in tiny["memory"])
    assert {r["label"] for r in tiny["copies"]["rows"]} >= {"handfixed", "builtin", "per_formula", "hooks"}
    graphs = tiny["hooks_claim"]["graphs"]
    assert len(graphs) == 2 and all(not g.get("error") for g in graphs), graphs
    assert all(g["nodes"] >= 20 and len(g["samples"]["hooks"]) == len(g["samples"][NOOP_HOOK]) == 6
               for g in graphs)
    assert [t["name"] for t in tiny["targets"]] == [t["name"] for t in bench_results.targets(tiny)]
    assert set(bench_results.cost_summary(tiny, min_batch=1)) == set(LABELS)


def test_save_and_load_round_trip(tiny, tmp_path):
    path = tmp_path / "b.json"
    bench_results.save(tiny, str(path))
    back = bench_results.load(str(path))
    assert back["batched"] == json.loads(json.dumps(tiny["batched"]))
    assert "NaN" not in path.read_text()  # strict JSON: what was not measured is null
    assert bench_results.ratios(back) == bench_results.ratios(tiny)
    assert bench_results.hooks_claim_result(back) == bench_results.hooks_claim_result(tiny)
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(BadInputError, match="not a funcbwd bench result"):
        bench_results.load(str(tmp_path / "other.json"))
    with pytest.raises(BadInputError, match="no bench result"):
        bench_results.load(str(tmp_path / "missing.json"))


def test_plots_build_small_figures(tiny):
    figs = plots.all_figures(tiny)
    assert all(isinstance(f, go.Figure) for f in figs.values())
    ratio = figs["ratio_vs_handfixed"]
    assert {t.name for t in ratio.data} == {"builtin", "per_formula", "hooks"}
    assert "handfixed" in {t.name for t in figs["ratio_vs_builtin"].data}
    assert ratio.layout.xaxis.type == "log"
    assert sum(len(t.x) for f in figs.values() for t in f.data if getattr(t, "x", None) is not None) < 300


def test_quick_config_covers_every_test_op_and_every_target():
    cfg = BenchConfig.quick().validate()
    assert set(cfg.ops) == set(registry.TEST_OPS)
    for name, label, _, sizes, min_batch, _, _ in bench_results.RATIO_TARGETS:
        assert label in cfg.labels() and set(sizes or ["small"]) <= set(cfg.sizes), name
        assert any(b >= min_batch for b in cfg.batch_sizes), name
    assert cfg.hooks_claim_nodes >= 1000 and cfg.hooks_claim_pairs >= 6 and True in cfg.copy_vmap_modes


# ------------------------------------------------------------------------------ sizes and input errors
def test_resize_scales_every_dim_and_keeps_the_op_valid():
    for op in registry.TEST_OPS:
        spec = registry.get_op(op)
        small, large = bench_inputs.resize(spec, "small"), bench_inputs.resize(spec, "large")
        assert small.name == spec.samples()[0].name and large.name.endswith("x16")
        x0, x1 = small.args[small.diff[0]], large.args[large.diff[0]]
        assert list(x1.shape) == [16 * s for s in x0.shape], op
        with torch.no_grad():
            spec.torch_op(*large.args)
    x, dim, idx = bench_inputs.resize(registry.get_op("index_select"), "large").args
    assert idx.numel() == 80 and int(idx.max()) < x.shape[dim]


def test_bad_config_names_the_valid_choices():
    with pytest.raises(UnknownNameError, match=r"valid ops, by group:\n  test \(8\): .*diag"):
        BenchConfig(ops=("nope",)).validate()
    with pytest.raises(UnknownNameError, match="per_formula\\+copy_rule"):
        BenchConfig(strategies=("fast",)).validate()
    with pytest.raises(UnknownNameError, match="valid sizes"):
        BenchConfig(sizes=("huge",)).validate()
    with pytest.raises(UnknownNameError, match="valid clocks"):
        BenchConfig(clock="sundial").validate()
    with pytest.raises(BadInputError, match="clock='wall'"):
        BenchConfig(num_threads=2).validate()
    with pytest.raises(BadInputError, match="batch sizes"):
        BenchConfig(batch_sizes=(0,)).validate()
    with pytest.raises(BadInputError, match="hooks_claim_pairs"):
        BenchConfig(hooks_claim_pairs=3).validate()
    args = argparse.Namespace(quick=True, ops=None, strategies=None, batches="a,b", sizes=None,
                              repeats=None, threads=None, clock=None)
    with pytest.raises(BadInputError, match="--batches must be comma-separated integers"):
        bench_cli.config_from_args(args)
    assert cli.main(["bench", "--ops", "nope"]) == 2
    assert cli.main(["bench", "--batches", "a,b"]) == 2


# ------------------------------------------------------------------------------ the copy rule
def test_copy_rule_is_scoped_nested_and_removed_on_error():
    assert internals.batching_kind("copy") == "fallback" and not copy_rule_active()
    with batched_copy_rule():
        assert internals.batching_kind("copy") == "batching rule"
        with batched_copy_rule():
            assert copy_rule_active()
        assert internals.batching_kind("copy") == "batching rule"
    assert internals.batching_kind("copy") == "fallback"
    with pytest.raises(RuntimeError, match="boom"):
        with batched_copy_rule():
            raise RuntimeError("boom")
    assert internals.batching_kind("copy") == "fallback" and not copy_rule_active()


def test_copy_rule_removes_the_fallback_and_matches_the_loop():
    spec = registry.get_op("diag")
    for smp in spec.samples()[:3]:  # the non-square samples: the copy_ branch
        before = runner.run(spec, "vmap_cotangents", "per_formula", smp)
        assert before.status == "pass" and any("copy" in f for f in before.fallback_ops)
        with batched_copy_rule():
            after = runner.run(spec, "vmap_cotangents", "per_formula", smp)
        assert after.status == "pass" and after.fallback_ops == [], smp.name


def test_copy_rule_kernel_semantics_under_vmap():
    dst = torch.zeros(2, 3, dtype=torch.float64)
    src = torch.randn(5, 3)  # batched, broadcast over dst's rows, cast to dst's dtype
    with batched_copy_rule(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback would warn
        out = torch.vmap(lambda s: torch.ops.aten.copy(dst, s))(src)
    expected = torch.stack([torch.ops.aten.copy(dst, s) for s in src])
    assert out.dtype == torch.float64 and torch.equal(out, expected)
