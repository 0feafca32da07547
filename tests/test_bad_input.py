"""Every public entry point rejects bad input with an error that names the problem (and the valid
choices); the bad-input table (docs/bad-input.md, linked from the README) is exactly what these
calls return."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from funcbwd_lab.studies.bad_input import cases as bad_input
from funcbwd_lab.views import readme

TABLE_HOME = Path(__file__).resolve().parents[1] / readme.HOMES["bad-input"]


@pytest.fixture(scope="module")
def outcomes():
    return [bad_input.try_case(c) for c in bad_input.CASES]


def test_every_bad_input_is_rejected_clearly(outcomes):
    unclear = [(o.case.entry, o.case.bad, o.error) for o in outcomes if not (o.rejected and o.clear)]
    assert not unclear, unclear
    assert len(outcomes) >= 20


def test_readme_table_is_generated_from_the_cases(outcomes):
    assert readme.block(TABLE_HOME.read_text(), "bad-input") == bad_input.markdown(outcomes)


def test_debug_flag_shows_the_traceback():
    p = subprocess.run([sys.executable, "-m", "funcbwd_lab", "--debug", "matrix", "--ops", "dig"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "Traceback" in p.stderr and "UnknownNameError" in p.stderr
