"""The generated RFC (funcbwd_lab.studies.review.rfc, ``python -m funcbwd_lab rfc``): the committed
docs/rfc.md is a fresh generation from the saved data; it says "not yet measured" without the
sweep's data and lists the retired xfails from a (synthetic) sweep document; a change in the
input changes it; every line fits 100 columns; the CLI writes it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from funcbwd_lab.studies.coverage import data as coverage_data
from funcbwd_lab.studies.coverage import upstream
from funcbwd_lab.studies.review import rfc

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
COMMITTED = ROOT / "docs" / "rfc.md"


@pytest.fixture(scope="module")
def inputs():
    return rfc.load(DATA)


@pytest.fixture(scope="module")
def generated(inputs):
    return rfc.document(inputs)


def test_committed_rfc_is_a_fresh_generation(generated):
    assert COMMITTED.read_text() == generated, "regenerate: python -m funcbwd_lab rfc --out docs/rfc.md"


def test_rfc_is_deterministic_and_fits_100_columns(inputs, generated):
    assert rfc.document(copy.deepcopy(inputs)) == generated
    too_wide = [line for line in generated.splitlines() if len(line) > 100]
    assert not too_wide, too_wide[:3]


def test_rfc_picks_on_cpp_numbers_and_labels_the_python_cost(generated, inputs):
    """With data/cpp.json the title names the pick on C++ numbers; without it, no pick and "not yet
    measured"; the Python figures are labelled as Python either way."""
    from funcbwd_lab.studies.review import cpp_decision

    pick = cpp_decision.decide(cpp_decision.normalize(inputs["cpp_study"]))["pick"]
    assert generated.startswith(f"# RFC: functionalize in-place backward formulas under vmap "
                                f"(`{pick}`)")
    assert cpp_decision.NOT_MEASURED not in generated
    waiting = rfc.document({**inputs, "cpp_study": None})  # mutation: the file absent
    assert waiting.startswith("# RFC: functionalize in-place backward formulas under vmap "
                              "(pick pending C++ numbers)")
    assert cpp_decision.NOT_MEASURED in waiting
    assert "In Python (the prototype's ranking, not the pick" in generated
    cost = generated[generated.index("## What it costs (Python)"):]
    assert "one basis (the worst case)" in cost and "the bench's targets:" in cost
    assert "**missed**" in cost or "**met**" in cost


def _without_sweep(inputs):
    return {**inputs, "coverage": None}


def test_without_sweep_data_the_tests_section_says_not_yet_measured(inputs):
    text = rfc.document(_without_sweep(inputs))
    tests = text[text.index("## The tests it retires"):text.index("## The hand-written")]
    assert rfc.NOT_MEASURED in tests and "coverage.json.gz" in tests


def _entry():
    """An upstream vmapvjp xfail that applies on a Linux CPU machine, of an op_db OpInfo."""
    return next(e for e in upstream.ENTRIES if e.test == "test_vmapvjp" and e.kind == "xfail"
                and e.on_linux_cpu() != "none" and (e.op, e.variant) not in upstream.NOT_IN_TORCH_2_13
                and e.op not in upstream.AUTOGRAD_FUNCTION_OPS)


def _records(entry, traced_status="pass"):
    op = entry.op + (f".{entry.variant}" if entry.variant else "")
    base = {"op": op, "sample": "0", "dtype": "float32", "composition": "vmapvjp", "detail": "",
            "fallback_ops": [], "error_class": "", "message": ""}
    return [
        {**base, "strategy": "builtin", "status": "fail", "reason": "vmap_inplace",
         "mechanism_ran": False, "message": "vmap: inplace arithmetic(self, *extra_args) is not possible"},
        {**base, "strategy": "traced_backward", "status": traced_status, "reason": "",
         "mechanism_ran": traced_status == "pass"},
        {**base, "strategy": "whole", "status": "fail", "reason": "vmap_inplace", "mechanism_ran": True},
    ]


def test_a_synthetic_sweep_retires_the_entry_it_fixes(tmp_path, inputs):
    entry = _entry()
    for f in DATA.iterdir():  # the saved data, with a small sweep document instead of the saved one
        if f.name != rfc.COVERAGE_FILE:
            (tmp_path / f.name).symlink_to(f)
    coverage_data.save(tmp_path / rfc.COVERAGE_FILE, _records(entry), {"torch": "2.13.0+cpu"})
    text = rfc.document(rfc.load(tmp_path))
    tests = text[text.index("## The tests it retires"):text.index("## The hand-written")]
    assert rfc.NOT_MEASURED not in tests
    assert f"`{entry.test}` {entry.op}" in tests and "fixed by traced_backward" in tests
    # mutation: traced_backward fails too, so nothing is retired
    broken = {"records": _records(entry, traced_status="fail"), "meta": {"torch": "2.13.0+cpu"}}
    r = rfc.retired(broken, "traced")
    assert r["measured"] and r["fixed"] == []
    assert rfc.retired({"records": _records(entry), "meta": {}}, "traced")["fixed"][0]["op"] == entry.op


def test_a_change_in_the_input_changes_the_rfc(inputs, generated):
    live = copy.deepcopy(inputs["live"])
    row = next(r for r in live["rows"] if r["strategies"]["traced"]["verdict"] == "deletable")
    row["strategies"]["traced"]["verdict"] = "not deletable: cost 9.99x above 1.2x"
    row["strategies"]["traced"]["blocker"] = {"reason": "cost", "where": "", "ops": [], "text": "",
                                              "cost_ratio": 9.99}
    row["strategies"]["traced"]["cost_ratio"] = 9.99
    text = rfc.document({**inputs, "live": live})
    assert text != generated and f"`{row['site']}` ({row['kind']}): batched cost above" in text
    assert "the worst is 9.99x" in text


def test_cli_writes_the_rfc_and_the_cpp_cost_text(tmp_path, capsys, generated):
    from funcbwd_lab import cli

    out = tmp_path / "rfc.md"
    assert cli.main(["rfc", "--data", str(DATA), "--out", str(out), "--quiet"]) == 0
    assert out.read_text() == generated
    capsys.readouterr()
    assert cli.main(["rfc", "--data", str(DATA), "--cpp-cost", "--width", "80", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "What would it cost in C++?" in text and max(len(line) for line in text.splitlines()) <= 80
    assert cli.main(["rfc", "--data", str(tmp_path / "missing")]) == 2


def test_the_ten_objections_table_links_each_answer_and_its_evidence(generated):
    from funcbwd_lab.studies.review import objections

    table = generated[generated.index("## The ten objections"):]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) == 10
    for n, _, _ in objections.TITLES:
        assert f"[o{n}]: #{objections.slug(objections.heading(n)[4:])}" in table
        assert objections.heading(n) in generated
    assert "## Small PRs the evidence supports today" in generated
    assert "## Users' in-place code" in generated


def test_a_missing_evidence_file_says_unknown_because(tmp_path, inputs):
    """Mutation check: without an answer's data the answer is "unknown, because", never a number."""
    broken = {**inputs, "objections": {**inputs["objections"], "subclass": None, "threads": None}}
    text = rfc.document(broken)
    two = text[text.index("### 2. "):text.index("### 3. ")]
    nine = text[text.index("### 9. "):text.index("### 10. ")]
    assert "**Unknown, because** data/review-subclass.json" in two
    assert "**Unknown, because** data/review-threads.json" in nine
