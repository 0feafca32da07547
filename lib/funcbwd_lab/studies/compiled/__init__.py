"""Does torch.compile already make in-place backward formulas work under ``vmap(vjp)``?

The question from the design review (issue 24, question 1), answered with computed evidence on
this torch build: the legacy formulas run under ``torch.compile`` of the whole transform call (the
``compiled`` strategy, :mod:`funcbwd_lab.strategies.compiled`) for each backend, with what dynamo
actually compiled; a control that shows why the passes are not passes of the legacy formula; the
``vmap(vjp_fn)``-only variant; and what compiling the transform costs on torch's own ops.

* :func:`outcomes.outcomes`, :func:`outcomes.drop_probe`, :func:`outcomes.vjp_fn_outcomes`
* :func:`cost.run`
* :func:`report.collect` (all of it), :func:`report.render`, ``data/compiled.json``

Run: ``python -m funcbwd_lab.studies.compiled [--out data/compiled.json] [--quick]`` (progress on
stderr; the text render on stdout). The full run takes about 15 minutes on 2 cores (inductor
compiles dominate); ``--quick`` runs one backend on three cells, for a smoke check.
"""

from funcbwd_lab.studies.compiled import cost, outcomes, report

__all__ = ["cost", "outcomes", "report"]
