"""``python -m funcbwd_lab``: every subcommand is routed to its module under ``funcbwd_lab.cli``, and the
parser (``--help``) and ``import funcbwd`` are built without importing torch."""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys

import pytest

from funcbwd_lab import cli


def _imported(code_or_module: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime ...`` and return (the process, the modules it imported)."""
    p = subprocess.run([sys.executable, "-X", "importtime", *code_or_module],
                       capture_output=True, text=True, timeout=120)
    mods = {line.split("|")[-1].strip() for line in p.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}
    return p, mods


def _torch_modules(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m == "torch" or m.startswith("torch."))


def test_help_does_not_import_torch():
    p, mods = _imported(["-m", "funcbwd_lab", "--help"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "funcbwd_lab.cli" in mods, "the import-time log did not record the CLI (detector broken?)"
    assert _torch_modules(mods) == [], f"--help imported torch: {_torch_modules(mods)[:5]}"
    for name in cli.COMMANDS:
        assert f"    {name} " in p.stdout, f"{name} missing from --help"
    assert "--plugin MODULE" in p.stdout


def test_the_torch_detector_can_fail():
    # Mutation: a command that does import torch (the registry) must be caught by the same check.
    p, mods = _imported(["-c", "import funcbwd_lab.cli, funcbwd_lab.ops.registry"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "torch" in _torch_modules(mods)


def test_import_funcbwd_is_lazy_and_the_facade_still_works():
    code = (
        "import sys, funcbwd_lab\n"
        "assert 'torch' not in sys.modules, 'import funcbwd_lab imported torch'\n"
        "from funcbwd_lab import OpSpec, Sample, register, helpers, legacy\n"
        "assert 'torch' in sys.modules\n"
        "import funcbwd_lab.ops.registry as r\n"
        "assert funcbwd_lab.register is r.register and OpSpec is r.OpSpec and Sample is r.Sample\n"
        "assert helpers.zeros_like_grad is funcbwd_lab.helpers.zeros_like_grad\n"
        "assert 'diag' in funcbwd_lab.op_names('test') and callable(legacy.diag)\n"
        "try:\n"
        "    funcbwd_lab.no_such_name\n"
        "except AttributeError as e:\n"
        "    print('attr error:', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "attr error: module 'funcbwd_lab' has no attribute 'no_such_name'" in p.stdout


def test_every_command_module_has_the_interface():
    for name, module in cli.COMMANDS.items():
        assert isinstance(module.HELP, str) and module.HELP, name
        p = argparse.ArgumentParser()
        module.configure(p)
        assert callable(module.main), name


def test_only_the_chosen_command_is_configured():
    parser = cli.build_parser(["ops"])
    args = parser.parse_args(["ops", "--group", "test"])
    assert args.group == "test" and args._run is cli.ops.main
    with pytest.raises(SystemExit):  # matrix has no options in this parser
        parser.parse_args(["matrix", "--ops", "diag"])


def test_subcommand_help_lists_the_registry(capsys):
    # The epilog is computed when help is printed (it needs the registry, so torch).
    with pytest.raises(SystemExit) as e:
        cli.main(["matrix", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--ops (comma-separated" in out and " diag, " in out and " per_formula, " in out
    # short: the options in two groups, the names as wrapped lists (issue 31)
    assert len(out.splitlines()) <= 40 and "what to run:" in out and "output:" in out
    assert max(map(len, out.splitlines())) <= 100


def test_ops_lists_the_catalog_and_rejects_an_unknown_group(capsys):
    assert cli.main(["ops", "--group", "test"]) == 0
    out = capsys.readouterr().out
    assert out.count("  [test]") == 8 and "diag  [test]" in out and "[extended]" not in out
    assert cli.main(["ops", "--group", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown group 'nope'" in err and "extended" in err


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


# ------------------------------------------------------------------------------ widths
#: each command's text output on a small op set (run in this process: torch is imported once)
TEXT_COMMANDS = [
    ["--help"],
    *([name, "--help"] for name in cli.COMMANDS),
    ["ops"],
    ["ops", "--group", "live"],
    ["matrix", "--ops", "diag,masked_select,binary_cross_entropy_with_logits", "--samples",
     "first", "--scenarios", "vmap_cotangents,vmap_all_args,jacrev"],
    ["trace", "diag", "--no-profile"],
    ["graph", "diag"],
    ["graph", "masked_select", "--copies"],
    ["profile", "diag", "--batch", "4"],
    ["findings", "--format", "text", "--no-cases", "--only", "masked_select_broadcast"],
    ["coverage", "--ops", "atan2", "--quick", "--budget", "1"],
    ["deletable", "--ops", "live_take_backward_1", "--samples", "first", "--no-timing",
     "--strategies", "traced"],
]


def _too_wide(text: str, width: int = 100) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # --help
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv", TEXT_COMMANDS, ids=" ".join)
def test_every_command_fits_100_columns(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # argparse's own help wrapping
    rc, out, err = _run(argv, capsys)
    assert rc == 0, err[-2000:]
    assert out.strip(), "no output"
    assert _too_wide(out) == [], f"lines over 100 columns:\n" + "\n".join(_too_wide(out)[:5])
    assert _too_wide(err) == []


def test_the_width_check_can_fail(capsys, monkeypatch):
    # Mutation: cells without spaces that cannot all fit; the same check must see the overflow.
    from funcbwd_lab.studies.matrix import matrix

    monkeypatch.setattr(matrix, "cell_text", lambda cell, long=False: "FAIL_0/1_vmap_inplace+fb")
    rc, out, _ = _run(["matrix", "--ops", "diag", "--samples", "first", "--scenarios",
                       "vmap_cotangents", "--quiet"], capsys)
    assert rc == 0 and _too_wide(out)


def test_width_option_narrows_the_output(capsys):
    argv = ["ops", "--group", "extended"]
    _, wide, _ = _run(argv, capsys)
    _, narrow, _ = _run(argv + ["--width", "60"], capsys)
    assert max(len(ln) for ln in wide.splitlines()) > 60 >= max(len(ln) for ln in narrow.splitlines())
    words = lambda text: sorted(w for w in text.split() if w.strip("-"))  # noqa: E731
    assert words(wide) == words(narrow)  # the same words, wrapped, none broken
    # a matrix of 8 strategies cannot get under ~90 columns (a column is as wide as its longest
    # word), so narrow widths are best effort there; 100, the default, always fits (above)
    rc, _, err = _run(argv + ["--width", "10"], capsys)
    assert rc == 2 and "python -m funcbwd_lab ops: error: argument --width: must be at least" in err


# ------------------------------------------------------------------------------ progress
MATRIX = [sys.executable, "-m", "funcbwd_lab", "matrix", "--ops", "diag", "--samples", "first",
          "--scenarios", "vmap_cotangents", "--format", "csv"]


def test_progress_goes_to_stderr_and_machine_output_is_unchanged():
    loud = subprocess.run(MATRIX, capture_output=True, text=True, timeout=300)
    quiet = subprocess.run(MATRIX + ["--quiet"], capture_output=True, text=True, timeout=300)
    assert loud.returncode == quiet.returncode == 0, loud.stderr[-2000:]
    # stdout is the CSV alone, the same with or without progress (the seconds column aside)
    def rows(text: str) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "seconds"}
                for r in csv.DictReader(io.StringIO(text))]

    assert loud.stdout.startswith("op,sample,scenario,strategy,dtype,status")
    assert rows(loud.stdout) == rows(quiet.stdout) and len(rows(loud.stdout)) == 8
    assert "matrix 8/8" not in loud.stdout
    # stderr: plain lines (not a terminal), the count and elapsed time; nothing when quiet
    assert "matrix 0/8 0%" in loud.stderr and "matrix 8/8 100% " in loud.stderr
    assert "\r" not in loud.stderr and quiet.stderr == ""


def _csv_is_clean(out: str, err: str) -> bool:
    rows = list(csv.DictReader(io.StringIO(out)))
    return (len(rows) == 8 and all(r["op"] == "diag" for r in rows) and "matrix 8/8" not in out
            and "matrix 8/8 100%" in err)


def test_the_clean_stdout_check_can_fail(capsys, monkeypatch):
    argv = ["matrix", "--ops", "diag", "--samples", "first", "--scenarios", "vmap_cotangents",
            "--format", "csv"]
    rc, out, err = _run(argv, capsys)
    assert rc == 0 and _csv_is_clean(out, err)
    # Mutation: progress written to stdout; the same check must refuse the output.
    from funcbwd_lab import command as options
    from funcbwd_lab.progress import Progress

    monkeypatch.setattr(options, "progress_of", lambda args, what, total=None: Progress(
        what, total, stream=sys.stdout))
    rc, out, err = _run(argv, capsys)
    assert rc == 0 and not _csv_is_clean(out, err)


def test_library_progress_counts_the_matrix_cells():
    from funcbwd_lab.progress import Progress
    from funcbwd_lab.studies.matrix import matrix

    out = io.StringIO()
    p = Progress("matrix", stream=out, tty=False, interval=0)
    cells = matrix.run_matrix(["diag"], ["vmap_cotangents"], ["plain", "traced"],
                              samples="first", progress=p)
    lines = out.getvalue().splitlines()
    assert len(cells) == 2 and lines[0].startswith("matrix 0/2")
    assert lines[-1].startswith("matrix 2/2 100%") and lines[-1].endswith("diag vmap_cotangents traced")


# ------------------------------------------------------------------------------ errors
def test_a_bad_option_names_the_command_and_shows_its_usage():
    argv = [sys.executable, "-m", "funcbwd_lab", "matrix", "--ops", "diag", "--batch", "0"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "usage: python -m funcbwd_lab matrix [--ops NAMES" in p.stderr
    assert "python -m funcbwd_lab matrix: error: unrecognized arguments: --batch 0" in p.stderr
    assert "usage: python -m funcbwd_lab [-h]" not in p.stderr and "Traceback" not in p.stderr


def test_the_top_level_parser_alone_would_blame_itself(capsys):
    # Mutation: the old one-call parse reports the error with the top-level usage, which is
    # what the test above rules out.
    with pytest.raises(SystemExit):
        cli.build_parser(["matrix"]).parse_args(["matrix", "--ops", "diag", "--batch", "0"])
    err = capsys.readouterr().err
    assert "usage: python -m funcbwd_lab [-h]" in err and "matrix: error" not in err


@pytest.mark.parametrize("argv, first, listed", [
    (["matrix", "--ops", "dig"], "unknown op 'dig'; did you mean diag?", "  test (8): "),
    (["matrix", "--strategies", "trcaed"], "unknown strategy 'trcaed'; did you mean traced?",
     "valid strategies: "),
    (["matrix", "--scenarios", "jacrevv"], "unknown scenario 'jacrevv'; did you mean jacrev",
     "valid scenarios, by group"),
    (["graph", "diag", "--from", "functionalised"],
     "unknown form 'functionalised'; did you mean functionalized?", "valid forms: "),
    (["coverage", "--ops", "atan3"], "unknown OpInfo op 'atan3'; did you mean atan or atanh",
     "valid OpInfo ops ("),
    (["matrx"], "invalid choice: 'matrx'; did you mean matrix?", "'deletable',"),
])
def test_a_misspelt_name_gets_suggestions_and_a_short_grouped_list(argv, first, listed, capsys):
    rc, _, err = _run(argv, capsys)
    assert rc == 2
    where = "python -m funcbwd_lab" + (f" {argv[0]}" if argv[0] in cli.COMMANDS else "")
    error = err[err.index(f"{where}: error: "):]
    assert error.startswith(f"{where}: error: ") and first in error.splitlines()[0]
    assert listed in error and len(error) < 1000 and _too_wide(err) == []


def test_library_callers_get_the_same_error():
    from funcbwd.errors import UnknownNameError
    from funcbwd_lab.run import runner

    with pytest.raises(UnknownNameError) as e:
        runner.run("dig", "jacrev", "plain")
    assert e.value.kind == "op" and e.value.name == "dig" and "diag" in e.value.valid
    assert e.value.suggestions == ["diag"] and list(e.value.groups)[:3] == [
        "test", "extended", "negative_control"]


def test_the_matrix_table_fits_100_columns_in_its_worst_case():
    # Every cell at its widest text (a failure with the longest reason code and a fallback, a
    # pass without the mechanism and with a fallback), 8 strategies, the longest scenario name.
    from funcbwd_lab.studies.matrix import matrix
    from funcbwd_lab.run.scenarios import SCENARIO_NAMES as ALL_SCENARIO_NAMES
    from funcbwd_lab.run.runner import CellResult
    from funcbwd_lab.strategies import available

    kinds = [dict(status="fail", reason="other", fallback_ops=["aten::copy"]),
             dict(status="fail", reason="composite_decomposed"),
             dict(status="pass", fallback_ops=["aten::copy"], mechanism_ran=False),
             dict(status="mismatch", fallback_ops=["aten::copy"])]
    cells = [CellResult("binary_cross_entropy_with_logits", "s", sc, st, **kinds[k % len(kinds)])
             for k, (sc, st) in enumerate((sc, st) for sc in ALL_SCENARIO_NAMES
                                           for st in matrix.default_strategies())]
    assert len(matrix.default_strategies()) == 8
    table = matrix.format_table(cells)
    assert _too_wide(table) == [] and "F:other" in table and "ok*+fb" in table and "F:comp" in table
    # with a second sample passing, failures carry k/n and still fit (they wrap at the space)
    cells += [CellResult(c.op, "t", c.scenario, c.strategy, "pass") for c in cells]
    assert _too_wide(matrix.format_table(cells)) == [] and "1/2" in matrix.format_table(cells)
