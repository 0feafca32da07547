"""The fallback-speedup study (issue 30 item 3): verdicts from intervals (met, missed, not
resolved), the floor used only where it is the same math, the targets computed from rows, and
the one command refusing to overwrite its committed file. Structure only: no timing is asserted."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from funcbwd_lab.studies.coverage import fallback_speedup as fs
from funcbwd_lab.studies.coverage import fallback_targets as ft
from funcbwd_lab.studies.coverage import opinfo

ROOT = Path(__file__).resolve().parents[1]


def test_verdicts_come_from_the_interval():
    assert ft.verdict(1.1, 1.3, 1.0, "min") == "met"
    assert ft.verdict(0.8, 0.95, 1.0, "min") == "missed"
    assert ft.verdict(0.9, 1.1, 1.0, "min") == "not resolved"
    assert ft.verdict(1.5, 1.9, 2.0, "max") == "met"
    assert ft.verdict(2.1, 2.5, 2.0, "max") == "missed"
    assert ft.verdict(1.9, 2.1, 2.0, "max") == "not resolved"
    assert ft.verdict(math.nan, 1.0, 1.0, "min") == "not resolved"


def _row(op, speedups, floor=None, left=()):
    row = {"op": op, "status": "measured", "graph_ran": True, "graph_fallbacks_left": list(left),
           "by_batch": {str(b): {"speedup": s, "speedup_ci95": [s - 0.05, s + 0.05]}
                        for b, s in speedups.items()}}
    if floor is not None:
        row["floor"] = {"traced_over_floor": floor, "traced_over_floor_ci95": [floor - 0.1, floor + 0.1]}
    else:
        row["floor"] = {"why": "batch first: raises"}
    return row


def test_targets_from_rows():
    rows = [_row("a", {8: 1.3, 64: 2.0}, 1.5), _row("b", {8: 0.8, 64: 1.2}, 1.8),
            _row("c", {8: 1.2, 64: 1.5}, None, [["aten::_unique", "no decomposition"]])]
    large = [{"op": "diag", "batch": 1, "ratio": 1.01, "ratio_ci95": [0.99, 1.03]},
             {"op": "sort", "batch": 8, "ratio": 1.2, "ratio_ci95": [1.1, 1.3]}]
    t = ft.targets(rows, (8, 64), large)
    s = t["speedup_b8_plus"]
    assert s["by_batch"]["8"]["median"] == pytest.approx(1.2)
    assert s["by_batch"]["8"]["ci95"] == pytest.approx([1.15, 1.25])
    assert s["by_batch"]["8"]["ops_missed"] == 1 and s["verdict"] == "met"
    assert t["floor_b64"]["ops"] == 2 and t["floor_b64"]["verdict"] == "met"
    assert t["floor_b64"]["no_floor"] == {"c": "batch first: raises"}
    assert t["fallbacks_left"]["verdict"] == "met (each named with why)"
    assert t["fallbacks_left"]["left"] == {"c": [["aten::_unique", "no decomposition"]]}
    assert t["large_inputs"]["verdict"] == "missed" and t["large_inputs"]["worst"]["op"] == "sort"
    rows[1]["by_batch"]["8"]["speedup_ci95"] = [0.7, 0.9]
    rows[0]["by_batch"]["8"]["speedup_ci95"] = [0.9, 0.95]  # now the median's interval is below 1
    assert ft.targets(rows, (8, 64), [])["speedup_b8_plus"]["verdict"] == "missed"
    text = "\n".join(ft.format_targets(t))
    assert "missed" in text and "met" in text and all(len(line) < 400 for line in text.splitlines())


def _prepared(name, sample=0, batch=4):
    op = opinfo.op_by_id(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fs.prepare(op, opinfo.samples(op)[sample], batch)


def test_the_floor_is_used_only_where_it_is_the_same_math(monkeypatch):
    """log_ndtr is elementwise: one call on the batched tensors is the per-sample loop. take
    flattens its input: one call on the batched tensors is other math, and there is no floor.
    Mutation: a floor checked against nothing (every candidate accepted) takes take's."""
    p = _prepared("special.log_ndtr")
    call, how = ft.floor_function(p, p.choices[0])
    assert call is not None and how == "batch first"
    p = _prepared("take")
    dims = next(d for d in p.choices if all(x in (0, None) for x in d))
    call, why = ft.floor_function(p, dims)
    assert call is None and "not the same math" in why
    monkeypatch.setattr(ft, "compare", lambda got, want: type("C", (), {"ok": True, "detail": ""})())
    assert ft.floor_function(p, dims)[0] is not None


def test_one_op_end_to_end_has_the_graph_report_and_every_batch():
    result = fs.run("unfold", batches=(64,), repeats=fs.MIN_REPEATS, progress=False, budget_s=10,
                    large=False)
    (row,) = result["ops"]
    assert row["status"] == "measured", row.get("reason")
    assert row["installed"] == "graph" and row["graph_fallbacks_left"] == []
    assert "aten::unfold_backward" in row["graph_decomposed"]
    assert row["traced_fallback_ops"] == [] and row["trace_s"] > 0
    b = row["by_batch"]["64"]
    assert len(b["builtin_s"]) == len(b["traced_s"]) == b["repeats"] >= fs.MIN_REPEATS
    assert b["speedup_ci95"][0] <= b["speedup"] <= b["speedup_ci95"][1]
    assert "traced_over_floor" in row["floor"] or "why" in row["floor"]
    assert "targets (issue 30)" in fs.format_result(result)


def test_the_command_refuses_the_committed_file(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = ROOT / "data" / fs.FILE_NAME
    before = out.read_bytes()
    rc = fs.main(["--ops", "unfold", "--out", f"data/{fs.FILE_NAME}"])
    err = capsys.readouterr().err
    assert rc == 2 and out.read_bytes() == before
    assert len(err.splitlines()) == 1 and "--force overwrites" in err
