"""Progress of a long command on stderr: the one progress reporter of the library.

A :class:`Progress` shows items done / total, the item running now, failures and the elapsed
time, e.g. ``matrix 37/512 7% 12 s  diag vmap_cotangents traced``:

* on a terminal, one line rewritten in place (cut to the terminal's width so it never wraps),
  finished with a newline by :meth:`Progress.close`;
* otherwise (a pipe, a log file, CI) plain lines, at most one every ``interval`` seconds, plus
  the last one, so a log shows the run advancing without a line per item;
* in both, a line at least every ``heartbeat`` seconds (3) while the object is open, even when
  one item runs for a minute (a background thread redraws the status with the elapsed time);
* every line fits the terminal's width, 100 columns off a terminal (the item running now is cut);
* nothing at all when ``enabled`` is False (the CLI's ``--quiet``).

It writes only to its stream (stderr by default), never to stdout, so machine-readable output is
unchanged. Calling the object with a message (``progress("copies done")``) prints that message as
its own line (wrapped to the width), prefixed with the elapsed time: a Progress can be passed wherever a
``Callable[[str], None]`` progress callback is expected. Library functions take
``progress: Progress | None``; None means silent. This module imports nothing of funcbwd
(bottom layer) and only the standard library.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import threading
import time
import weakref
from typing import IO, Iterable, Iterator, TypeVar

T = TypeVar("T")


class Progress:
    """Progress of ``what`` over ``total`` items (None: unknown until :meth:`start`).

    ``stream`` defaults to ``sys.stderr`` at construction; ``tty`` overrides the terminal
    detection (tests); ``interval`` is the least seconds between two plain (non-terminal)
    lines; ``heartbeat`` the most seconds without a line while open (None: no heartbeat)."""

    def __init__(self, what: str, total: int | None = None, *, enabled: bool = True,
                 stream: IO | None = None, tty: bool | None = None, interval: float = 2.0,
                 heartbeat: float | None = 3.0) -> None:
        self.what, self.total, self.enabled, self.interval = what, total, enabled, interval
        self.heartbeat = heartbeat
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._beating = False
        self._last_write = time.perf_counter()
        self.stream = sys.stderr if stream is None else stream
        self.tty = self._isatty() if tty is None else tty
        self.done = self.failed = 0
        self.current = ""
        self.start_time = time.perf_counter()
        self._last_plain = self._last_draw = float("-inf")
        self._shown = False  # a status line is on screen (terminal mode)

    @classmethod
    def off(cls) -> "Progress":
        """A Progress that prints nothing (what library functions use when given None)."""
        return cls("", enabled=False)

    def _isatty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    # -------------------------------------------------------------------- reporting
    def start(self, total: int | None, what: str | None = None) -> None:
        """(Re)start counting: ``total`` items from now (the clock keeps running)."""
        self.total, self.done, self.failed, self.current = total, 0, 0, ""
        if what is not None:
            self.what = what
        if self._closed.is_set():  # used again after close(): beat again (a new thread)
            self._closed, self._beating = threading.Event(), False
        self._draw(force=True)

    def doing(self, label: str) -> None:
        """``label`` is the item running now (a terminal line shows it at once)."""
        self.current = label
        if self.tty:
            self._draw()
        elif self.enabled:
            self._beat()

    def advance(self, n: int = 1, *, failed: bool = False, label: str | None = None) -> None:
        """``n`` more items done (``failed``: one of them failed)."""
        self.done += n
        self.failed += bool(failed)
        if label is not None:
            self.current = label
        self._draw(force=self.total is not None and self.done >= self.total)

    def track(self, items: Iterable[T], label=str) -> Iterator[T]:
        """Yield ``items``, showing ``label(item)`` while each runs and counting it when the
        caller asks for the next (``total`` is set from ``len(items)`` when it has one)."""
        if self.total is None and hasattr(items, "__len__"):
            self.start(len(items))  # type: ignore[arg-type]
        for item in items:
            self.doing(label(item))
            yield item
            self.advance()

    def __call__(self, message: str) -> None:
        """Print ``message`` as its own line (a phase done, a section written)."""
        if not self.enabled:
            return
        with self._lock:
            self._beat()
            self._clear()
            text = f"{self.what} {self.elapsed():.0f} s: {message}"
            self._write(textwrap.fill(text, self._columns(), subsequent_indent="    ",
                                      break_long_words=False, break_on_hyphens=False) + "\n")
            if self.tty:  # the status line comes back under the message
                self._draw(force=True)

    def close(self) -> None:
        """End the terminal line (a newline after the last status) and the heartbeat."""
        self._closed.set()
        with self._lock:
            if self.enabled and self.tty and self._shown:
                self._write("\n")
                self._shown = False

    def _beat(self) -> None:
        """Start the heartbeat thread once (it holds only a weak reference: a Progress that is
        dropped without :meth:`close` stops beating too)."""
        if self._beating or not self.heartbeat or self._closed.is_set():
            return
        self._beating = True
        ref, closed, period = weakref.ref(self), self._closed, self.heartbeat

        def run() -> None:
            while not closed.wait(period / 3):
                me = ref()
                if me is None:
                    return
                with me._lock:
                    if not closed.is_set() and time.perf_counter() - me._last_write >= period:
                        me._draw(force=True)
                del me

        threading.Thread(target=run, name=f"progress {self.what}", daemon=True).start()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------- text
    def elapsed(self) -> float:
        return time.perf_counter() - self.start_time

    def line(self) -> str:
        """The status text, e.g. ``matrix 37/512 7% 12 s  diag vmap_cotangents traced``."""
        count = f"{self.done}" if self.total is None else f"{self.done}/{self.total}"
        share = f" {100 * self.done // self.total}%" if self.total else ""
        failed = f", {self.failed} failed" if self.failed else ""
        current = f"  {self.current}" if self.current else ""
        return f"{self.what} {count}{share}{failed} {self.elapsed():.0f} s{current}"

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._beat()
            now = time.perf_counter()
            if self.tty:  # at most ten redraws a second, unless forced
                if force or now - self._last_draw >= 0.1:
                    self._write("\r" + self._cut(self.line(), self._columns() - 1) + "\x1b[K")
                    self._shown, self._last_draw = True, now
                return
            if force or now - self._last_plain >= self.interval:
                self._write(self._cut(self.line(), self._columns()) + "\n")
                self._last_plain = now

    @staticmethod
    def _cut(text: str, width: int) -> str:
        return text if len(text) <= width else text[: width - 3] + "..."

    def _columns(self) -> int:
        """The terminal's width in terminal mode, else 100 (lines are wrapped to it)."""
        return shutil.get_terminal_size((100, 24)).columns if self.tty else 100

    def _clear(self) -> None:
        if self.tty and self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
            self._last_write = time.perf_counter()
