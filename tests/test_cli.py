"""``python -m funcbwd``: every subcommand is routed to its module under ``funcbwd.cli``, and the
parser (``--help``) and ``import funcbwd`` are built without importing torch."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from funcbwd import cli


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
    p, mods = _imported(["-m", "funcbwd", "--help"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "funcbwd.cli" in mods, "the import-time log did not record the CLI (detector broken?)"
    assert _torch_modules(mods) == [], f"--help imported torch: {_torch_modules(mods)[:5]}"
    for name in cli.COMMANDS:
        assert f"    {name} " in p.stdout, f"{name} missing from --help"
    assert "--plugin MODULE" in p.stdout


def test_the_torch_detector_can_fail():
    # Mutation: a command that does import torch (the registry) must be caught by the same check.
    p, mods = _imported(["-c", "import funcbwd.cli, funcbwd.ops.registry"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "torch" in _torch_modules(mods)


def test_import_funcbwd_is_lazy_and_the_facade_still_works():
    code = (
        "import sys, funcbwd\n"
        "assert 'torch' not in sys.modules, 'import funcbwd imported torch'\n"
        "from funcbwd import OpSpec, Sample, register, helpers, legacy\n"
        "assert 'torch' in sys.modules\n"
        "import funcbwd.ops.registry as r\n"
        "assert funcbwd.register is r.register and OpSpec is r.OpSpec and Sample is r.Sample\n"
        "assert helpers.zeros_like_grad is funcbwd.helpers.zeros_like_grad\n"
        "assert 'diag' in funcbwd.op_names('test') and callable(legacy.diag)\n"
        "try:\n"
        "    funcbwd.no_such_name\n"
        "except AttributeError as e:\n"
        "    print('attr error:', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "attr error: module 'funcbwd' has no attribute 'no_such_name'" in p.stdout


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
    assert "--ops (comma-separated" in out and "  diag " in out and "  per_formula " in out


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
