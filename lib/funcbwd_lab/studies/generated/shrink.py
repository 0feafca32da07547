"""Minimal reproducers: hypothesis shrinks a generated program that shows one class of bug.

A :class:`Target` is one class of issue 37 seen through the harness: the grammar feature its
programs need, the cells to check, and ``seen(program, record)``: does this cell show it.
:func:`shrink` runs hypothesis (derandomized, no database, generate then shrink) with "no cell
shows it" as the property; the program hypothesis reports is the smallest it found, and is
what docs/generated.md quotes after a hand clean-up. Programs have the target's feature and
no other (beyond the basic statements), so each reproducer shows one class.

    python -m funcbwd_lab.studies.generated.shrink [TARGET ...]   # a few seconds to a minute each

A hang poisons the process (:func:`funcbwd.harness.check`): targets that hang are not shrunk here
(the seeded subset's first such program is the reproducer).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Callable

from funcbwd.errors import check_name
from funcbwd_lab.studies.generated.grammar import BASIC, FEATURES, programs
from funcbwd_lab.studies.generated.program import Program

FUNCTIONALIZED = (("jacrev", "functionalized"), ("vmap_grad", "functionalized"),
                  ("vmap", "functionalized"))


def _wrong(p: Program, r: dict) -> bool:
    return r["verdict"] == "wrong"


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    bug: str  # issue 37's words
    feature: str
    cells: tuple[tuple[str, str], ...]
    seen: Callable[[Program, dict], bool] = _wrong


TARGETS = {t.name: t for t in [
    Target("no_grad_inside", "torch.no_grad() inside a decorated function is dropped",
           "grad_mode", FUNCTIONALIZED),
    Target("captured_rebound", "captured tensors, floats, ints and dict entries rebound between "
           "calls are baked into the cached graph", "captured", FUNCTIONALIZED,
           lambda p, r: r["verdict"] == "wrong" and r["call"] == 2),
    Target("caller_state", "a per-sample write into caller-owned state, read back", "buffer",
           (("vmap", "vmap"), ("vmap", "allow_inplace"))),
    Target("retry_repeats", "a retry repeats the writes torch's failed attempt made", "buffer",
           (("vmap", "vmap"),),
           lambda p, r: r["verdict"] == "wrong" and "buf.mul_(0.5).add_(" in p.source),
    Target("module_buffers", "a module's buffers (running statistics, a queue and its pointer)",
           "module", (("vmap", "vmap"), ("vmap", "allow_inplace"))),
    Target("custom_function", "a setup_context Function: torch's error, no word from funcbwd",
           "function_new", (("vmap_grad", "vmap"), ("vmap_grad", "allow_inplace"),
                            ("vmap_grad", "functionalized")),
           lambda p, r: r["verdict"] == "unclear_error"),
    Target("random_state", "a call leaves the random state changed", "random",
           (("vmap", "functionalized"), ("vmap", "vmap"), ("jacrev", "functionalized")),
           lambda p, r: r["verdict"] == "wrong" and "random state" in r["detail"]),
    Target("inference_mode", "under torch.inference_mode() the tool loses or refuses",
           "around", (("vmap", "vmap"), ("vmap", "allow_inplace"), ("jacrev", "allow_inplace"),
                      ("vmap", "functionalized")),
           lambda p, r: (r["verdict"] in ("wrong", "regression")
                         and p.around == "torch.inference_mode()")),
    Target("detach_writes", "writes under .data, .detach() or after detach_() differentiated",
           "detach", FUNCTIONALIZED),
    Target("requires_grad_read", "`if y.requires_grad:` fixed at trace time",
           "requires_grad_read", FUNCTIONALIZED),
    Target("value_read", "a branch on a per-sample value", "value_read",
           (("vmap", "vmap"), ("vmap", "allow_inplace"), ("vmap", "functionalized"),
            ("jacrev", "functionalized"))),
    Target("closure_rebuilt", "a closure built anew over another value", "closure",
           (("vmap", "vmap"), ("vmap", "functionalized"), ("jacrev", "functionalized")),
           lambda p, r: r["verdict"] == "wrong" and r["call"] == 2),
    Target("threads", "two threads calling the same function", "threads",
           (("vmap_jacrev", "allow_inplace"), ("vmap_jacrev", "vmap"), ("vmap", "functionalized")),
           lambda p, r: r["verdict"] in ("wrong", "hang", "unclear_error", "regression")
           and "threads" in p.features),
    Target("regression", "raises where plain torch.func passes: the decorator's second call "
           "under hessian", "index_write", (("hessian", "functionalized"),),
           lambda p, r: r["verdict"] == "regression"),
    Target("escaped_into_state", "a per-sample value stored into a caller's dict", "buffer",
           (("vmap", "vmap"), ("vmap", "allow_inplace"), ("jacrev", "functionalized")),
           lambda p, r: r["verdict"] == "wrong" and "cache" in r["detail"]),
]}


def shrink(target: Target, max_examples: int = 300, timeout: float = 10.0
           ) -> tuple[Program, dict] | None:
    """The smallest program hypothesis finds whose cells show ``target`` (None if none does in
    ``max_examples`` programs)."""
    from hypothesis import HealthCheck, Phase, given, settings

    found: list[tuple[Program, dict]] = []
    others = tuple(f for f in FEATURES if f not in BASIC and f != target.feature)

    @settings(max_examples=max_examples, database=None, derandomize=True, deadline=None,
              phases=[Phase.generate, Phase.shrink], report_multiple_bugs=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(programs(require=(target.feature,), exclude=others))
    def nothing_shows_it(program: Program) -> None:
        for transform, entry in target.cells:
            r = {"transform": transform, "entry": entry,
                 **program.check(transform, entry, timeout).record()}
            if target.seen(program, r):
                found.append((program, r))
                raise AssertionError(target.name)

    try:
        nothing_shows_it()
    except Exception:  # noqa: BLE001 - the failure (or hypothesis's FlakyFailure: a race)
        if not found:
            raise
        return found[-1]
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.generated.shrink",
                                description="minimal generated programs, one per class of bug "
                                            "(seconds to a minute each)")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help=f"default all: {', '.join(TARGETS)}")
    p.add_argument("--max-examples", type=int, default=300)
    args = p.parse_args(argv)
    for name in args.targets:
        check_name("target", name, TARGETS)
    args.targets = args.targets or list(TARGETS)
    import warnings
    warnings.simplefilter("ignore")
    for name in args.targets:
        print(f"shrinking {name} ...", file=sys.stderr, flush=True)
        found: Any = shrink(TARGETS[name], args.max_examples)
        print(f"# ===== {name}: {TARGETS[name].bug}")
        if found is None:
            print(f"# not seen in {args.max_examples} programs\n")
            continue
        program, r = found
        print(f"# {r['transform']} {r['entry']}: {r['verdict']} at call {r['call']} (plain "
              f"torch.func: {r['plain'] or 'not run'}): {r['detail'][:150]}")
        print(program.reproducer(r["transform"], r["entry"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
