"""Programs nobody chose keep the tool's contract: the seeded subset of generated programs.

Every program of :func:`funcbwd_lab.studies.generated.seeded.subset` (about 110, drawn by
hypothesis from fixed seeds, no example database) is checked in every cell (8 transforms x the
3 entry points, 21 cells; plain torch.func is each cell's baseline) on its first and second
call by :func:`funcbwd.harness.check`, in a child process (a hang poisons the process that hung).
A feature's test fails when any cell of its programs is ``wrong``, an ``unclear_error``, a
``regression``, a ``hang`` or a crash, and prints each failing program as a file to run.

On the tool of issue 37 (before its fixes) this file is red by design: it is the baseline the
fixes are measured against (docs/generated.md). Run it alone: ``pytest tests/test_generated.py``
(about a minute of CPU; a hang adds 10 s).
"""

from __future__ import annotations

import collections

import pytest

from funcbwd_lab.studies.generated import seeded
from funcbwd_lab.studies.generated.grammar import FEATURES
from funcbwd_lab.studies.generated.program import Program

SHOWN = 3  # failing programs printed per feature


@pytest.fixture(scope="module")
def records():
    return seeded.run_isolated()


def report(bad: list[dict]) -> str:
    """The failing cells by program, and each of the first programs as a file to run."""
    by_program = collections.defaultdict(list)
    for f in bad:
        by_program[f["index"]].append(f)
    lines = [f"{len(bad)} cells outside the contract in {len(by_program)} programs"]
    for index, cells in list(by_program.items())[:SHOWN]:
        first = cells[0]
        program = Program.from_record(first["program"])
        lines.append(f"\n# program {index} ({', '.join(program.features) or 'basic'}):")
        lines += [f"#   {c['transform']} {c['entry']}: {c['verdict']} at call {c.get('call')} "
                  f"(plain torch.func: {c.get('plain') or 'not run'}): {c['detail'][:120]}"
                  for c in cells]
        if first["verdict"] != "crash":
            lines.append(program.reproducer(first["transform"], first["entry"]))
    return "\n".join(lines)


def test_the_subset_is_what_it_says(records):
    assert {r["feature"] for r in records} <= set(FEATURES) | {"free"}
    ran = [r for r in records if r["cells"]]
    assert len(ran) >= len(FEATURES) and all(len(r["cells"]) <= 21 for r in ran)


@pytest.mark.parametrize("feature", [*FEATURES, "free"])
def test_generated_programs_keep_the_contract(records, feature):
    bad = [f for f in seeded.failures(records) if f["feature"] == feature]
    assert not bad, report(bad)
