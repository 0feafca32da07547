"""python -m funcbwd doctor: run as a subprocess on a temporary module of the public cases; it
names the culprit line, shows the graph diff, says functionalized fixes it (exit 0), exits 1 when
the wrapper cannot fix a transform, and 2 with one line on bad MODULE:FUNC or --args."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib"

MODULE = textwrap.dedent('''\
    import torch


    def issue_103329(x):
        mat = torch.zeros(x.shape)
        mat[0, 0] = mat[0, 1] + x[0, 0]  # LINE-103329
        return mat


    def issue_97248(x, y):
        z = torch.empty(x.shape)
        z.copy_(x)  # LINE-97248
        z.copy_(y)
        return z


    def issue_105(x, w):
        h = torch.zeros(6)
        h[::2] = (w @ x)[:3]  # LINE-105
        h[1::2] = (w @ x)[3:].tanh()
        return h


    def gated(x):
        y = torch.zeros(x.shape)
        y[0] = x[0] * 2  # LINE-gated
        return y if x.sum() > -1e9 else y


    BUF = torch.zeros(4)


    def shared_state(x):  # a module-level buffer written through .data: no tool can batch it
        BUF.data.copy_(x)  # LINE-shared
        return BUF * 2


    def target_written(x, target):  # the per-sample argument is the second one
        out = torch.zeros(target.shape)
        out[0] = target[0]  # LINE-target
        return out * x.sum()


    def unbind_written(x):  # eager autograd refuses this as written: no reference
        out = torch.zeros(2, x.shape[0])
        a, b = out.unbind(0)
        a.copy_(x)
        b.copy_(x * 2)
        return out


    class Scale(torch.autograd.Function):  # old style, an in-place backward
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 3

        @staticmethod
        def backward(ctx, g):
            out = torch.zeros_like(g)
            out += g * 3
            return out
''')


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("doctor")
    (d / "usercode.py").write_text(MODULE)
    return d


def doctor(workdir, *argv, timeout=240):
    env = dict(os.environ, PYTHONPATH=f"{workdir}{os.pathsep}{LIB}", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "funcbwd", "doctor", *argv], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _line(tag: str) -> int:
    return next(i for i, ln in enumerate(MODULE.splitlines(), 1) if f"LINE-{tag}" in ln)


@pytest.mark.parametrize("func,args,tag,diff", [
    ("issue_103329", "torch.randn(5, 6)", "103329", "copy_ -> copy"),
    ("issue_97248", "torch.randn(3), torch.randn(3)", "97248", "copy_ x2 -> copy x2"),
    ("issue_105", "torch.randn(6), torch.randn(6, 6)", "105", "slice_scatter"),
])
def test_names_the_culprit_line_and_fixes_it(workdir, func, args, tag, diff):
    out = doctor(workdir, f"usercode:{func}", "--args", args, "--transforms", "vmap,jacrev,jacfwd")
    # jacfwd passes plain: the write's target is not batched by forward AD's tangents
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"usercode.py:{_line(tag)}\n" in out.stdout
    assert f"# LINE-{tag}" in out.stdout  # the culprit line's code, on its own line
    assert diff in out.stdout and "no code change needed: funcbwd.vmap" in out.stdout
    assert "fixes 2 of 2" in out.stdout
    assert all(len(ln) <= 100 for ln in out.stdout.splitlines())
    assert "doctor: vmap ..." in out.stderr  # progress on stderr


def test_exit_1_when_no_tool_fixes_a_transform(workdir):
    out = doctor(workdir, "usercode:shared_state", "--args", "torch.randn(4)", "--transforms",
                 "vmap")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "still failing with funcbwd.vmap and functionalized: vmap" in out.stdout
    assert f"usercode.py:{_line('shared')}\n" in out.stdout


def test_a_value_read_is_fixed_by_funcbwd_vmap_not_by_the_decorator(workdir):
    # untraceable (a branch on x under vmap): the decorator cannot; funcbwd.vmap's last stage runs
    # it once per batch entry, checked against the per-sample loop
    out = doctor(workdir, "usercode:gated", "--args", "torch.randn(4)", "--transforms", "vmap")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cannot trace" in out.stdout and "no code change needed" in out.stdout


def test_every_floating_argument_is_per_sample():
    # the doctor used to batch only the first floating tensor: target's write looked fine
    from funcbwd.doctor import report
    import importlib.util

    rows = report.diagnose(_usercode().target_written, (torch_randn(3), torch_randn(4)), ["vmap"])
    assert rows[0].plain.status == "fail" and "inplace" in rows[0].plain.detail
    assert rows[0].mode.ok and rows[0].wrapped.ok
    only_x = report.diagnose(_usercode().target_written, (torch_randn(3), torch_randn(4)),
                             ["vmap"], batch=(0,))
    assert only_x[0].plain.ok  # mutation of the old behaviour: batching x alone hides it
    del importlib


def test_no_reference_is_unknown_not_still_failing():
    from funcbwd.doctor import report

    rows = report.diagnose(_usercode().unbind_written, (torch_randn(3),), ["jacrev"])
    assert rows[0].mode.status == "unknown" and "reference unavailable" in rows[0].mode.detail
    text, fine = report.recommendation(rows)
    assert "no reference to confirm: jacrev" in text and not fine


def test_a_function_class_as_target(workdir):
    out = doctor(workdir, "usercode:Scale", "--args", "torch.randn(4)", "--transforms",
                 "vjp,jacrev")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "custom autograd.Function" in out.stdout and "SyntaxError" not in out.stdout
    assert "no code change needed" in out.stdout
    assert all(ln == ln.rstrip() for ln in out.stdout.splitlines())


def _usercode():
    import importlib.util
    import tempfile

    d = Path(tempfile.mkdtemp())
    (d / "usercode_inline.py").write_text(MODULE)
    spec = importlib.util.spec_from_file_location("usercode_inline", d / "usercode_inline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_randn(*shape):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize("argv,msg", [
    (["usercode:nope", "--args", "torch.randn(3)"], "has no function 'nope'"),
    (["nomodule_xyz:f", "--args", "torch.randn(3)"], "cannot import 'nomodule_xyz'"),
    (["usercode", "--args", "torch.randn(3)"], "expected MODULE:FUNC"),
    (["usercode:issue_103329", "--args", "torch.randn(3"], "is not a Python expression"),
    (["usercode:issue_103329", "--args", "3"], "no floating-point tensor"),
    (["usercode:issue_103329", "--args", "torch.randn(3)", "--transforms", "vmapp"],
     "unknown transform"),
])
def test_bad_input_is_one_line_and_exit_2(workdir, monkeypatch, capsys, argv, msg):
    from funcbwd.__main__ import main

    monkeypatch.syspath_prepend(str(workdir))
    monkeypatch.chdir(workdir)
    assert main(["doctor", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # one message, named for the command, wrapped to 100 columns (continuations indented)
    assert lines[0].startswith("python -m funcbwd doctor: error: "), lines
    assert all((ln.startswith("    ") or ln.startswith("valid ")) and len(ln) <= 100 for ln in lines[1:]), lines
    assert msg in " ".join(ln.strip() for ln in lines), lines


def test_bad_input_as_a_subprocess(workdir):
    out = doctor(workdir, "usercode:nope", "--args", "torch.randn(3)", timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == (
        "python -m funcbwd doctor: error: usercode has no function 'nope'")
