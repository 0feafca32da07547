"""generated: programs nobody chose, as the test of the tool's contract (issue 37).

:mod:`~funcbwd_lab.studies.generated.grammar` (with :mod:`~.pieces`) is a hypothesis strategy
that writes programs of in-place idioms as source; :mod:`~.program` checks one in every cell
through :func:`funcbwd.harness.check`; :mod:`~.seeded` is the subset ``make test`` runs
(``tests/test_generated.py``); :mod:`~.mutations` re-creates each class of bug and the control
tool (``tests/test_generated_mutations.py``); :mod:`~.classes` recognizes issue 37's classes in
checked cells; :mod:`~.shrink` finds a minimal program per class; :mod:`~.run` is the long run on
Dask and :mod:`~.report` its counts and the blocks of docs/generated.md.
"""
