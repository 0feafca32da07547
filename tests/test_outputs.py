"""Issue 31, item 2: a command never silently overwrites a committed data or doc file (it refuses
before any work, one line, unless --force), and a long command shows progress at least every 3 s,
each line within 100 columns even on a pipe."""

from __future__ import annotations

import io
import subprocess
import time
from pathlib import Path

import pytest

from funcbwd_lab import cli, command
from funcbwd.errors import FuncbwdError
from funcbwd_lab.progress import Progress

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    return (rc, *capsys.readouterr())


@pytest.mark.parametrize("argv", [
    ["deletable", "--ops", "live_take_backward_1", "--samples", "first", "--no-timing",
     "--strategies", "traced", "--out", "data/live-deletable.json"],
    ["rfc", "--out", "docs/rfc.md"],
    ["matrix", "--ops", "diag", "--samples", "first", "--scenarios", "jacrev", "--strategies",
     "plain", "--format", "json", "--out", "data/matrix-test-ops.json"],
    ["coverage", "--ops", "atan2", "--quick", "--out", "data/coverage.json.gz"],
], ids=lambda a: a[0])
def test_a_committed_output_is_refused_before_any_work(argv, capsys, monkeypatch):
    out = ROOT / argv[argv.index("--out") + 1]
    before = out.read_bytes()
    rc, stdout, err = _run([*argv, "--quiet"], capsys, monkeypatch)
    assert rc == 2 and out.read_bytes() == before and stdout == ""
    error = err[err.index(f"python -m funcbwd_lab {argv[0]}: error: "):].splitlines()
    assert len(error) == 1 and len(error[0]) <= 100, error
    assert "is committed; --force overwrites" in error[0]


def test_committed_knows_tracked_untracked_and_outside_git(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "kept.json").write_text("{}")
    (tmp_path / "new.json").write_text("{}")
    subprocess.run(["git", "-C", str(tmp_path), "add", "kept.json"], check=True)
    assert command.committed(tmp_path / "kept.json")
    assert not command.committed(tmp_path / "new.json")
    assert not command.committed(tmp_path / "out" / "kept.json")  # a directory not made yet
    with pytest.raises(FuncbwdError):
        command.check_out(tmp_path / "kept.json")
    command.check_out(tmp_path / "kept.json", force=True)  # --force regenerates
    command.check_out(tmp_path / "new.json")


def test_out_is_ignored_by_git():
    p = subprocess.run(["git", "check-ignore", "-q", "out/coverage.json.gz"], cwd=ROOT)
    assert p.returncode == 0


# ------------------------------------------------------------------------------ progress
def test_a_long_item_still_gets_a_line_every_3_seconds():
    out = io.StringIO()
    with Progress("matrix", 4, stream=out, tty=False, interval=3600, heartbeat=0.3) as p:
        p.doing("diag jacrev traced")
        time.sleep(1.2)  # one item running for four heartbeats
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3, lines  # at least three beats
    assert all(line.startswith("matrix 0/4 0% ") for line in lines)
    n = len(lines)
    time.sleep(0.7)  # closed: no more beats
    assert len(out.getvalue().splitlines()) == n


def test_the_default_heartbeat_is_at_most_3_seconds():
    assert Progress("x").heartbeat <= 3


def test_progress_lines_fit_100_columns_on_a_pipe():
    out = io.StringIO()
    p = Progress("matrix", 512, stream=out, tty=False)
    p.doing("live_binary_cross_entropy_double_backward_1 vmap_cotangents_and_primals " * 3)
    p.advance(failed=True)
    p.close()
    lines = out.getvalue().splitlines()
    assert lines and max(map(len, lines)) <= 100, lines


# ------------------------------------------------------------------------------ the README
def _fenced(text: str) -> str:
    import re

    return "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.S))


def test_the_readme_commands_write_no_committed_file():
    import re

    code = _fenced((ROOT / "README.md").read_text())
    outs = re.findall(r"--out (\S+)", code)
    assert outs and all(not command.committed(ROOT / o) for o in outs), outs


def test_the_readme_says_what_regenerates_each_committed_data_file():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("### Regenerating the committed data"):].split("\n\n")[1]
    tracked = subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    missing = [f for f in tracked if f"`{f}`" not in table]
    assert tracked and not missing, missing


def test_a_progress_started_again_after_close_beats_again():
    out = io.StringIO()
    p = Progress("coverage", stream=out, tty=False, interval=3600, heartbeat=0.2)
    p.start(2)
    p.close()  # e.g. parallel.map_items closes the command's Progress after the sweep
    p.start(3, "coverage cost")
    time.sleep(0.7)
    p.close()
    assert sum(line.startswith("coverage cost 0/3") for line in out.getvalue().splitlines()) >= 2
