"""Errors funcbwd raises on bad input: each names what was wrong and what to do instead."""

from __future__ import annotations

from typing import Iterable


class FuncbwdError(ValueError):
    """Base class: a user-facing error with a one-line, actionable message."""


class UnknownNameError(FuncbwdError, KeyError):
    def __init__(self, kind: str, name: object, valid: Iterable[str], of: str = ""):
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        where = f" of {of}" if of else ""
        super().__init__(
            f"unknown {kind}{where} {name!r}; valid {plural(kind)}{where}: {', '.join(self.valid)}"
        )

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class BadInputError(FuncbwdError, TypeError):
    """Wrong shape, dtype, argument type or batch size."""


class NotApplicableError(FuncbwdError):
    """A scenario or strategy cannot apply to this op (e.g. no jvp rule); carries the reason."""


def plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def check_name(kind: str, name: object, valid: Iterable[str]) -> str:
    valid = list(valid)
    if not isinstance(name, str) or name not in valid:
        raise UnknownNameError(kind, name, valid)
    return name


def parse_names(kind: str, text: str | Iterable[str] | None, valid: Iterable[str]) -> list[str]:
    """Parse 'a,b' (or a list); None or 'all' means every valid name."""
    valid = list(valid)
    if text is None or text == "all":
        return valid
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    if not names:
        raise FuncbwdError(f"no {kind} given; valid {plural(kind)}: {', '.join(sorted(valid))}")
    return [check_name(kind, n, valid) for n in names]


def first_line(msg: str, limit: int = 240) -> str:
    """The first line of an error message, cut to ``limit`` characters (for tables and records)."""
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
