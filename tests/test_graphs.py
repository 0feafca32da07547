"""Graph captures, diffs and copy accounting: specific facts about what each form records."""

from __future__ import annotations

import pytest

from funcbwd_lab import cli
from funcbwd_lab.studies.graphs import graphs
from funcbwd.errors import UnknownNameError

NON_SQUARE = "3x5 k=1"


def test_diag_plain_to_functionalized_replaces_copy_by_diagonal_scatter():
    d = graphs.diff("diag", "plain", "functionalized", sample=NON_SQUARE)
    assert any("aten.copy_.default" in ln for ln in d.removed())
    assert any("aten.diagonal_scatter.default" in ln for ln in d.added())
    assert not any("copy_" in ln for ln in d.added())
    assert d.unified().startswith("--- diag [3x5 k=1] plain\n+++ diag [3x5 k=1] functionalized")


def test_diag_square_sample_has_no_inplace_op_so_forms_agree():
    d = graphs.diff("diag", "plain", "traced", sample="square 3x3 k=0")
    assert d.unified() == ""  # grad.diag(): nothing to functionalize or elide


def test_index_select_functionalized_uses_out_of_place_index_add():
    plain = graphs.capture("index_select", "plain")
    func = graphs.capture("index_select", "functionalized")
    assert plain.count("index_add_") == 1 and plain.count("index_add") == 0
    assert func.count("index_add") == 1 and func.count("index_add_") == 0
    assert func.nodes[-1][1] == [(4, 3)]  # (op, output shapes): the grad of the (4, 3) input


@pytest.mark.parametrize("op", ["diag", "index_select", "topk", "sort", "mode", "clamp"])
def test_traced_graphs_have_no_copy(op):
    cap = graphs.capture(op, "traced", sample=NON_SQUARE if op == "diag" else None)
    assert cap.ok and cap.count("copy") == 0 and cap.count("copy_") == 0


def test_elision_removes_the_vmap_fallback_loop():
    func = graphs.capture("diag", "functionalized", sample=NON_SQUARE, vmap=True, batch=4)
    traced = graphs.capture("diag", "traced", sample=NON_SQUARE, vmap=True, batch=4)
    # The fallback runs aten::copy once per sample and stacks the results.
    assert func.count("copy") == 4 and func.count("stack") == 1 and func.count("select") == 4
    assert traced.count("copy") == 0 and traced.count("stack") == 0
    assert traced.count("diagonal_scatter") == 1


def test_plain_under_vmap_shows_the_error():
    cap = graphs.capture("diag", "plain", sample=NON_SQUARE, vmap=True)
    assert not cap.ok and "inplace arithmetic" in cap.error
    assert cap.code.startswith("# capture failed: RuntimeError")


def test_builtin_is_torchs_modern_backward():
    cap = graphs.capture("diag", "builtin", sample=NON_SQUARE)
    assert cap.op_names() == ["aten::diagonal_backward"]
    vcap = graphs.capture("diag", "builtin", sample=NON_SQUARE, vmap=True, batch=2)
    assert vcap.nodes == [("aten::diagonal_backward", [(2, 3, 5)])]


def test_copy_accounting_diag():
    func = graphs.copy_accounting("diag", "functionalized", sample=NON_SQUARE)
    traced = graphs.copy_accounting("diag", "traced", sample=NON_SQUARE)
    plain = graphs.copy_accounting("diag", "plain", sample=NON_SQUARE)
    f32 = 4
    # copy writes the 3-element diagonal, diagonal_scatter the whole 3x5 grad.
    assert func.by_op == {"aten::copy": [1, 3 * f32], "aten::diagonal_scatter": [1, 15 * f32]}
    assert traced.by_op == {"aten::diagonal_scatter": [1, 15 * f32]}
    assert plain.by_op == {"aten::copy_": [1, 3 * f32]}
    assert traced.copy_bytes < func.copy_bytes
    assert traced.written_bytes == func.written_bytes - 3 * f32


def test_copy_table_compares_with_builtin():
    rows = {r["form"]: r for r in graphs.copy_table(["diag"], vmap=True, batch=4)}
    assert rows["builtin"]["extra_copies"] == 0
    assert rows["plain"]["copies"] is None and "inplace" in rows["plain"]["error"]
    assert rows["functionalized"]["extra_copies"] == 6  # 4 copies + stack + diagonal_scatter
    assert rows["traced"]["extra_copies"] == 1  # diagonal_scatter only
    assert rows["traced"]["extra_copy_bytes"] < rows["functionalized"]["extra_copy_bytes"]


def test_strategy_names_map_to_forms_for_bench():
    assert graphs.copy_accounting("topk", "per_formula").form == "functionalized"


def test_html_is_self_contained_and_highlights():
    text = graphs.diff("diag", "plain", "traced", sample=NON_SQUARE).html()
    assert "class='del'" in text and "class='add'" in text
    assert "<td class='del'>    copy_ = torch.ops.aten.copy_.default(diagonal, grad)</td>" in text
    assert "<td class='add'>    diagonal_scatter = torch.ops.aten.diagonal_scatter.default(zeros, grad, 1)</td>" in text
    assert "http" not in text and "<script" not in text


def test_unknown_names_list_valid_choices():
    with pytest.raises(UnknownNameError, match="valid forms: builtin, .*functionalized"):
        graphs.capture("diag", "elided")
    with pytest.raises(UnknownNameError, match="index_select"):
        graphs.capture("nope", "plain")


def test_cli_graph(capsys, tmp_path):
    html = tmp_path / "d.html"
    rc = cli.main(["graph", "diag", "--from", "plain", "--to", "functionalized",
                   "--sample", NON_SQUARE, "--html", str(html)])
    out = capsys.readouterr().out
    assert rc == 0 and "+    diagonal_scatter = " in out
    assert "functionalized: 2 copy-like op(s)" in out
    assert html.read_text().startswith("<!doctype html>")
    assert cli.main(["graph", "diag", "--to", "bogus"]) == 2
    assert "unknown form 'bogus'" in capsys.readouterr().err
