"""What happens on all of torch's own backward formulas? The OpInfo sweep: every composition
functorch tests (``vmapvjp``, ``vmapvjpvjp``, ``vmapjvpvjp``, ``vmapjvpall``, ``vjpvmap``) over
every OpInfo with autograd, each record computed by the one cell engine (:mod:`funcbwd_lab.run`),
on Dask, resumable; upstream's expected failures as reviewed data with a computed verdict each.

``opinfo`` (torch's op database as cells), ``sweep`` (the run, on Dask), ``data`` (the saved
records), ``summary`` (counts, regressions, fixes, verdicts), ``render`` (tables), ``cli``.
"""
