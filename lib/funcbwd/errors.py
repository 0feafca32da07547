"""Errors funcbwd raises on bad input: each names what was wrong and what to do instead."""

from __future__ import annotations

import difflib
import textwrap
import traceback
from typing import Any, Iterable, Mapping, Sequence


class FuncbwdError(ValueError):
    """Base class: a user-facing, actionable error; its first line says what was wrong (further
    lines, if any, list the valid choices), every line at most 100 columns."""


class UnknownNameError(FuncbwdError, KeyError):
    """An unknown name of some ``kind`` (op, strategy, scenario, form, OpInfo op, ...).

    ``valid`` is the names to choose from, or a mapping group -> list of names (the op registry's
    groups, :func:`grouped`: the message then lists the names by group). The message's first line names the bad name
    and, when some valid names are close to it, suggests them (:func:`suggest`); the following
    lines list the valid names, wrapped at 100 columns, a long group shortened to its first
    names and a count. Attributes: ``kind``, ``name``, ``valid`` (every valid name, sorted),
    ``groups`` (group -> sorted names; one group ``""`` when ungrouped), ``suggestions``."""

    def __init__(self, kind: str, name: object, valid: Iterable[str] | Mapping[str, Iterable[str]],
                 of: str = ""):
        groups = ({g: sorted(ns) for g, ns in valid.items()} if grouped(valid)
                  else {"": sorted(valid)})
        self.kind, self.name, self.groups = kind, name, groups
        self.valid = sorted({n for ns in groups.values() for n in ns})
        self.suggestions = suggest(name, self.valid)
        where = f" of {of}" if of else ""
        head = f"unknown {kind}{where} {name!r}"
        if self.suggestions:
            head += f"; did you mean {' or '.join(self.suggestions)}?"
        super().__init__(head + "\n" + listing(f"valid {plural(kind)}{where}", groups))

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


#: names shown of one group before "... and N more"
SHOWN = 12


def suggest(name: object, valid: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` valid names close to ``name``: difflib's closest matches (ignoring case),
    then names containing it (for a name of 3 characters or more)."""
    if not isinstance(name, str) or not name:
        return []
    lower = {v.lower(): v for v in valid}
    close = [lower[m] for m in difflib.get_close_matches(name.lower(), list(lower), n, 0.6)]
    if len(name) >= 3:
        close += [v for v in valid if name.lower() in v.lower() and v not in close]
    return close[:n]


def listing(title: str, groups: Mapping[str, Sequence[str]], width: int = 100) -> str:
    """``title: a, b, c`` (one group ``""``), or ``title, by group:`` and one indented line per
    group, wrapped at ``width``; a group of more than :data:`SHOWN` names shows its first ones
    and how many more."""
    def names(ns: Sequence[str]) -> str:
        if len(ns) <= SHOWN:
            return ", ".join(ns)
        return ", ".join(ns[: SHOWN // 2]) + f", ... and {len(ns) - SHOWN // 2} more"

    def fill(text: str, indent: str, hanging: str) -> str:
        return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=hanging,
                             break_long_words=False, break_on_hyphens=False)

    if list(groups) == [""]:
        return fill(f"{title} ({len(groups[''])}): {names(groups[''])}"
                    if len(groups[""]) > SHOWN else f"{title}: {names(groups[''])}", "", "  ")
    lines = [f"{title}, by group:"]
    lines += [fill(f"{g} ({len(ns)}): {names(ns)}", "  ", "      ") for g, ns in groups.items()]
    return "\n".join(lines)


class BadInputError(FuncbwdError, TypeError):
    """Wrong shape, dtype, argument type or batch size."""


class NotApplicableError(FuncbwdError):
    """A scenario or strategy cannot apply to this op (e.g. no jvp rule); carries the reason."""


def plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def grouped(valid: object) -> bool:
    """Is ``valid`` names by group (a mapping group -> list or tuple of names)? Any other mapping
    (e.g. name -> setting) stands for its keys."""
    return isinstance(valid, Mapping) and all(isinstance(v, (list, tuple)) for v in valid.values())


def _flat(valid: Iterable[str] | Mapping[str, Iterable[str]]) -> list[str]:
    if grouped(valid):
        return [n for ns in valid.values() for n in ns]
    return list(valid)


def check_name(kind: str, name: object, valid: Iterable[str] | Mapping[str, Iterable[str]]) -> str:
    """``name`` if it is one of ``valid`` (names, or group -> names), else
    :class:`UnknownNameError`."""
    if not grouped(valid):
        valid = list(valid)
    if not isinstance(name, str) or name not in _flat(valid):
        raise UnknownNameError(kind, name, valid)
    return name


def parse_names(kind: str, text: str | Iterable[str] | None,
                valid: Iterable[str] | Mapping[str, Iterable[str]]) -> list[str]:
    """Parse 'a,b' (or a list); None or 'all' means every valid name (in ``valid``'s order).
    ``valid`` may be grouped (group -> names): an unknown name's error then lists them by group."""
    if not grouped(valid):
        valid = list(valid)
    if text is None or text == "all":
        return _flat(valid)
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    if not names:
        groups = ({g: sorted(ns) for g, ns in valid.items()} if grouped(valid)
                  else {"": sorted(valid)})
        raise FuncbwdError(f"no {kind} given\n" + listing(f"valid {plural(kind)}", groups))
    return [check_name(kind, n, valid) for n in names]


def first_line(msg: str, limit: int = 240) -> str:
    """The first line of an error message, cut to ``limit`` characters (for tables and records)."""
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ------------------------------------------------------------------------------ the in-place mode's
class InplaceModeError(FuncbwdError):
    """The in-place mode met code it cannot run (e.g. a batched-mask selection in a reduction)."""


class StateWriteError(FuncbwdError):
    """Under vmap, a write into a tensor the caller owns, shared by every batch entry, with the
    default ``state_writes="refuse"`` (see the module docstring). Nothing of the call is left."""


class TransformRefusedError(FuncbwdError):
    """Code torch.func cannot run as written under the transforms active at its line, where no
    retry stage can help (e.g. ``torch.inference_mode()`` inside a grad transform): raised at
    once, naming the line and what to write instead."""


class LoopInstead(Exception):
    """A shared write under ``state_writes="loop"``: the call runs as the per-sample loop."""


class NeedsMode(Exception):
    """The plain attempt met a shared write under ``state_writes="discard"``: the in-place
    mode's stage runs the call."""


#: what torch raises for in-place code under torch.func (and what the tool's own mode raises
#: inside an entry of the per-sample loop): the errors worth a retry, and why each is
_FIXABLE = {
    "is not possible because there exists a Tensor": "unbatched.inplace_(batched)",
    "would mutate a captured Tensor": "a grad transform: a caller's tensor written",
    "operators that can support dynamic shape": "t[mask] = v with a batched mask",
    "operators that can output dynamic shape": "x[mask] (nonzero) with a batched mask",
    "calling .item() on a Tensor": "a per-sample value read",
    "data-dependent control flow": "a branch on a per-sample value",
    "must override the setup_context": "an old-style autograd.Function",
    "does not have vmap support": "a custom Function without a vmap rule",
    "is a view and is being modified inplace": "unbind/split views written",
    "its base or another view of its base has been modified inplace": "a Function's view written",
    "do not allow the output views to be modified inplace": "multi-output views written",
    "doesn't match the broadcast shape": "an unbatched out= / in-place target",
    "We could not generate a fallback": "an op with no batching rule and no fallback",
    "doesn't work on out= or view ops": "an out= op into an unbatched tensor",
    "aten::nonzero": "torch.where(c) / nonzero of a per-sample mask",
    "modified by an inplace operation": "a value autograd saved, overwritten",
    "running_mean or running_var, which will be updated in place": "batch_norm's running stats",
    "Cannot access data pointer": "a per-sample value read in C++",
    "_assert_async": "an assertion on a per-sample value",
    "accessing `data` under vmap transform is not allowed": "`.data` under vmap",
    "attempting to call Tensor.requires_grad_()": "torch.autograd inside the call: per sample",
    "vmap over torch.allclose isn't supported": "a per-sample comparison: per sample",
    "ambiguous": "a branch on a per-sample value",
}


def fixable(error: BaseException) -> bool:
    """True for an error the retry stages exist for (or the mode's own refusal inside an entry of
    the per-sample loop: a vmap there runs its own retries)."""
    if isinstance(error, InplaceModeError) or getattr(error, "funcbwd_per_entry", False):
        return True
    from funcbwd.internals.messages import forward_ad_missing  # the eager stage's (funcbwd.eager)
    if forward_ad_missing(error):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(m in text for m in _FIXABLE)


def user_line_of(error: BaseException) -> str:
    """The innermost frame of the user's code in ``error``'s traceback (where it was raised from,
    as :func:`user_line` says it), or "?"."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if "/torch/" not in frame.filename and "/funcbwd/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def user_line() -> str:
    """The innermost frame of the user's code (not torch's, not funcbwd's): ``file:line``."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if "/torch/" not in frame.filename and "/funcbwd/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def user_frame(e: BaseException | None, fn: Any) -> str:
    """``file:line`` of the innermost frame of the user's code in ``e``'s traceback (not torch's,
    not funcbwd's); where it has none (or no ``e``), where ``fn`` is defined."""
    import inspect

    for frame in reversed(traceback.extract_tb(e.__traceback__) if e is not None else []):
        if "/torch/" not in frame.filename and "/funcbwd/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"
