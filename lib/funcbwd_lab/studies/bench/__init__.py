"""What does each strategy cost? Batched time against the hand-written formula and builtin, the
cost with vmap off, copies and memory, targets met or missed (``data/bench-quick.json``), the
charts, and where one cell's time goes; ``python -m funcbwd_lab bench`` and ``profile``."""
