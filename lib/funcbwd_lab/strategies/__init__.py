"""Strategies: one module per way to run a legacy formula (and the references), the interface
they share (:mod:`funcbwd_lab.strategies.base`), the provenance they record, and the registry, the
one list of every strategy with its role (:mod:`funcbwd_lab.strategies.registry`)."""

from funcbwd_lab.strategies.base import Strategy
from funcbwd_lab.strategies.registry import (CANDIDATES, REFERENCES, REGISTRY, STRATEGY_NAMES,
                                         all_names, available, get_strategy, names)

__all__ = ["Strategy", "get_strategy", "available", "all_names", "names", "REGISTRY",
           "CANDIDATES", "REFERENCES", "STRATEGY_NAMES"]
