"""Provenance: what a strategy's mechanism actually did while a cell ran.

A pass only counts as a strategy's success when its mechanism ran (the evidence rules). Each
strategy calls :func:`record` at the point where its mechanism acts or is bypassed (e.g. ``traced``
when it runs a cached graph or falls back, ``composite`` when its batched kernel runs, ``hooks``
when a pre-hook pushes a Functionalize level under vmap). The cell runner wraps a cell in
:func:`collecting` and turns the events into the record's ``mechanism`` / ``mechanism_ran``.

Recording outside :func:`collecting` is a no-op, so strategies never pay for it outside the matrix.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class Event:
    """One observation: ``mechanism`` (short text: what ran), ``ran`` (did the strategy's own
    mechanism act, as opposed to a plain path or a fallback), ``detail`` (e.g. a cache key or the
    reason for a fallback)."""

    strategy: str
    mechanism: str
    ran: bool
    detail: str = ""


_EVENTS: contextvars.ContextVar[list[Event] | None] = contextvars.ContextVar(
    "funcbwd_provenance", default=None)


def record(strategy: str, mechanism: str, ran: bool, detail: str = "") -> None:
    """Note what ran; a no-op unless a :func:`collecting` block is open."""
    events = _EVENTS.get()
    if events is not None:
        events.append(Event(strategy, mechanism, ran, detail))


@contextlib.contextmanager
def collecting() -> Iterator[list[Event]]:
    """Collect the events recorded inside the block (nested blocks each see their own)."""
    events: list[Event] = []
    token = _EVENTS.set(events)
    try:
        yield events
    finally:
        _EVENTS.reset(token)
