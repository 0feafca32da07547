"""One harness: a function under a transform and an entry point, against the per-sample loop.

The contract it checks (docs/generated.md): for every call under ``funcbwd.vmap``,
``funcbwd.allow_inplace`` and ``funcbwd.functionalized``, the outputs, the gradients, the
caller's objects afterwards and every device's random state are what a per-sample loop of the
function as written gives, or the call raises one error naming the cause and the user's
file:line and leaves the caller's state as it was. ::

    from funcbwd import harness
    r = harness.check(f, [harness.Call((x,)), harness.Call((x2,), before=rebind)],
                      "vmap_grad", "functionalized", state={"buffer": buf, "model": model})
    r.verdict, r.detail     # ("wrong", "output 0: max abs error 6 > atol=1e-05 ...")

The transforms, the entry points and the reference: :mod:`funcbwd.harness.transforms`; the
caller's objects and the random state: :mod:`funcbwd.harness.state`. Each call is checked from
the same state (objects and random state) for the loop and for the transform; call ``k+1``
starts from the state the loop left after call ``k``. The arguments' tensors are part of the
caller's state (a write into an argument is compared too).

**Verdicts** (the first call that does not pass decides):

* ``pass``: outputs, gradients, the caller's objects and every device's random state agree;
* ``wrong``: one of them differs (``detail`` says which), or a call raised and left the caller's
  state changed (writes land all or none);
* ``refused``: raised, its message (or a note) names ``file:line`` of the user's file, and the
  state is as it was; ``unclear_error``: raised, naming no line of the user's file;
* ``regression``: raised where plain torch.func passes;
* ``no_reference``: the per-sample loop itself raises (nothing to compare with);
* ``hang``: no answer within ``timeout`` seconds. The call runs in a thread of its own, which
  stays blocked, holding whatever it holds: this process can no longer be trusted, so every
  later :func:`check` raises :class:`Poisoned` (:func:`hung` says what hung).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import re
import threading
import warnings
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from funcbwd.compare import ToleranceFor, compare
from funcbwd.errors import BadInputError, check_name, first_line
from funcbwd.harness.state import (RANDOM_SOURCES, RandomSource, Snapshot, random_difference,
                                   random_state, set_random_state)
from funcbwd.harness.transforms import (ENTRIES, TRANSFORMS, applies, dims_of, entry_point, loop,
                                        transformed)

VERDICTS = ("pass", "wrong", "refused", "unclear_error", "regression", "no_reference", "hang")
DEFAULT_TIMEOUT_S = 60.0

__all__ = ["Call", "Result", "Poisoned", "check", "applies", "hung", "TRANSFORMS", "ENTRIES",
           "VERDICTS", "Snapshot", "random_state", "set_random_state", "RANDOM_SOURCES",
           "RandomSource"]


@dataclasses.dataclass(frozen=True)
class Call:
    """One call: its batched ``args``; ``before()`` runs first (it must be idempotent: it runs
    before the loop and again before the transform, e.g. rebinding a global the function
    captures); ``fn`` replaces the checked function for this call (a closure built anew)."""

    args: tuple
    before: Callable[[], Any] | None = None
    fn: Callable[..., Any] | None = None


@dataclasses.dataclass(frozen=True)
class Result:
    """The ``verdict`` of the first call that did not pass (``call``: 1-based; the last call
    when all passed); ``detail``: what differed, or the error's first line; ``plain``: plain
    torch.func's verdict on that call when it was needed (an entry that raised or was wrong),
    else ""; ``warnings``: what the entry warned on that call, one line each."""

    verdict: str
    call: int
    detail: str = ""
    plain: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Within the contract: the loop's answer, or a clear refusal."""
        return self.verdict in ("pass", "refused")

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Poisoned(RuntimeError):
    """An earlier check hung in this process; its thread still holds what it held."""


_HUNG: list[str] = []


def hung() -> str:
    """What hung in this process ("" when nothing did)."""
    return _HUNG[0] if _HUNG else ""


# ------------------------------------------------------------------------------ running
def _in_thread(thunk: Callable[[], Any], timeout: float, copies: int = 1,
               record: bool = False) -> tuple[list, BaseException | None, bool, list[str]]:
    """``thunk()`` in ``copies`` threads started together: (their values, the first error,
    hung?, the warnings, when ``record``)."""
    values: list = [None] * copies
    errors: list = []
    seen: list[str] = []
    gate = threading.Barrier(copies)

    def run(i: int) -> None:
        try:
            gate.wait()
            if record:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    values[i] = thunk()
                seen.extend(f"{w.category.__name__}: {first_line(str(w.message), 160)}"
                            for w in caught)
            else:
                values[i] = thunk()
        except BaseException as e:  # noqa: BLE001 - the call's error is its verdict
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True, name="funcbwd-harness")
               for i in range(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return values, (errors[0] if errors else None), any(t.is_alive() for t in threads), seen


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {first_line(str(e), 200)}"


def _names_user_line(e: BaseException, user_file: str | None) -> bool:
    if not user_file:
        return False
    text = "\n".join([str(e), *getattr(e, "__notes__", [])])
    base = re.escape(os.path.basename(user_file))
    return re.search(rf'{base}(:|", line )\d+', text) is not None


def _user_file(fn: Callable) -> str | None:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None and isinstance(fn, type):
        code = getattr(getattr(fn, "forward", None), "__code__", None)
    return None if code is None else code.co_filename


# ------------------------------------------------------------------------------ check
@dataclasses.dataclass
class _Setup:
    transform: str
    dims: tuple
    argnum: int
    randomness: str
    around: Callable[[], Any]
    state_writes: str | None
    timeout: float
    tol: ToleranceFor | None

    def loop(self, f: Callable, args: tuple, cts: Any, state: dict) -> Any:
        with self.around():
            return loop(self.transform, f, args, self.dims, self.argnum, cts, self.randomness,
                        state, self.state_writes == "discard")

    def run(self, entry: str, f: Callable, args: tuple, cts: Any) -> Any:
        vmap, context, _ = entry_point(entry, self.state_writes if entry != "torch" else None)
        with self.around(), context():
            return transformed(self.transform, f, args, self.dims, self.argnum, cts,
                               self.randomness, vmap)

    def cotangents(self, f: Callable, args: tuple, seed: int) -> Any:
        """Cotangents for ``vmap_vjp``: shaped as entry 0's outputs, drawn from ``seed``."""
        if self.transform != "vmap_vjp":
            return None
        size = next(a.shape[d] for a, d in zip(args, self.dims) if d is not None)
        one = tuple(a.select(d, 0) if d is not None else a for a, d in zip(args, self.dims))
        with self.around(), torch.no_grad():
            out = f(*one)
        gen = torch.Generator().manual_seed(seed)
        flat, spec = tree_flatten(out)
        return tree_unflatten([torch.randn((size, *o.shape), generator=gen, dtype=o.dtype)
                               for o in flat], spec)


def _differences(got: Any, want: Any, ref_after: Snapshot, after: Snapshot,
                 ref_rng: dict, rng: dict, tol: ToleranceFor | None) -> str:
    c = compare(tree_flatten(got)[0], tree_flatten(want)[0], tol)
    return (("" if c.ok else c.detail) or ref_after.difference(after, tol)
            or random_difference(ref_rng, rng))


def check(fn: Callable[..., Any], calls: Sequence[Call], transform: str, entry: str, *,
          state: Mapping[str, Any] | Sequence[Any] = (), in_dims: Any = 0, argnum: int = 0,
          randomness: str = "error", around: Callable[[], Any] | None = None, threads: int = 1,
          state_writes: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, seed: int = 0,
          tol: ToleranceFor | None = None, user_file: str | None = None) -> Result:
    """``fn`` under ``transform`` through ``entry``, call by call, against the per-sample loop
    (see the module docstring). ``state``: the caller's objects (by name, or a sequence);
    ``around()``: a context the caller makes the call in (``torch.no_grad``); ``threads``: the
    transformed call made by that many threads at once (each compared; the caller's state is
    then not compared); ``seed``: the random state both start from (the process's random state
    is put back after); ``user_file``: the file a refusal must name (default ``fn``'s)."""
    check_name("transform", transform, TRANSFORMS)
    check_name("entry point", entry, ENTRIES)
    if not applies(transform, entry):
        raise BadInputError(f"funcbwd.vmap has no vmap to replace in {transform}")
    if randomness not in ("error", "same"):
        raise BadInputError(f"randomness must be 'error' or 'same' (no per-sample loop draws "
                            f"what vmap's {randomness!r} draws), got {randomness!r}")
    if not calls or (threads > 1 and state):
        raise BadInputError("check needs at least one call, and no state with threads > 1")
    if _HUNG:
        raise Poisoned(f"an earlier check hung in this process: {_HUNG[0]}")
    _, _, decorate = entry_point(entry, state_writes)
    named = dict(state) if isinstance(state, Mapping) else {f"state[{i}]": o
                                                             for i, o in enumerate(state)}
    setup = _Setup(transform, dims_of(in_dims, calls[0].args), argnum, randomness,
                   around or contextlib.nullcontext, state_writes, timeout, tol)
    wrapped: dict[int, tuple[Callable, Callable]] = {}
    saved = random_state()
    torch.manual_seed(seed)
    try:
        for k, call in enumerate(calls, 1):
            f = call.fn or fn
            if id(f) not in wrapped:  # f kept alive with it: ids stay unique
                wrapped[id(f)] = (f, decorate(f))
            g = wrapped[id(f)][1]
            result = _check_call(setup, k, call, f, g, entry, named, seed + k,
                                 user_file or _user_file(f), threads)
            if result is not None:
                return result
        return Result("pass", len(calls))
    finally:
        if not _HUNG:
            set_random_state(saved)


def _check_call(setup: _Setup, k: int, call: Call, f: Callable, g: Callable, entry: str,
                named: dict, seed: int, user_file: str | None, threads: int) -> Result | None:
    """One call: None when it passed (the state is then the loop's, for the next call)."""
    objects = {**named, **{f"args[{i}]": a for i, a in enumerate(call.args)
                           if isinstance(a, torch.Tensor)}}
    if call.before is not None:
        call.before()
    start, rng = Snapshot(objects), random_state()
    (cts,), error, stuck, _ = _in_thread(lambda: setup.cotangents(f, call.args, seed),
                                         setup.timeout)
    start.restore()
    set_random_state(rng)
    if error is None and not stuck:
        (want,), error, stuck, _ = _in_thread(lambda: setup.loop(f, call.args, cts, objects),
                                              setup.timeout)
    if stuck:
        _HUNG.append(f"the per-sample loop of call {k}")
        return Result("hang", k, f"the per-sample loop did not return in {setup.timeout:g} s")
    if error is not None:
        return Result("no_reference", k, f"the per-sample loop raised {_error_text(error)}")
    ref_after, ref_rng = Snapshot(objects), random_state()

    def attempt(which: str, fn: Callable, copies: int = 1):
        start.restore()
        set_random_state(rng)
        return _in_thread(lambda: setup.run(which, fn, call.args, cts), setup.timeout, copies,
                          record=copies == 1)

    gots, error, stuck, seen = attempt(entry, g, threads)
    if stuck:
        _HUNG.append(f"{entry} {setup.transform}, call {k}")
        return Result("hang", k, f"no answer in {setup.timeout:g} s", warnings=tuple(seen))
    after, rng_after = Snapshot(objects), random_state()
    if error is None:
        diff = next((d for got in gots if (d := (
            _differences(got, want, ref_after, after, ref_rng, rng_after, setup.tol)
            if threads == 1 else compare(tree_flatten(got)[0], tree_flatten(want)[0],
                                         setup.tol).detail))), "")
        if not diff:
            ref_after.restore()
            set_random_state(ref_rng)
            return None
        verdict, detail = "wrong", diff
    else:
        changed = start.difference(after, setup.tol) or random_difference(rng, rng_after)
        if changed:
            verdict, detail = "wrong", f"raised and changed {changed}: {_error_text(error)}"
        else:
            verdict = "refused" if _names_user_line(error, user_file) else "unclear_error"
            detail = _error_text(error)
    plain = ""
    if entry != "torch":
        ps, p_error, p_stuck, _ = attempt("torch", f, threads)
        p_after, p_rng = Snapshot(objects), random_state()
        plain = ("hang" if p_stuck else "raised" if p_error is not None else
                 "wrong" if any(_differences(p, want, ref_after, p_after, ref_rng, p_rng,
                                             setup.tol) if threads == 1 else
                                compare(tree_flatten(p)[0], tree_flatten(want)[0],
                                        setup.tol).detail for p in ps) else "pass")
        if p_stuck:
            _HUNG.append(f"plain torch.func {setup.transform}, call {k}")
        if plain == "pass" and error is not None:
            verdict = "regression"
    return Result(verdict, k, detail, plain, tuple(seen))
