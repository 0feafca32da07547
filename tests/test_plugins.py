"""A user's own module of formulas: loaded with ``python -m funcbwd_lab --plugin MODULE`` or through the
``funcbwd.formulas`` entry-point group, run through the matrix like a built-in op; a plugin that
cannot load stops with one message naming it (wrapped at 100 columns)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# index_select's legacy backward under another name: zeros, then index_add_ in place.
PLUGIN = textwrap.dedent('''
    import torch
    import funcbwd_lab
    from funcbwd_lab.ops.helpers import randn, shape, zeros_like_grad

    def myop_backward(grad, sizes, dim, index):
        return zeros_like_grad(sizes, grad).index_add_(dim, index, grad)

    funcbwd_lab.register(funcbwd_lab.OpSpec(
        name="myop", torch_op=torch.index_select, formula=myop_backward,
        formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1], a[2]), grad_positions=(0,),
        schema="(Tensor grad, SymInt[] sizes, int dim, Tensor index) -> Tensor",
        source="a test plugin", fixed_by="nothing", group="mine",
        make_samples=lambda: [funcbwd_lab.Sample("4x3 dim0", (randn(4, 3, seed=5), 0, torch.tensor([0, 2, 2])))]))
''')


def _write(tmp: Path, name: str, text: str) -> Path:
    (tmp / f"{name}.py").write_text(text)
    return tmp


def _funcbwd(*argv: str, path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "funcbwd_lab", *argv], capture_output=True, text=True,
                          timeout=300, env=env)


def _cells(table: str) -> dict[str, str]:
    """{strategy: cell text} of a one-op, one-row ``matrix`` table (its block: the op's heading,
    the header, the rule, the row), with "op" the heading's op."""
    lines = [ln for ln in table.splitlines() if ln.strip()]
    header = lines[1].split()
    starts = [lines[1].index(h) for h in header]
    row = lines[3]
    cells = {h: row[s:e].strip() for h, s, e in zip(header, starts, starts[1:] + [None])}
    return {"op": lines[0].split(":")[0], **cells}


def _error(p: subprocess.CompletedProcess) -> tuple[str, list[str]]:
    """(the error's text with the ``python -m funcbwd_lab[ COMMAND]: error: `` prefix removed and its
    wrapped lines joined, the stderr lines)."""
    lines = p.stderr.strip().splitlines()
    joined = " ".join(ln.strip() for ln in lines)
    return re.sub(r"^python -m funcbwd_lab( \w+)?: error: ", "", joined), lines


def test_plugin_formula_runs_through_the_matrix(tmp_path):
    _write(tmp_path, "myplug", PLUGIN)
    p = _funcbwd("--plugin", "myplug", "matrix", "--ops", "myop", "--scenarios", "vmap_cotangents",
                 "--strategies", "plain,per_formula", path=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    cells = _cells(p.stdout)
    assert cells["op"] == "myop" and cells["scenario"] == "vmap_cotangents"
    # computed against the per-sample loop: the legacy write fails under vmap, functionalized passes
    assert cells["plain"].startswith("F:inpl"), cells  # F:inpl = failed, vmap_inplace
    assert cells["per_formula"].startswith("ok"), cells


def test_without_the_plugin_its_op_is_unknown(tmp_path):
    # The same command without --plugin must not find the op (the plugin, not a leftover, registers it).
    _write(tmp_path, "myplug", PLUGIN)
    p = _funcbwd("matrix", "--ops", "myop", "--scenarios", "vmap_cotangents", path=tmp_path)
    assert p.returncode == 2 and "unknown op 'myop'" in p.stderr


def test_bad_plugin_name_is_one_line_naming_it(tmp_path):
    p = _funcbwd("--plugin", "no_such_plugin_module", "ops", path=tmp_path)
    assert p.returncode == 2
    msg, lines = _error(p)
    assert lines[0].startswith("python -m funcbwd_lab ops: error: ") and "Traceback" not in p.stderr
    assert all(ln.startswith("    ") for ln in lines[1:]), p.stderr  # one message, wrapped
    assert msg.startswith("plugin module 'no_such_plugin_module' not found") and "PYTHONPATH" in msg


def test_plugin_registering_a_taken_name_is_one_line_naming_it(tmp_path):
    _write(tmp_path, "dupplug", PLUGIN.replace('name="myop"', 'name="diag"'))
    p = _funcbwd("--plugin", "dupplug", "ops", path=tmp_path)
    assert p.returncode == 2
    msg, lines = _error(p)
    assert all(ln.startswith("    ") for ln in lines[1:]) and "Traceback" not in p.stderr, p.stderr
    assert "plugin module 'dupplug' failed to load" in msg
    assert "op 'diag' is already registered" in msg


def test_plugin_that_raises_is_one_line_naming_it(tmp_path):
    _write(tmp_path, "brokenplug", "import funcbwd_lab\nraise RuntimeError('no formulas today')\n")
    p = _funcbwd("--plugin", "brokenplug", "ops", path=tmp_path)
    assert p.returncode == 2
    assert _error(p)[0] == "plugin module 'brokenplug' failed to load: RuntimeError: no formulas today"
    assert p.stderr.startswith("python -m funcbwd_lab ops: error: plugin module 'brokenplug'")


def _distribution(tmp: Path, module: str, value: str) -> None:
    """A fake installed distribution declaring ``value`` in the funcbwd.formulas group."""
    info = tmp / "fakeplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[funcbwd.formulas]\n{module} = {value}\n")


def test_entry_point_plugin_loads_lazily_on_first_registry_read(tmp_path):
    _write(tmp_path, "epplug", PLUGIN)
    _distribution(tmp_path, "mine", "epplug")
    code = ("import sys\n"
            "import funcbwd_lab.ops.registry as r\n"
            "assert 'epplug' not in sys.modules, 'loaded before the registry was read'\n"
            "print(r.op_names('mine'))\n"
            "r.get_op('myop'); print(sorted(m for m in sys.modules if m == 'epplug'))\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["['myop']", "['epplug']"]
    # and through the CLI, with no --plugin
    p = _funcbwd("ops", "--group", "mine", path=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("myop  [mine]"), p.stderr[-2000:]


def test_broken_entry_point_is_one_line_naming_it(tmp_path):
    _distribution(tmp_path, "mine", "no_such_module_here")
    p = _funcbwd("ops", path=tmp_path)
    assert p.returncode == 2
    msg, lines = _error(p)
    assert all(ln.startswith("    ") for ln in lines[1:]) and "Traceback" not in p.stderr, p.stderr
    assert msg.startswith("plugin 'no_such_module_here' (entry point 'mine' in group "
                          "'funcbwd.formulas') failed to load: ModuleNotFoundError")


@pytest.mark.parametrize("bad", ["", "myplug.py"])
def test_plugin_argument_must_be_a_module_name(bad):
    from funcbwd.errors import BadInputError
    from funcbwd_lab.ops import plugins

    with pytest.raises(BadInputError, match="importable module name"):
        plugins.load_module(bad)
