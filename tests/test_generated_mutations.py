"""Reintroducing each bug of issue 37 makes the seeded subset fail (the generator's mutation test).

Each written mutation of :mod:`funcbwd_lab.studies.generated.mutations` runs the subset's
programs of its feature, in its entry point's cells, three times (one child process for all,
a new one after a hang):

* on :func:`~funcbwd_lab.studies.generated.mutations.reference_tool` (a per-sample loop for
  ``funcbwd.vmap``, the function as written for ``funcbwd.functionalized``): the control;
* on the reference tool with the mutation: some cell that passed in the control fails, so the
  mutation re-breaks what it names and the subset sees it (the check can fail);
* on the tool itself with the mutation: the subset fails. On the tool before issue 37's fixes
  this holds without the mutation too; after them, only the mutation makes it fail.

Mutations not written yet are data (``hook``: what the tool should expose), each an expected
failure with its reason.
"""

from __future__ import annotations

import pytest

from funcbwd_lab.studies.generated import seeded
from funcbwd_lab.studies.generated.mutations import MUTATIONS, written

WRITTEN = written()


def _jobs(name: str) -> list[seeded.Job]:
    m = MUTATIONS[name]
    return [seeded.Job(how, (m.feature,), (m.entry,))
            for how in ("reference", f"reference+{name}", name)]


@pytest.fixture(scope="module")
def runs():
    jobs = [j for name in WRITTEN for j in _jobs(name)]
    records = seeded.run_isolated(jobs)
    out = {}
    for k, name in enumerate(WRITTEN):
        out[name] = [[r for r in records if r["job"] == 3 * k + i] for i in range(3)]
    return out


def _verdicts(records: list[dict]) -> dict[tuple, str]:
    return {(r["index"], c["transform"], c["entry"]): c["verdict"]
            for r in records for c in r["cells"]} | {
        (r["index"], "crash", ""): "crash" for r in records if "crash" in r}


@pytest.mark.parametrize("name", WRITTEN)
def test_the_mutation_breaks_a_cell_the_control_passes(runs, name):
    control, mutated, _ = (_verdicts(r) for r in runs[name])
    passing = {k for k, v in control.items() if v == "pass"}
    assert passing, f"{name}: no cell of {MUTATIONS[name].feature} passes on the reference tool"
    broken = {k for k in passing if mutated.get(k, "pass") not in seeded.OK}
    hung = any(v == "hang" for v in mutated.values())  # the cells after a hang do not run
    assert broken or hung, f"{name} changed no passing cell: the subset cannot see it"


@pytest.mark.parametrize("name", WRITTEN)
def test_the_subset_fails_on_the_tool_under_the_mutation(runs, name):
    tool = runs[name][2]
    assert seeded.failures(tool), f"{name}: the subset passes on the mutated tool"


@pytest.mark.parametrize("name", [n for n in MUTATIONS if n not in WRITTEN])
def test_mutations_not_written_yet_say_what_they_need(name):
    m = MUTATIONS[name]
    assert m.hook and m.feature and m.entry
    pytest.xfail(f"not written: needs {m.hook}")
