"""The torch bugs the workbench found, as self-checking upstream-style reports (repro,
neighbouring cases, the rule at fault, an emulation as written and fixed); ``python -m funcbwd_lab
findings``."""
