"""The C++ study (funcbwd_lab.studies.cpp): the extension builds or the tests skip saying why, the
C++ strategies give the reviewed cells, what option 2 takes beyond the guard is what the probes
show, the traced graphs are generated and used, and the saved run is what the docs show.

Tests that need the extension use the ``ext`` fixture: it loads the cached build (a cold build,
once per checkout, takes about 2 minutes on 2 cores) and skips with one line where the extension
cannot be built (no compiler, no ninja, no headers). The saved-data tests need no build.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import funcbwd_lab.studies.cpp  # noqa: F401 - wires the extension into the C++ strategies
from funcbwd_lab.ops import registry
from funcbwd_lab.run.runner import run
from funcbwd_lab.strategies import cpp as cpp_strategies, get_strategy
from funcbwd_lab.studies.cpp import build, generate, render, run as study, saved
from funcbwd_lab.studies.matrix import expectations, matrix, records

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "cpp.json"


def skip_unless_buildable(reason: str | None) -> None:
    """Skip the calling test with one line when the extension cannot be built here."""
    if reason:
        pytest.skip(f"C++ extension: {reason}")


@pytest.fixture(scope="module")
def ext():
    skip_unless_buildable(build.unavailable())
    return build.load()


@pytest.fixture(scope="module")
def summary():
    return saved.load(DATA)


# ------------------------------------------------------------------ the build, or a skip
def test_no_compiler_is_one_line_and_makes_the_strategies_not_applicable(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    why = build.unavailable()
    assert why and "\n" not in why and "no-such-c++-compiler" in why
    assert cpp_strategies.unavailable() == why
    spec = registry.get_op("diag")
    assert get_strategy("cpp_guard").not_applicable(spec, "vmap_cotangents") == f"cpp_guard: {why}"
    monkeypatch.setattr(build, "_MODULE", None)  # as in a process that has not loaded it
    with pytest.raises(build.BuildError, match="cannot be built here: no C"):
        build.load()


def test_the_skip_fires_where_the_extension_cannot_be_built():
    with pytest.raises(pytest.skip.Exception, match=r"^C\+\+ extension: no C\+\+ compiler"):
        skip_unless_buildable("no C++ compiler: 'c++' is not on PATH")
    skip_unless_buildable(None)  # buildable: no skip


def test_the_extension_loads_and_names_its_counters(ext):
    assert tuple(ext.formulas) == generate.FORMULA_ORDER
    assert {e for st in cpp_strategies.Cpp.__subclasses__() for e in st.events} <= set(ext.events)
    assert ext.open_scopes() == 0


# ------------------------------------------------------------------ live cells
LIVE = [("diag", "vmap_cotangents"), ("index_select", "vmap_all_args"), ("masked_select", "jacrev"),
        ("clamp", "vmap_all_args"), ("prod", "vmap_all_args"), ("sort", "vjp_of_vjp")]


@pytest.mark.parametrize("op,scenario", LIVE)
def test_live_cells_match_the_reviewed_table(ext, op, scenario):
    table = expectations.cpp_table()
    results = [run(registry.get_op(op), scenario, st, smp) for st in expectations.CPP_STRATEGIES
               for smp in registry.get_op(op).samples()]
    assert expectations.differences(matrix.summarize(results), table) == []
    assert ext.open_scopes() == 0  # every Functionalize layer popped, raising cells included


def test_a_wrong_mechanism_is_caught(ext, monkeypatch):
    # Mutation: guard's events without its mechanism -> the passing cell loses mechanism_ran
    st = get_strategy("cpp_guard")
    monkeypatch.setattr(type(st), "events", {"guard_as_written": ("as written", False)})
    r = run(registry.get_op("diag"), "vmap_cotangents", st, registry.get_op("diag").sample("3x5 k=1"))
    assert r.status == "pass" and not r.mechanism_ran


def test_traced_runs_a_generated_graph_and_falls_back_outside_its_signatures(ext):
    names = list(ext.events)
    col = list(ext.formulas).index("diag")

    def delta(fn):
        before = ext.counters()
        out = fn()
        after = ext.counters()
        return out, {names[i // len(ext.formulas)]: b - a for i, (a, b) in enumerate(zip(before, after))
                     if b != a and i % len(ext.formulas) == col}

    op = cpp_strategies.operator("diag", "traced")
    for shape, event in (((3, 5), "traced_graph"), ((2, 7), "traced_fallback")):
        x = torch.randn(shape)
        _, vjp_fn = torch.func.vjp(lambda t: op(t, 1), x)
        cts = torch.randn(4, *torch.diag(x, 1).shape)
        got, seen = delta(lambda: torch.func.vmap(vjp_fn)(cts)[0])
        want = torch.func.vmap(torch.func.vjp(lambda t: torch.diag(t, 1), x)[1])(cts)[0]
        assert seen == {event: 1} and torch.allclose(got, want)
    info = build.graphs_info()
    assert [ext.graph_count(i) for i in range(len(ext.formulas))] == [
        len(info["graphs"][f]) for f in ext.formulas]
    assert info["graphs"]["prod"] == [] and info["skipped"]["prod"]  # untraceable: no graph


def test_the_probes_show_what_the_guard_takes(ext, summary):
    live = study.probes()
    assert [p["outcome"].split(":")[0] for p in live] == [
        p["outcome"].split(":")[0] for p in summary["probes"]]
    naive, grad_only, no_sync = live
    assert naive["outcome"].startswith("raises RuntimeError: vmap: inplace")
    assert "INTERNAL ASSERT" in grad_only["outcome"] and no_sync["outcome"] == "wrong values, no error"
    assert all(p["open_scopes_after"] == 0 for p in live)


# ------------------------------------------------------------------ the generator (no build)
def test_schema_arguments_and_literals():
    args = generate._schema_args("zeros(SymInt[] size, *, ScalarType? dtype=None) -> Tensor")
    assert args == [("SymInt[]", "size", False), ("ScalarType?", "dtype", True)]
    assert generate._literal("SymInt[]", [3, 5], {}) == "c10::fromIntArrayRefSlow(at::IntArrayRef({3, 5}))"
    assert generate._literal("int[1]?", [0], {}) == "at::OptionalIntArrayRef(at::IntArrayRef({0}))"
    assert generate._literal("ScalarType?", torch.float32, {}).endswith("ScalarType::Float)")
    with pytest.raises(generate.Unsupported):  # mutation: a constant tensor cannot be emitted
        generate._literal("Tensor", torch.zeros(2), {})


def test_a_graph_becomes_a_guarded_cpp_function():
    spec = registry.get_op("index_select")
    g = torch.fx.Graph()
    grad, index = g.placeholder("grad"), g.placeholder("index")
    zeros = g.call_function(torch.ops.aten.zeros.default, ([4, 3],))
    g.output(g.call_function(torch.ops.aten.index_add.default, (zeros, 0, index, grad)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    args = (torch.ones(5, 3), [4, 3], 0, torch.tensor([0, 2, 2, 1, 0]))
    lines, done, skipped = generate.emit_formula("index_select", spec.schema, [(args, lambda: gm)])
    text = "\n".join(lines)
    assert done and not skipped and "self_sizes == at::IntArrayRef({4, 3})" in text
    assert "at::_ops::index_add::call(v2, int64_t(0), index, grad, at::Scalar(int64_t(1)))" in text
    # mutations: a graph holding a constant tensor, and a trace that raises, are refused
    const = torch.fx.symbolic_trace(lambda grad, index: torch.ops.aten.index_add.default(
        torch.ops.aten.zeros.default([4, 3]), 0, index, grad))  # zeros ran: a get_attr constant
    for bad, why in ((lambda: const, "get_attr"), (lambda: 1 / 0, "ZeroDivisionError")):
        _, done, skipped = generate.emit_formula("index_select", spec.schema, [(args, bad)])
        assert not done and why in skipped[0]


# ------------------------------------------------------------------ the saved run (no build)
def test_every_saved_cell_matches_the_reviewed_table(summary):
    cells = matrix.summarize(records.from_records(json.loads(DATA.read_text())["matrix"]["records"]))
    table = expectations.cpp_table()
    assert {(st, op, sc) for op, sc, st in cells} == set(table)
    assert expectations.differences(cells, table) == []
    wrong = expectations.CPP_RULES + [(["cpp_traced"], ["diag"], ["jacrev"],
                                       expectations.Expected("fail", "vmap_inplace", True, "mutation"))]
    table2 = dict(table)
    for st, ops, scs, e in wrong[-1:]:
        table2[st[0], ops[0], scs[0]] = e
    assert len(expectations.differences(cells, table2)) == 1


def test_the_cpp_matrix_equals_the_python_one_cell_for_cell(summary, tmp_path):
    assert summary["python_matrix_differences"] == []
    doc = json.loads(DATA.read_text())  # mutation: one C++ cell flipped is reported
    rec = next(r for r in doc["matrix"]["records"] if r["strategy"] == "cpp_traced"
               and r["op"] == "diag" and r["scenario"] == "jacrev")
    rec.update(status="fail", reason="vmap_inplace")
    (tmp_path / "cpp.json").write_text(json.dumps(doc))
    (tmp_path / "matrix-test-ops.json").write_text((ROOT / "data" / "matrix-test-ops.json").read_text())
    assert len(saved.load(tmp_path / "cpp.json")["python_matrix_differences"]) == 1


def test_the_saved_shape(summary):
    assert set(summary["approaches"]) == {*saved.REFERENCES, *saved.APPROACHES, "builtin"}
    guard = summary["approaches"]["cpp_guard"]
    assert guard["role"] == "approach" and guard["counterpart"] == "per_formula"
    assert guard["matrix"]["counts"]["cells"] == 64
    row = next(r for r in guard["cost"] if r["kind"] == "node" and not r["vmap"])
    assert {"op", "size", "batch", "verdict", "instructions", "instructions_vs", "time_vs"} <= set(row)
    assert set(summary["targets"]) == set(saved.APPROACHES)
    assert all(t["status"] in ("met", "missed", "not resolved", "not measured")
               for ts in summary["targets"].values() for t in ts)


def _rows(ratios, low_high=None):
    out = []
    for i, r in enumerate(ratios):
        lo, hi = (low_high or {}).get(i, (r - 0.01, r + 0.01))
        out.append({"kind": "vjp", "vmap": True, "op": "diag", "size": "small", "batch": 64 + i,
                    "verdict": "pass", "instructions": 100.0, "instructions_vs": {"builtin": r},
                    "time_vs": {"builtin": {"ratio": r, "low": lo, "high": hi, "rounds": 9}}})
    return out


def test_judging_a_target_can_give_each_status():
    t = next(x for x in saved.TARGETS if x.name == "vjp_time_vs_builtin")
    assert saved.judge(t, _rows([1.0, 1.1]))["status"] == "met"
    assert saved.judge(t, _rows([1.0, 1.5]))["status"] == "missed"
    assert saved.judge(t, _rows([1.0, 1.19], {1: (1.1, 1.3)}))["status"] == "not resolved"
    failing = _rows([1.0]) + [{**_rows([1.0])[0], "verdict": "raises X", "time_vs": {}}]
    j = saved.judge(t, failing)
    assert j["status"] == "missed" and j["missing"]
    ti = dataclasses_replace(t, basis="instructions")
    assert saved.judge(ti, _rows([1.0, 1.3]))["status"] == "missed"
    assert saved.judge(ti, _rows([1.0, 1.1]))["status"] == "met"


def dataclasses_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_the_docs_show_the_saved_run(summary):
    page = (ROOT / "docs" / "cpp.md").read_text()
    assert render.update(page, summary) == page, "run python -m funcbwd_lab.studies.cpp.render docs/cpp.md --force"
    changed = copy.deepcopy(summary)
    changed["triggers"]["cpp_guard"] += 1  # mutation: a different number changes the block
    assert render.update(page, changed) != page
    assert all(len(line) <= 100 for line in render.block(summary).splitlines()
               if not line.startswith("|"))
