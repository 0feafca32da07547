"""Does each strategy make each transform work for each op? The matrix: every op x sample x
scenario x strategy cell run by the engine (:mod:`funcbwd_lab.run`), summarized (worst over samples,
fixes over plain), checked against reviewed expectations, saved (``data/matrix-test-ops.json``)
and shown as a text table; ``python -m funcbwd_lab matrix``."""
