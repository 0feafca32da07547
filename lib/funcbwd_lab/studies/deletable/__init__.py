"""Which of today's 36 hand-written ``isTensorSubclassLike`` branches in core's formulas would a
generic strategy make unnecessary? One criterion, the verdicts, their cost
(``data/live-deletable.json``); ``python -m funcbwd_lab deletable``."""
