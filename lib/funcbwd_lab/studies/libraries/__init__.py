"""Installed libraries: the tool on the code users run (issue 38).

Real libraries, installed from the package index at pinned versions into an environment of their
own (:mod:`.env`, ``locks/libraries.txt``), called exactly as their users call them (:mod:`.cases`:
one case per public function or module, each citing where its users call it so), under torch.func
transforms, plain and with ``funcbwd.allow_inplace()``, each cell against a per-sample loop of
eager autograd on the same call (:mod:`.harness`); verdicts and counts in :mod:`.verdicts`; the
docs page rendered by :mod:`.render`. One command (``python -m funcbwd_lab.studies.libraries
all``) installs, computes on Dask (resumable) and renders; docs/libraries.md says what it found.
"""
