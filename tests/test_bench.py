"""funcbwd.measure.bench, funcbwd.batching.copy and funcbwd.views.plots: the harness on a tiny config, the ratio
math on synthetic medians, the scoped aten::copy vmap rule. Never a timing threshold."""

from __future__ import annotations

import json
import math
import statistics
import warnings

import plotly.graph_objects as go
import pytest
import torch

from funcbwd import cli, internals
from funcbwd.measure import bench
from funcbwd.ops import registry
from funcbwd.run import matrix
from funcbwd.views import plots
from funcbwd.batching.copy import batched_copy_rule, copy_rule_active
from funcbwd.errors import BadInputError, UnknownNameError


# ------------------------------------------------------------------------------ synthetic results
def _rec(op, batch, label, mode, samples, size="small"):
    return {"op": op, "size": size, "shape": "3x5", "batch": batch, "label": label,
            "strategy": label.split("+")[0], "mode": mode, "number": 1, "samples": samples,
            "median": statistics.median(samples)}


def _synthetic() -> dict:
    batched = [
        _rec("diag", 64, "builtin", "vmap", [1.0, 2.0, 3.0]),        # median 2
        _rec("diag", 64, "builtin", "loop", [20.0, 19.0, 21.0]),     # median 20
        _rec("diag", 64, "per_formula", "vmap", [3.0, 4.0, 100.0]),  # median 4 (outlier ignored)
        _rec("diag", 64, "per_formula", "loop", [40.0, 41.0, 39.0]),  # median 40
        _rec("diag", 64, bench.COPY_RULE, "vmap", [2.2, 2.4]),       # median 2.3, shares per_formula's loop
        _rec("diag", 256, "builtin", "vmap", [5.0]),
        _rec("diag", 256, "per_formula", "vmap", [5.5]),             # its loop was not timed
        _rec("diag", 8, "per_formula", "vmap", [1.0]),               # no builtin at this batch
    ]
    overhead = [
        {"op": "diag", "label": bench.NO_STRATEGY, "nodes": 4, "samples": [100e-6, 101e-6, 99e-6]},
        {"op": "diag", "label": bench.NOOP_HOOK, "nodes": 4, "samples": [108e-6]},
        {"op": "diag", "label": "hooks", "nodes": 4, "samples": [110e-6]},
    ]
    memory = [
        {"op": "diag", "size": "small", "batch": 64, "label": "builtin", "allocated_bytes": 100,
         "allocations": 1, "peak_bytes": 50},
        {"op": "diag", "size": "small", "batch": 64, "label": "per_formula", "allocated_bytes": 250,
         "allocations": 9, "peak_bytes": 75},
    ]
    return {"schema": bench.SCHEMA, "config": {"ops": ["diag"]}, "batched": batched,
            "overhead": overhead, "memory": memory, "copies": {"status": "unavailable", "reason": "x"},
            "elapsed_s": 1.0}


def _row(rows, **key):
    (r,) = [r for r in rows if all(r[k] == v for k, v in key.items())]
    return r


def test_ratios_come_from_medians_of_the_raw_samples():
    rows = bench.ratios(_synthetic())
    r = _row(rows, batch=64, label="per_formula")
    assert r["median_s"] == 4.0 and r["builtin_median_s"] == 2.0 and r["loop_median_s"] == 40.0
    assert r["ratio_vs_builtin"] == pytest.approx(2.0)
    assert r["speedup_vs_loop"] == pytest.approx(10.0)
    assert r["speedup_vs_builtin_loop"] == pytest.approx(5.0)
    assert _row(rows, batch=64, label="builtin")["ratio_vs_builtin"] == pytest.approx(1.0)
    # the copy-rule variant is compared with per_formula's loop (the rule only acts under vmap)
    cr = _row(rows, batch=64, label=bench.COPY_RULE)
    assert cr["ratio_vs_builtin"] == pytest.approx(1.15) and cr["speedup_vs_loop"] == pytest.approx(40 / 2.3)
    # what was not measured stays missing, never extrapolated
    assert math.isnan(_row(rows, batch=256, label="per_formula")["speedup_vs_loop"])
    assert _row(rows, batch=256, label="per_formula")["ratio_vs_builtin"] == pytest.approx(1.1)
    assert math.isnan(_row(rows, batch=8, label="per_formula")["ratio_vs_builtin"])


def test_stored_medians_are_not_trusted():
    res = _synthetic()
    res["batched"][2]["median"] = 999.0
    assert _row(bench.ratios(res), batch=64, label="per_formula")["median_s"] == 4.0


def test_headline_picks_the_lowest_worst_case_ratio_and_flags_targets():
    h = bench.headline(_synthetic(), ops=("diag",))
    d = h["per_op"]["diag"]
    assert d["best"] == bench.COPY_RULE  # worst ratio 1.15 (B=64) vs per_formula's 2.0
    assert d["worst_ratio_vs_builtin"] == pytest.approx(1.15)
    assert d["meets_ratio_target"] is True and d["meets_loop_target"] is True
    assert d["all"]["per_formula"]["worst_ratio_vs_builtin"] == pytest.approx(2.0)
    # B=256 has no loop timing: the minimum is over what was measured, not NaN
    assert d["all"]["per_formula"]["min_speedup_vs_loop"] == pytest.approx(10.0)
    # hooks: (110 - 108) us over 4 nodes = 0.5 us per node over the no-op hook
    hk = h["hooks_us_per_node_vs_noop_hook"]
    assert hk["max"] == pytest.approx(0.5) and hk["meets_target"] is True
    assert bench.headline(_synthetic(), ops=("topk",))["per_op"]["topk"]["best"] is None
    assert "not measured" in h["hook_bodies_us_per_node_vs_noop"]


def test_hook_body_difference_is_per_node_microseconds():
    res = _synthetic()
    res["hook_bodies"] = {"status": "ok", "calls_per_sample_call": 100, "records": [
        {"label": "hooks", "samples": [150e-6, 160e-6, 140e-6]},
        {"label": bench.NOOP_HOOK, "samples": [20e-6, 30e-6]}]}
    assert bench.hook_body_difference(res) == pytest.approx((150 - 25) / 100)


def test_overhead_and_memory_rows():
    ov = {r["label"]: r for r in bench.overhead_rows(_synthetic())}
    assert ov["hooks"]["ratio_vs_none"] == pytest.approx(1.1)
    assert ov["hooks"]["us_per_node_vs_none"] == pytest.approx(2.5)
    assert ov[bench.NOOP_HOOK]["us_per_node_vs_noop_hook"] == pytest.approx(0.0)
    mem = {r["label"]: r for r in bench.memory_rows(_synthetic())}
    assert mem["per_formula"]["allocated_vs_builtin"] == pytest.approx(2.5)
    assert mem["per_formula"]["peak_vs_builtin"] == pytest.approx(1.5)


def test_rel_iqr():
    assert bench.rel_iqr([1.0, 1.0, 1.0]) == 0.0
    assert bench.rel_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)
    assert math.isnan(bench.rel_iqr([1.0]))


# ------------------------------------------------------------------------------ the harness
TINY = dict(ops=("index_select",), strategies=("builtin", "per_formula"), batch_sizes=(1, 4),
            sizes=("small",), repeats=2, loop_repeats=1, target_sample_s=1e-4, max_number=3,
            overhead_repeats=2, overhead_nodes=2, memory_batches=(4,), copy_vmap_modes=(),
            check_batch=2, name="tiny")


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    res = bench.run_bench(bench.BenchConfig(**TINY))
    assert torch.get_num_threads() == threads  # the timing thread count is restored
    return res


def test_tiny_run_records_environment_and_every_sample(tiny):
    env = tiny["environment"]
    assert env["torch"] == torch.__version__
    assert env["torch_num_threads_default"] == torch.get_num_threads()
    assert env["torch_num_threads_used"] == 1 and env["cpu_count"] >= 1 and env["platform"]
    assert tiny["config"]["ops"] == ["index_select"] and tiny["config"]["batch_sizes"] == [1, 4]
    # both strategies pass vmap_cotangents, decided by the matrix, not assumed
    assert {(a["label"], a["status"]) for a in tiny["applicability"]} == {("builtin", "pass"),
                                                                          ("per_formula", "pass")}
    recs = tiny["batched"]
    assert {(r["label"], r["batch"], r["mode"]) for r in recs} == {
        (s, b, m) for s in ("builtin", "per_formula") for b in (1, 4) for m in ("vmap", "loop")}
    for r in recs:
        assert len(r["samples"]) == len(r["wall_samples"]) == (2 if r["mode"] == "vmap" else 1)
        assert r["clock"] == "thread_cpu" and "error" not in r
        assert all(t > 0 for t in r["samples"])


def test_tiny_run_ratios_match_its_own_medians(tiny):
    med = {(r["batch"], r["label"], r["mode"]): statistics.median(r["samples"]) for r in tiny["batched"]}
    for row in bench.ratios(tiny):
        b, lbl = row["batch"], row["label"]
        assert row["ratio_vs_builtin"] == pytest.approx(med[(b, lbl, "vmap")] / med[(b, "builtin", "vmap")])
        assert row["speedup_vs_loop"] == pytest.approx(med[(b, lbl, "loop")] / med[(b, lbl, "vmap")])
    assert {r["label"] for r in tiny["overhead"]} == {"none", "noop_hook", "builtin", "per_formula"}
    assert {r["label"] for r in tiny["memory"]} == {"builtin", "per_formula"}
    assert all(r["allocated_bytes"] > 0 for r in tiny["memory"])
    assert bench.headline(tiny, ops=("index_select",), min_batch=1)["per_op"]["index_select"]["best"] \
        == "per_formula"


def test_save_and_load_round_trip(tiny, tmp_path):
    path = tmp_path / "b.json"
    bench.save(tiny, str(path))
    back = bench.load(str(path))
    assert back["batched"] == json.loads(json.dumps(tiny["batched"]))
    assert "NaN" not in path.read_text()  # strict JSON: what was not measured is null
    assert bench.ratios(back) == bench.ratios(tiny)
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(BadInputError, match="not a funcbwd bench result"):
        bench.load(str(tmp_path / "other.json"))
    with pytest.raises(BadInputError, match="no bench result"):
        bench.load(str(tmp_path / "missing.json"))


def test_plots_build_small_figures(tiny):
    figs = plots.all_figures(tiny)
    assert all(isinstance(f, go.Figure) for f in figs.values())
    ratio = figs["ratio_vs_builtin"]
    assert [t.name for t in ratio.data] == ["per_formula"]  # builtin is the 1.0 line, not a trace
    assert list(ratio.data[0].x) == [1, 4] and ratio.layout.xaxis.type == "log"
    assert {t.name for t in figs["speedup_vs_loop"].data} == {"builtin", "per_formula"}
    assert "skipped" in figs["copies"].layout.title.text  # copies were not run in TINY
    assert sum(len(t.x) for f in figs.values() for t in f.data if getattr(t, "x", None) is not None) < 300
    with pytest.raises(BadInputError, match="valid metrics"):
        plots.ratio_vs_batch(tiny, metric="speed")


# ------------------------------------------------------------------------------ sizes and input errors
def test_resize_scales_every_dim_and_keeps_the_op_valid():
    for op in registry.TEST_OPS:
        spec = registry.get_op(op)
        small, large = bench.resize(spec, "small"), bench.resize(spec, "large")
        assert small.name == spec.samples()[0].name and large.name.endswith("x16")
        x0, x1 = small.args[small.diff[0]], large.args[large.diff[0]]
        assert list(x1.shape) == [16 * s for s in x0.shape], op
        with torch.no_grad():
            spec.torch_op(*large.args)
    x, dim, idx = bench.resize(registry.get_op("index_select"), "large").args
    assert idx.numel() == 80 and int(idx.max()) < x.shape[dim]


def test_bad_config_names_the_valid_choices():
    with pytest.raises(UnknownNameError, match="valid ops: .*diag"):
        bench.BenchConfig(ops=("nope",)).validate()
    with pytest.raises(UnknownNameError, match="per_formula\\+copy_rule"):
        bench.BenchConfig(strategies=("fast",)).validate()
    with pytest.raises(UnknownNameError, match="valid sizes"):
        bench.BenchConfig(sizes=("huge",)).validate()
    with pytest.raises(BadInputError, match="clock='wall'"):
        bench.BenchConfig(num_threads=2).validate()
    with pytest.raises(BadInputError, match="batch sizes"):
        bench.BenchConfig(batch_sizes=(0,)).validate()
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
        before = matrix.run(spec, "vmap_cotangents", "per_formula", smp)
        assert before.status == "pass" and any("copy" in f for f in before.fallback_ops)
        with batched_copy_rule():
            after = matrix.run(spec, "vmap_cotangents", "per_formula", smp)
        assert after.status == "pass" and after.fallback_ops == [], smp.name


def test_copy_rule_kernel_semantics_under_vmap():
    dst = torch.zeros(2, 3, dtype=torch.float64)
    src = torch.randn(5, 3)  # batched, broadcast over dst's rows, cast to dst's dtype
    with batched_copy_rule(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback would warn
        out = torch.vmap(lambda s: torch.ops.aten.copy(dst, s))(src)
    expected = torch.stack([torch.ops.aten.copy(dst, s) for s in src])
    assert out.dtype == torch.float64 and torch.equal(out, expected)
