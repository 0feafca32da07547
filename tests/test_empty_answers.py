"""Issue 31, item 3: an empty or unknown selection and a missing data directory are errors (exit
2, one line naming what was wrong and what to do, then the valid names), never an empty answer
with exit 0; a comparison with a strategy that was not run says "not run", never 0."""

from __future__ import annotations

import pytest

from funcbwd_lab import cli


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _error(err: str, command: str) -> list[str]:
    where = f"python -m funcbwd_lab {command}: error: "
    assert where in err, err[-2000:]
    lines = err[err.index(where):].splitlines()
    assert all(len(line) <= 100 for line in lines), lines
    return lines


@pytest.mark.parametrize("command", ["report", "rfc"])
def test_a_missing_data_directory_is_an_error_naming_it(command, tmp_path, capsys):
    out = tmp_path / "report.html"
    argv = [command, "--data", "/nonexistent", "--out", str(out), "--quiet"]
    rc, stdout, err = _run(argv, capsys)
    assert rc == 2
    lines = _error(err, command)
    assert len(lines) == 1 and "/nonexistent" in lines[0] and "--data DIR" in lines[0]
    assert not out.exists() and "wrote" not in stdout


def test_deletable_with_no_live_site_is_an_error_listing_the_live_ops(capsys):
    rc, out, err = _run(["deletable", "--ops", "diag", "--no-timing", "--quiet"], capsys)
    assert rc == 2 and "0 of 0" not in out
    lines = _error(err, "deletable")
    assert "no live site matched --ops diag" in lines[0]
    assert "ops with a live site (" in err and "live_take_backward_1" in err or "more" in err


def test_deletable_with_no_strategy_is_an_error(capsys):
    rc, _, err = _run(["deletable", "--strategies", ",", "--no-timing", "--quiet"], capsys)
    assert rc == 2 and "no strategy given" in _error(err, "deletable")[0]
    assert "traced, per_formula" in err


def test_coverage_with_no_op_is_an_error_not_an_empty_sweep(capsys):
    rc, out, err = _run(["coverage", "--ops", ",", "--quick", "--quiet"], capsys)
    assert rc == 2 and out == ""
    assert "no OpInfo op given" in _error(err, "coverage")[0] and "valid OpInfo ops (" in err


def test_coverage_load_of_a_missing_file_is_an_error(capsys, tmp_path):
    missing = tmp_path / "nothing.json.gz"
    rc, _, err = _run(["coverage", "--load", str(missing)], capsys)
    assert rc == 2 and str(missing) in " ".join(_error(err, "coverage"))


def test_matrix_without_plain_says_not_run_instead_of_zero_fixes(capsys):
    rc, out, _ = _run(["matrix", "--ops", "diag", "--strategies", "traced", "--samples", "first",
                       "--scenarios", "jacrev", "--quiet"], capsys)
    assert rc == 0
    summary = out[out.index("What each strategy fixes over plain"):]
    assert "plain was not run" in summary
    row = next(line for line in summary.splitlines() if line.startswith("traced"))
    assert row.split()[1:3] == ["not", "run"] and row.count("not run") == 2


def test_matrix_with_plain_still_counts_fixes():
    from funcbwd_lab.run.runner import CellResult
    from funcbwd_lab.studies.matrix import summary

    cells = [CellResult("diag", "s", "jacrev", "plain", "fail", reason="other"),
             CellResult("diag", "s", "jacrev", "traced", "pass", mechanism_ran=True)]
    text = summary.format_fixes(cells)
    assert "not run" not in text
    row = next(line for line in text.splitlines() if line.startswith("traced"))
    assert row.split()[1] == "1"


def test_matrix_where_nothing_applies_is_an_error_naming_what_would(capsys):
    rc, out, err = _run(["matrix", "--ops", "diag", "--scenarios", "vmap_jvp", "--strategies",
                         "plain,traced", "--samples", "first", "--quiet"], capsys)
    assert rc == 2 and out == ""
    assert "nothing applicable: no cell of diag x vmap_jvp can run" in _error(err, "matrix")[0]
    assert "vmap_cotangents" in err and "jacrev" in err
