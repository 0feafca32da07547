"""Every scenario, by name: the backward ones (:mod:`funcbwd_lab.run.backward`), the forward-mode
ones (:mod:`funcbwd_lab.run.forward`), then functorch's compositions (:mod:`funcbwd_lab.run.functorch`,
group "functorch": the OpInfo sweep's, run on request elsewhere). The runner looks scenarios up
here.

Names: :data:`SCENARIOS` / :data:`SCENARIO_NAMES` are all of them; :data:`BACKWARD_NAMES` and
:data:`FORWARD_NAMES` the two groups (a scenario runs the formulas of one op kind,
``Scenario.formula_kind``); :func:`names_for` those for a set of op kinds.
"""

from __future__ import annotations

from typing import Iterable

from funcbwd_lab.run.backward import BACKWARD
from funcbwd_lab.run.forward import FORWARD
from funcbwd_lab.run.functorch import FUNCTORCH
from funcbwd_lab.run.scenario import BATCH, Case, Scenario, Trial, in_dims_choices  # noqa: F401

SCENARIOS: dict[str, Scenario] = {**BACKWARD, **FORWARD, **FUNCTORCH}
SCENARIO_NAMES = tuple(SCENARIOS)
BACKWARD_NAMES = tuple(BACKWARD)
FORWARD_NAMES = tuple(FORWARD)
#: functorch's compositions (PyTorch's test_ops.py): the OpInfo sweep's scenarios
FUNCTORCH_NAMES = tuple(FUNCTORCH)
#: the workbench's own scenarios (backward and forward-mode): the matrix's, the report's and the
#: explorer's default; functorch's compositions run when named (and in the OpInfo sweep)
MATRIX_NAMES = BACKWARD_NAMES + FORWARD_NAMES
#: the names by group, for listings and "did you mean" errors
SCENARIO_GROUPS = {"backward formulas": BACKWARD_NAMES, "forward-mode formulas": FORWARD_NAMES,
                   "functorch compositions": FUNCTORCH_NAMES}


def names_for(kinds: Iterable[str], group: str = "matrix") -> list[str]:
    """The scenario names of ``group`` that run formulas of the given op kinds, in
    :data:`SCENARIOS` order."""
    kinds = set(kinds)
    return [n for n, sc in SCENARIOS.items() if sc.formula_kind in kinds and sc.group == group]
