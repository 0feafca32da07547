"""yourcode: does :func:`funcbwd.functionalized` fix real code nobody here wrote?

Four public reports, each re-created minimally with its citation (:mod:`.cases`), run under
vmap, vmap(vjp), vmap(jacrev), jacfwd and hessian plain and wrapped, each checked against a
per-sample loop and against torch's own gradient (an out-of-place rewrite); :mod:`.bench` measures
the wrapper's cost against the hand rewrite, first-call latency and the cache's memory.
"""
