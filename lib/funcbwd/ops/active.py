"""The active strategy: which strategy a legacy op's backward runs its formula through.

A context variable, so threads and transforms each see their own. Strategies set it
(:meth:`funcbwd.strategies.base.Strategy.active`); the legacy ops read it when their forward runs.
Nothing here knows what a strategy is: ``None`` means "no strategy active" (the formula runs as
written).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

_ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("funcbwd_strategy", default=None)


def active_strategy() -> Any:
    """The strategy set by the innermost :func:`activated` block, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def activated(strategy: Any) -> Iterator[Any]:
    token = _ACTIVE.set(strategy)
    try:
        yield strategy
    finally:
        _ACTIVE.reset(token)
