"""The graph cache of one functionalized function: bounded (LRU), thread-safe, one trace per key.

A lookup takes the cache's lock for the dictionary operations only (a hit moves the key to the
most recent end). A miss builds the entry under one process-wide trace lock (tracing pushes a
dispatch mode and clears the functorch stack: one trace at a time), re-checking the key first, so
threads that miss on the same key at once trace it once and share the entry. Past ``maxsize``
entries the least recently used is dropped (``maxsize=None``: unbounded).
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable, NamedTuple

from funcbwd.errors import BadInputError

#: Entries kept per function by default (each is a compiled graph and its two FX graphs).
DEFAULT_MAXSIZE = 256

_TRACE_LOCK = threading.Lock()
_tracing = 0


class CacheInfo(NamedTuple):
    """Like ``functools.lru_cache``'s: ``misses`` is how many signatures were traced."""

    hits: int
    misses: int
    maxsize: int | None
    currsize: int


def tracing_state() -> dict[str, Any]:
    """Traces in progress and whether the trace lock is held (both at rest: 0, False)."""
    return {"tracing_in_progress": _tracing, "lock_held": _TRACE_LOCK.locked()}


class GraphCache:
    def __init__(self, maxsize: int | None = DEFAULT_MAXSIZE) -> None:
        if maxsize is not None and (not isinstance(maxsize, int) or maxsize < 1):
            raise BadInputError(f"maxsize must be a positive int or None, got {maxsize!r}")
        self.maxsize = maxsize
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The entry for ``key``, built by ``build()`` on a miss."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return hit
        return self._build(key, build)

    def peek(self, key: Hashable) -> Any:
        """The entry for ``key`` or None, without the lock (a dict read is atomic under the GIL;
        an entry evicted meanwhile is still a valid graph): a wrapper's fast path. Counted as a
        hit and moved to the recent end, as :meth:`get` does."""
        hit = self._entries.get(key)
        if hit is not None:
            self.hits += 1
            try:
                self._entries.move_to_end(key)
            except KeyError:  # evicted meanwhile
                pass
        return hit

    def _build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        global _tracing
        with _TRACE_LOCK:
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:  # another thread traced it while this one waited
                    self.hits += 1
                    return hit
                self.misses += 1
            _tracing += 1
            try:
                entry = build()
            finally:
                _tracing -= 1
            with self._lock:
                self._entries[key] = entry
                while self.maxsize is not None and len(self._entries) > self.maxsize:
                    self._entries.popitem(last=False)
            return entry

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, self.maxsize, len(self._entries))

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0
