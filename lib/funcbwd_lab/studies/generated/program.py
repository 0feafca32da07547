"""A generated program: its source, how it is called twice, and its check under one cell.

A :class:`Program` is the text of a module that defines ``f(x)`` (``x``: one sample, shape (4,))
and what ``f`` uses; ``state`` names the module-level objects the caller owns (compared after
each call), ``between()`` (when defined) rebinds what ``f`` captures before the second call,
``rebuild()`` (when defined) makes the function of the second call anew (a closure over another
value). :meth:`Program.check` runs it under one transform and entry point through
:func:`funcbwd.harness.check`: each cell gets a fresh module (fresh functions, fresh caches), so
its first call is a first call. :meth:`Program.reproducer` is the same check as a file to run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import linecache
from typing import Any

import torch

from funcbwd import harness

BATCH, N = 4, 4
#: every (transform, entry point) a program is checked in: plain torch.func is each cell's
#: baseline (the harness runs it when the entry point raises or is wrong)
CELLS = tuple((t, e) for t in harness.TRANSFORMS for e in harness.ENTRIES[1:]
              if harness.applies(t, e))
DEFAULT_TIMEOUT_S = 30.0
#: forward-mode transforms: torch's forward AD levels are process-wide, so plain torch.func's
#: jacfwd raises or is wrong when two threads call it at once; a program called from two
#: threads is not checked there (nothing the tool does could be compared with torch)
FORWARD = ("jacfwd", "hessian")


@dataclasses.dataclass(frozen=True)
class Program:
    source: str
    features: tuple[str, ...] = ()
    randomness: str = "error"
    around: str = ""  # a context the call is made in, e.g. "torch.no_grad()"
    threads: int = 1
    state: tuple[str, ...] = ()
    between: bool = False
    rebuild: bool = False
    seed: int = 0

    @property
    def filename(self) -> str:
        """The file the source claims to be (what a refusal must name)."""
        return f"generated_{hashlib.sha1(self.source.encode()).hexdigest()[:10]}.py"

    def load(self) -> dict[str, Any]:
        """A fresh module of the source (its lines registered, as a file's would be)."""
        lines = self.source.splitlines(keepends=True)
        linecache.cache[self.filename] = (len(self.source), None, lines, self.filename)
        namespace: dict[str, Any] = {"__name__": self.filename[:-3]}
        exec(compile(self.source, self.filename, "exec"), namespace)  # noqa: S102 - generated
        return namespace

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(torch.randn(BATCH, N, generator=torch.Generator().manual_seed(self.seed + i))
                     for i in range(2))

    def check(self, transform: str, entry: str,
              timeout: float = DEFAULT_TIMEOUT_S) -> harness.Result:
        ns = self.load()
        x1, x2 = self.inputs()
        calls = [harness.Call((x1,)), harness.Call(
            (x2,), before=ns["between"] if self.between else None,
            fn=ns["rebuild"]() if self.rebuild else None)]
        around = ((lambda: eval(self.around, {"torch": torch}))  # noqa: S307 - our own text
                  if self.around else None)
        return harness.check(ns["f"], calls, transform, entry,
                             state={n: ns[n] for n in self.state}, randomness=self.randomness,
                             around=around, threads=self.threads, timeout=timeout,
                             user_file=self.filename)

    def reproducer(self, transform: str, entry: str) -> str:
        """The program and its check as one file to run (``python repro.py``)."""
        second = ", ".join(["(x2,)", *(["before=between"] if self.between else []),
                            *(["fn=rebuild()"] if self.rebuild else [])])
        names = ", ".join(f"{n!r}: {n}" for n in self.state)
        options = [f"state={{{names}}}"] if self.state else []
        options += [f"randomness={self.randomness!r}"] if self.randomness != "error" else []
        options += [f"around=lambda: {self.around}"] if self.around else []
        options += [f"threads={self.threads}"] if self.threads != 1 else []
        call = f",\n{' ' * 24}".join([f"f, calls, {transform!r}, {entry!r}", *options])
        return (f"{self.source.rstrip()}\n\n\nif __name__ == \"__main__\":\n"
                f"    from funcbwd import harness\n\n"
                f"    x1, x2 = (torch.randn({BATCH}, {N}, generator=torch.Generator()"
                f".manual_seed({self.seed} + i))\n              for i in range(2))\n"
                f"    calls = [harness.Call((x1,)), harness.Call({second})]\n"
                f"    print(harness.check({call}))\n")

    def cells(self, cells=CELLS) -> tuple:
        """The cells this program is checked in (see :data:`FORWARD`)."""
        return tuple(c for c in cells if self.threads == 1 or c[0] not in FORWARD)

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> "Program":
        return cls(**{**r, "features": tuple(r["features"]), "state": tuple(r["state"])})


def check_all(program: Program, cells=CELLS, timeout: float = DEFAULT_TIMEOUT_S,
              stop_at_hang: bool = True) -> list[dict[str, Any]]:
    """One record per cell of ``cells`` the program is checked in: ``transform``, ``entry``,
    and the harness's result. A hang ends the list (this process is poisoned): the cells after
    it are not run."""
    out = []
    for transform, entry in program.cells(cells):
        r = program.check(transform, entry, timeout)
        out.append({"transform": transform, "entry": entry, **r.record()})
        if r.verdict == "hang" and stop_at_hang:
            break
    return out
