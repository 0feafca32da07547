"""The tool's one cache: a bounded, thread-safe mapping, least recently used out past its size.

Used for the decorator's graphs (one cache per wrapped function), what worked for a vmap'd
function (:mod:`funcbwd.ladder`) and the plans of custom Functions (:mod:`funcbwd.functions`).
Every read and write takes the cache's lock, for the dictionary operation only.
:meth:`LRU.get_or_build` builds a missing entry under a lock of that key alone: threads that miss
on the same key at once build it once and share it; other keys, and other caches, never wait
(a nested decorated function traced inside another's trace takes its own cache's key lock).
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable, NamedTuple

from funcbwd.errors import BadInputError

#: Entries kept by default (a decorator's cache: each is a compiled graph and its FX graphs).
DEFAULT_MAXSIZE = 256
_MISSING = object()


class CacheInfo(NamedTuple):
    """Like ``functools.lru_cache``'s: ``misses`` is how many entries were built."""

    hits: int
    misses: int
    maxsize: int | None
    currsize: int


class LRU:
    def __init__(self, maxsize: int | None = DEFAULT_MAXSIZE) -> None:
        if maxsize is not None and (not isinstance(maxsize, int) or maxsize < 1):
            raise BadInputError(f"maxsize must be a positive int or None, got {maxsize!r}")
        self.maxsize = maxsize
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}
        self.hits = self.misses = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            hit = self._entries.get(key, _MISSING)
            if hit is _MISSING:
                return default
            self._entries.move_to_end(key)
            self.hits += 1
            return hit

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while self.maxsize is not None and len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def pop(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The entry for ``key``, built by ``build()`` on a miss (once, whatever the threads)."""
        hit = self.get(key, _MISSING)
        if hit is not _MISSING:
            return hit
        with self._lock:
            lock = self._building.setdefault(key, threading.Lock())
        with lock:
            hit = self.get(key, _MISSING)
            if hit is not _MISSING:  # another thread built it while this one waited
                return hit
            try:
                entry = build()
                self.put(key, entry)
                with self._lock:
                    self.misses += 1
            finally:
                with self._lock:
                    self._building.pop(key, None)
            return entry

    def building(self) -> int:
        """How many entries are being built now (0 at rest)."""
        with self._lock:
            return len(self._building)

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
