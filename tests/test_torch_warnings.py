"""Issue 31, item 5: torch's raw C++ vmap-fallback warnings (270 columns each) are never dumped on
the terminal: the bench counts them and prints one line of ours, within 100 columns, naming the
ops that fell back and how often."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

from funcbwd_lab import command

ROOT = Path(__file__).resolve().parents[1]
CPP = ("[W1204 18:33:15.526185959 BatchedFallback.cpp:82] Warning: There is a performance drop "
       "because we have not yet implemented the batching rule for {op}. Please file us an issue "
       "on GitHub so that we can prioritize its implementation. (function warnFallback)\n")


def test_cpp_and_python_fallback_warnings_become_one_line(capfd):
    said = []
    with command.summarized_torch_warnings(said.append) as caught:
        for op in ("aten::copy", "aten::masked_scatter", "aten::masked_scatter"):
            os.write(2, CPP.format(op=op).encode())  # as c10 writes them: straight to fd 2
        warnings.warn(CPP.format(op="aten::copy").strip(), UserWarning)
        os.write(2, b"something else torch said\n")
    err = capfd.readouterr().err
    assert "BatchedFallback" not in err and "something else torch said" in err
    assert caught.counts == {"aten::copy": 2, "aten::masked_scatter": 2}
    assert said == ["vmap fell back (slow) for aten::copy 2x, aten::masked_scatter 2x"]


def test_the_summary_fits_its_width_however_many_ops():
    counts = {f"aten::op_with_a_long_name_{i}": i + 1 for i in range(30)}
    line = command.fallback_summary(counts, 93)
    assert len(line) <= 93 and line.endswith("more") and "op_with_a_long_name_29 30x" in line


def test_nothing_is_said_without_a_fallback():
    said = []
    with command.summarized_torch_warnings(said.append):
        pass
    assert said == []


def test_bench_prints_no_raw_cpp_warning_and_fits_100_columns():
    p = subprocess.run([sys.executable, "-m", "funcbwd_lab", "bench", "--ops", "masked_select",
                        "--batches", "2", "--sizes", "small", "--repeats", "1", "--no-profile"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "BatchedFallback.cpp" not in p.stderr and "Warning: There is a performance drop" not in p.stderr
    assert max(map(len, p.stderr.splitlines())) <= 100, p.stderr
    summary = [line for line in p.stderr.splitlines() if "vmap fell back (slow) for" in line]
    assert len(summary) == 1 and "aten::masked_scatter" in summary[0], p.stderr[-2000:]
