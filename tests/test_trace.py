"""The dispatch-key trace: what each backward formula call does under vmap, and which call fails."""

from __future__ import annotations

import re

import pytest

from funcbwd import internals
from funcbwd_lab import cli
from funcbwd_lab.studies.trace import trace as T
from funcbwd.errors import UnknownNameError
from funcbwd_lab.strategies import get_strategy


@pytest.fixture(scope="module")
def plain_diag() -> T.Trace:
    # diag's first sample is "3x5 k=0": non-square, so the in-place branch runs.
    return T.trace("diag", "plain", "vmap_cotangents")


@pytest.fixture(scope="module")
def per_formula_diag() -> T.Trace:
    return T.trace("diag", "per_formula", "vmap_cotangents")


# ------------------------------------------------------------------------------ plain: the failure
def test_plain_diag_highlights_the_copy_into_unbatched_zeros(plain_diag):
    tr = plain_diag
    assert tr.sample == "3x5 k=0" and tr.status == "fail" and tr.reason == "vmap_inplace"
    assert [e.name for e in tr.events] == ["zeros", "diagonal", "copy_"]  # up to the failing call
    ev = tr.failing_event
    assert ev is tr.events[-1] and ev.name == "copy_" and ev.aten == "aten::copy_"
    assert ev.stack == "Vmap(1)"
    self_arg, src = ev.tensors
    assert self_arg.chain == ["Dense(3)"] and not self_arg.batched  # a view of the zeros
    assert src.chain == ["Batched(level 1, bdim 0)", "Dense(3, 3)"] and src.batched
    assert "FuncTorchBatched" in src.keys and "FuncTorchBatched" not in self_arg.keys
    assert ev.inplace_into_unbatched and "unbatched" in ev.explanation
    assert "inplace arithmetic" in ev.error  # the call itself raised
    # the zeros factory and its diagonal view ran unbatched: no batched argument
    assert [e.inplace_into_unbatched for e in tr.events] == [False, False, True]
    assert tr.events[1].tensors[0].chain == ["Dense(3, 5)"]


def test_plain_diag_text_marks_the_failing_line_with_its_chains(plain_diag):
    lines = plain_diag.text().splitlines()
    marked = [i for i, ln in enumerate(lines) if "FAILING CALL" in ln]
    assert len(marked) == 1 and "copy_" in lines[marked[0]] and lines[marked[0]].startswith(">>>")
    block = "\n".join(lines[marked[0]:marked[0] + 10])
    assert "self: Dense(3)" in block
    assert "arg 1: Batched(level 1, bdim 0) > Dense(3, 3)" in block
    assert "why: in-place copy_ writes into an unbatched tensor" in block
    assert "stack: Vmap(1)" in block and "tls include:" in block


def test_plain_diag_records_the_dispatcher_ops_per_call(plain_diag):
    zeros = plain_diag.events[0]
    assert [n.name for n in zeros.dispatcher] == ["aten::zeros"]
    assert {c.name for c in zeros.dispatcher[0].children} >= {"aten::empty", "aten::zero_"}


def test_html_is_self_contained_and_highlights_the_failing_row(plain_diag, per_formula_diag):
    page = plain_diag.html()
    assert page.count("<tr class=failing>") == 1
    row = page.split("<tr class=failing>")[1].split("</tr>")[0]
    assert "copy_" in row and "Batched(level 1, bdim 0) &gt; Dense(3, 3)" in row
    for fetch in ("<script", "<link", "src=", "href=", "@import", "url("):
        assert fetch not in page
    assert "<details>" in per_formula_diag.html()  # the collapsible dispatcher view


# ------------------------------------------------------------------------------ per_formula
def test_per_formula_shows_functionalized_ops_and_the_copy_fallback(per_formula_diag):
    tr = per_formula_diag
    assert tr.status == "pass" and tr.failing_event is None
    assert all(e.stack == "Vmap(1) > Functionalize(2)" for e in tr.events)
    copy = next(e for e in tr.events if e.name == "copy_")
    assert copy.tensors[0].chain == ["Functional(2)", "Dense(3)"]
    assert copy.tensors[1].chain == ["Functional(2)", "Batched(level 1, bdim 0)", "Dense(3, 3)"]
    assert not copy.inplace_into_unbatched  # functionalization rewrites it before vmap sees it
    assert copy.vmap_sees == "aten::copy" and copy.vmap_handling == "fallback"
    assert copy.fallback_loop  # the profiler saw the per-sample loop, not just the dispatch table
    assert "aten::copy" in tr.fallback_ops  # and vmap warned about it
    names = {n.name for n in _walk(copy.dispatcher)}
    assert {"aten::copy", "aten::diagonal_scatter"} <= names
    text = tr.text()
    assert "vmap sees aten::copy (functionalization rewrote aten::copy_): fallback" in text
    assert "per-sample fallback loop: 3 x aten::copy + aten::stack" in text
    assert "FAILING CALL" not in text


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)


# ------------------------------------------------------------------------------ traced
def test_traced_runs_the_graph_without_fallback():
    T.trace("diag", "traced", "vmap_cotangents")  # the first call builds and checks the graph
    tr = T.trace("diag", "traced", "vmap_cotangents")  # (on its own inputs): the second runs it
    assert tr.status == "pass" and tr.failing_event is None
    assert tr.fallback_ops == []
    assert not any(e.vmap_handling == "fallback" or e.fallback_loop for e in tr.events)
    # the compiled graph's ops (through their torch bindings), seen by the TorchFunctionMode under Vmap
    graph_ops = [e.aten for e in tr.events if e.stack == "Vmap(1)" and e.vmap_handling != "metadata "
                 "read on the wrapper (no operator dispatch)"]
    assert graph_ops == ["aten::diagonal_backward"]  # no aten::copy, no zeros + scatter (fx/passes)


# ------------------------------------------------------------------------------ details
def test_overload_is_resolved_for_the_dispatch_table():
    tr = T.trace("topk", "plain", "vmap_cotangents", profile=False)
    ev = tr.failing_event
    assert ev.name == "scatter_" and ev.aten == "aten::scatter_.src"
    assert ev.vmap_handling == internals.batching_kind("aten::scatter_.src") == "fallback"


def test_inplace_names():
    assert T._is_inplace("copy_") and T._is_inplace("__iadd__") and T._is_inplace("__setitem__")
    assert not T._is_inplace("__getitem__") and not T._is_inplace("copy")


def test_recording_restores_the_strategy_and_transform_state():
    st = get_strategy("plain")
    before = internals.dispatch_state()
    T.trace("index_select", "plain", "vmap_cotangents", profile=False)
    assert "run_formula" not in vars(st)
    assert internals.dispatch_state() == before


@pytest.mark.parametrize("args, kind", [
    (("nope", "plain", "vmap_cotangents"), "op"),
    (("diag", "nope", "vmap_cotangents"), "strategy"),
    (("diag", "plain", "nope"), "scenario"),
    (("diag", "plain", "vmap_cotangents", "nope"), "sample"),
])
def test_unknown_names(args, kind):
    with pytest.raises(UnknownNameError) as e:
        T.trace(*args)
    assert e.value.kind == kind and e.value.valid and "nope" in str(e.value)


def test_cli_prints_the_trace_and_writes_html(tmp_path, capsys):
    out = tmp_path / "t.html"
    rc = cli.main(["trace", "diag", "--strategy", "plain", "--scenario", "vmap_cotangents",
                   "--html", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert re.search(r"^>>> #3 torch\.Tensor\.copy_ .*FAILING CALL", text, re.M)
    assert "<tr class=failing>" in out.read_text()


def test_cli_unknown_strategy_is_one_line_and_exit_2(capsys):
    rc = cli.main(["trace", "diag", "--strategy", "nope"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown strategy 'nope'" in err and "plain" in err
