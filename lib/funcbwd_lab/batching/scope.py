"""One re-entrant scope for a vmap rule: registered when the outermost block enters, removed when
it exits (also on error), shared by every rule in :mod:`funcbwd_lab.batching`."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from funcbwd import internals


class ScopedRule:
    """A vmap rule for ``op`` that exists only inside :meth:`scope` blocks (nested or concurrent
    blocks share one registration; the last one out removes it)."""

    def __init__(self, op: str, rule: Callable[..., Any]):
        self.op, self.rule = op, rule
        self._lock = threading.Lock()
        self._depth = 0
        self._stack: contextlib.ExitStack | None = None

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                stack = contextlib.ExitStack()
                stack.enter_context(internals.scoped_vmap_rule(self.op, self.rule))
                self._stack = stack
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._stack is not None:
                    stack, self._stack = self._stack, None
                    stack.close()

    def active(self) -> bool:
        return self._depth > 0
