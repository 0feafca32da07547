"""The generator's parts: programs are valid and deterministic, reproducers run, the long run's
item function and summary count what they say, and docs/generated.md's blocks are their data."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from funcbwd_lab.studies.generated import report, run, seeded
from funcbwd_lab.studies.generated.grammar import FEATURES, programs
from funcbwd_lab.studies.generated.program import CELLS, Program


@pytest.fixture(scope="module")
def sample():
    return seeded.draw(programs(), 30, seed=5)


def test_programs_compile_and_name_their_features(sample):
    assert len(sample) == 30
    for p in sample:
        compile(p.source, p.filename, "exec")
        assert set(p.features) <= set(FEATURES)
        assert ("def between():" in p.source) == p.between
        assert ("def rebuild():" in p.source) == p.rebuild


def test_a_required_feature_is_always_there():
    for feature in ("nested", "threads", "closure", "buffer"):
        assert all(feature in p.features for p in seeded.draw(programs(require=(feature,)), 5, 1))


def test_drawing_is_deterministic():
    a = [p.source for p in seeded.draw(programs(require=("views",)), 5, seed=3)]
    assert a == [p.source for p in seeded.draw(programs(require=("views",)), 5, seed=3)]
    assert a != [p.source for p in seeded.draw(programs(require=("views",)), 5, seed=4)]


def test_the_reproducer_runs_as_a_file():
    p = Program("import torch\n\n\ndef f(x):\n    t = torch.zeros(4)\n    t[0] = x.sum()\n"
                "    return t * x\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(p.reproducer("vmap", "vmap"), "repro.py", "exec"), {"__name__": "__main__"})
    assert out.getvalue().startswith("Result(verdict='pass'")
    assert all(len(line) <= 100 for line in p.reproducer("vmap_grad", "vmap").splitlines())


def test_a_poisoned_worker_ends_at_its_next_item(monkeypatch):
    from funcbwd import harness

    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited(code)
    monkeypatch.setattr(os, "_exit", exit_)
    monkeypatch.setattr(harness, "_HUNG", ["a test"])
    with pytest.raises(Exited):
        run.check_item((0, 0))


def test_a_hung_programs_kept_record_is_its_retrys_answer(tmp_path):
    kept = {"key": [0, 0], "program": {}, "cells": [["vmap", "vmap", "hang", 1, "", ""]]}
    (tmp_path / "0-0.json").write_text(json.dumps(kept))
    assert run.check_item((0, 0), hangs=str(tmp_path)) == kept  # not run again
    assert run._failed((0, 0), "crash", "died", hangs=str(tmp_path)) == kept


def test_the_summary_counts_every_cell_and_keeps_every_program_that_did_not_pass():
    src = "import torch\n\n\ndef f(x):\n    return x * 2.0\n"

    def record(key, verdicts):
        cells = [[t, e, v, 1, "", ""] for (t, e), v in zip(CELLS, verdicts)]
        return {"key": key, "program": Program(src, ("factory",)).record(), "cells": cells,
                "cpu_s": 0.5}
    ok = record([0, 0], ["pass"] * len(CELLS))
    bad = record([0, 1], ["wrong"] + ["pass"] * (len(CELLS) - 2) + ["hang"])
    doc = report.summarize([ok, bad, {"key": [0, 2], "duplicate": True}], 10.0, 3, 50, 1)
    assert doc["meta"]["programs"] == 2 and doc["meta"]["duplicates"] == 1
    assert doc["totals"] == {"pass": 2 * len(CELLS) - 2, "wrong": 1, "hang": 1}
    t, e = CELLS[0]
    assert doc["counts"][e][t] == {"pass": 1, "wrong": 1}
    (kept,) = doc["not_pass"]["programs"]
    assert kept["key"] == [0, 1] and kept["program"]["source"] == src
    assert kept["verdicts"] == "W" + "P" * (len(CELLS) - 2) + "H"
    (program, cells), = report.outside(doc)
    assert [(c["transform"], c["entry"], c["verdict"]) for c in cells] == [
        (*CELLS[0], "wrong"), (*CELLS[-1], "hang")]
    assert program["threads"] == 1  # the defaults a kept program leaves out come back
    assert json.loads(report.dumps(doc)) == json.loads(json.dumps(doc))
    text = report.markdown(doc)
    assert "- 0 wrong answers: MISSED (1 wrong cell)" in text
    assert "- 0 hangs: MISSED (1 cell hung or timed out)" in text


def test_docs_blocks_are_rendered_from_their_data():
    text = report.DOCS.read_text()
    for name, render in report.BLOCKS.items():
        body = render()
        if body is None:  # no data yet: the block stays empty
            assert report.block(text, name) == "", name
        else:
            assert report.block(text, name) == body + "\n", (
                f"{name} is stale: python -m funcbwd_lab.studies.generated.report")


def test_a_stale_block_is_caught():
    text = report.DOCS.read_text().replace("| `captured_frozen` |", "| `captured_frozen ` |")
    assert report.block(text, "generated-mutations") != report.mutations_markdown() + "\n"
