"""doctor: which in-place call of *your* function breaks which torch.func transform, and whether
:func:`funcbwd.functionalized` fixes it (checked against a per-sample loop).

:mod:`funcbwd.doctor.checks` runs the transforms plain and wrapped; :mod:`funcbwd.doctor.report`
finds the culprit line and the graph diff and renders the text ``python -m funcbwd doctor``
prints (:mod:`funcbwd.doctor.cli`).
"""
