"""What the in-place mode costs on the corpus: ``funcbwd.vmap`` against a hand rewrite.

``python -m funcbwd_lab.studies.yourcode.cost [--batches 64 512] [--out PATH]``

For every case and transform (``vmap``, ``vmap_vjp``, ``vmap_jacrev``) at each batch size, these
series are timed interleaved in one run (:func:`funcbwd_lab.studies.bench.timing.run_interleaved`, one
torch thread, thread CPU time, medians of ``ROUNDS`` rounds):

* ``mode``: ``funcbwd.vmap`` of the code as written, after one warm-up call (which found what
  works and remembered it, as a user's second call does);
* ``rewrite``: ``torch.func.vmap`` of the case's hand-written out-of-place rewrite (the floor a
  user reaches by rewriting the code);
* ``floor``: the rewrite under a ``TorchFunctionMode`` that only calls each op: what any
  mechanism that sees every op from Python pays at least (the mode is one);
* ``plain``: ``torch.func.vmap`` of the code as written, where that works (code that needs no fix);
* ``decorator``, ``lazy``, ``batched`` (functorch#1025's options): the corpus's other mechanisms,
  where plain fails and the saved corpus run (``--corpus``) found them right.

Ratios per cell: ``mode / rewrite`` where plain fails (what fixing costs; the target's basis is
vmap(vjp) and vmap(jacrev), as the issue states it), ``floor / rewrite`` (the part of it no
Python per-op mechanism avoids), ``mode / plain`` where plain works (what the drop-in costs code
that needs no fix). Memory: the peak CPU bytes one call holds above what was held before it
(:func:`funcbwd.internals.peak_cpu_bytes`), ``mode / rewrite``; where plain works also
``mode / plain`` (the drop-in's own) and ``plain / rewrite`` (what the code as written holds
beyond a rewrite, before any fix). Targets: medians <= 1.2x, <= 1.1x
and memory <= 1.1x. Output defaults to ``out/yourcode-cost.json`` (untracked); progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals
from funcbwd_lab import command
from funcbwd.errors import BadInputError
from funcbwd_lab.progress import Progress
from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.yourcode import transforms as T
from funcbwd_lab.studies.yourcode.case import Case, identity

DEFAULT_OUT = Path("out/yourcode-cost.json")
TRANSFORMS = ("vmap", "vmap_vjp", "vmap_jacrev")
TARGET_BASIS = ("vmap_vjp", "vmap_jacrev")  # the cost target's transforms (the issue's)
ROUNDS = 7
FIX_TARGET, NOFIX_TARGET, MEMORY_TARGET = 1.2, 1.1, 1.1


class _Floor(TorchFunctionMode):
    """Calls each op and nothing else: the least a Python per-op mechanism costs."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _call(name: str, f, case: Case, args: tuple, cts, vmap) -> Any:
    return T.transformed(name, f, case, args, cts, vmap=vmap)


#: the other mechanisms of the corpus (:mod:`funcbwd_lab.studies.yourcode.mechanisms`), timed where the
#: saved corpus run says they give the right answer: (the function, the context around a call)
OTHERS = ("decorator", "lazy", "batched")


def _other_arm(mechanism: str, name: str, case: Case, args: tuple, cts) -> tuple:
    from funcbwd_lab.studies.yourcode import mechanisms as M

    if mechanism == "decorator":
        f = case.fn(M._decorate)
        return (lambda: _call(name, f, case, args, cts, None)), warnings.catch_warnings
    f = case.fn(identity)
    return (lambda: _call(name, f, case, args, cts, None)), {"lazy": M._lazy,
                                                             "batched": M._batched}[mechanism]


def cell(case: Case, name: str, batch: int, works: frozenset = frozenset()) -> dict[str, Any]:
    """One case x transform x batch; ``works``: the mechanisms of :data:`OTHERS` the saved
    corpus run found right on it (timed too)."""
    from funcbwd.transforms import vmap as fvmap

    args = T.batch_args(case, batch)
    cts = T.cotangents(case, T.output_of(case, case.rewrite), batch)
    f = case.fn(identity)
    row: dict[str, Any] = {"case": case.name, "transform": name, "batch": batch}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _call(name, f, case, args, cts, None)
            row["plain_works"] = True
        except Exception:  # noqa: BLE001 - needs the fix
            row["plain_works"] = False
        try:
            _call(name, f, case, args, cts, fvmap)  # the warm-up: finds and remembers what works
        except Exception as e:  # noqa: BLE001 - the mode fails here: nothing to time
            row["error"] = f"{type(e).__name__}: {str(e)[:120]}"
            return row
        arms = {"mode": lambda: _call(name, f, case, args, cts, fvmap),
                "rewrite": lambda: _call(name, case.rewrite, case, args, cts, None)}
        if row["plain_works"]:
            arms["plain"] = lambda: _call(name, f, case, args, cts, None)
        else:
            arms["floor"] = arms["rewrite"]
        contexts = {"floor": _Floor}
        if not row["plain_works"]:
            for m in OTHERS:
                if m in works:
                    arms[m], contexts[m] = _other_arm(m, name, case, args, cts)
        series = [timing.Timed({"arm": a}, fn, contexts.get(a, warnings.catch_warnings), ROUNDS)
                  for a, fn in arms.items()]
        with timing.one_torch_thread():
            timing.run_interleaved(series, "thread_cpu", target_s=0.02, max_number=50)
        for s in series:  # one profiled call per arm that ran
            if not s.error and s.key["arm"] != "floor":
                with s.context():
                    row[f"{s.key['arm']}_bytes"] = internals.peak_cpu_bytes(s.fn)
    for s in series:
        row[s.key["arm"]] = timing.median(s.samples) if not s.error else None
        row[f"{s.key['arm']}_noise"] = timing.rel_iqr(s.samples)
    return row


def _ratios(rows: list[dict], num: str, den: str, fixes: bool = True) -> list[float]:
    return [r[num] / r[den] for r in rows
            if bool(r.get("plain_works")) != fixes and r.get(num) and r.get(den)]


def _stats(xs: list[float], target: float | None = None) -> dict[str, Any]:
    out = {"n": len(xs), "median": timing.median(xs) if xs else None,
           "worst": max(xs, default=None)}
    if target is not None:
        out["target"] = target
    return out


def summarize(rows: list[dict]) -> dict[str, Any]:
    """Medians and worst cases: where plain fails over the target's transforms (``fix``), per
    transform and batch, the floor, memory; where plain works (``nofix``)."""
    basis = [r for r in rows if r["transform"] in TARGET_BASIS]
    groups = {f"{t} B={b}": [r for r in rows if r["transform"] == t and r["batch"] == b]
              for t in TRANSFORMS for b in sorted({r["batch"] for r in rows})}
    return {"fix": _stats(_ratios(basis, "mode", "rewrite"), FIX_TARGET),
            "floor": _stats(_ratios(basis, "floor", "rewrite")),
            "over_floor": _stats(_ratios(basis, "mode", "floor")),
            "memory": _stats(_ratios(basis, "mode_bytes", "rewrite_bytes"), MEMORY_TARGET),
            "by_group": {g: _stats(_ratios(rs, "mode", "rewrite")) for g, rs in groups.items()},
            "mechanisms": {m: {"time": _stats(_ratios(basis, m, "rewrite")),
                               "memory": _stats(_ratios(basis, f"{m}_bytes", "rewrite_bytes"))}
                           for m in ("mode", *OTHERS)},
            "nofix": _stats(_ratios(rows, "mode", "plain", fixes=False), NOFIX_TARGET),
            "nofix_memory": _stats(_ratios(rows, "mode_bytes", "plain_bytes", fixes=False)),
            "code_memory": _stats(_ratios(rows, "plain_bytes", "rewrite_bytes", fixes=False)),
            "target_basis": list(TARGET_BASIS),
            "not_timed": sum(1 for r in rows if "error" in r)}


def mechanism_table(summary: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Markdown rows: each mechanism's time and peak memory against the hand rewrite, medians
    over the cells it fixes (of the target's transforms); ``labels`` names them."""
    out = ["| mechanism | cells it fixes | time | worst | peak memory | worst |",
           "|---|---|---|---|---|---|"]
    for name, r in summary["mechanisms"].items():
        t, m = r["time"], r["memory"]
        if not t["n"]:
            out.append(f"| {labels.get(name, name)} | 0 | not measured | | | |")
            continue
        out.append(f"| {labels.get(name, name)} | {t['n']} | {t['median']:.2f}x | "
                   f"{t['worst']:.2f}x | {m['median']:.2f}x | {m['worst']:.2f}x |")
    return out


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab.studies.yourcode.cases import CASES

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.yourcode.cost",
                                description="Time funcbwd.vmap against hand rewrites on the corpus.")
    p.add_argument("--cases", nargs="*", default=None)
    p.add_argument("--batches", nargs="*", type=int, default=[64, 512])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--corpus", type=Path, default=Path("data/yourcode-corpus.json"),
                   help="the corpus run whose verdicts say where the other mechanisms are timed")
    p.add_argument("--quiet", action="store_true")
    command.add_force(p)
    ns = p.parse_args(argv)
    names = ns.cases or list(CASES)
    bad = [n for n in names if n not in CASES]
    if bad or not names or not ns.batches:
        print(f"nothing to time: unknown {', '.join(bad) or 'empty selection'}", file=sys.stderr)
        return 2
    try:
        command.check_out(ns.out, ns.force)
    except BadInputError as e:
        print(f"python -m funcbwd_lab.studies.yourcode.cost: error: {e}", file=sys.stderr)
        return 2
    cells = [(n, t, b) for n in names for t in TRANSFORMS for b in ns.batches
             if t not in CASES[n].undefined]
    saved = json.loads(ns.corpus.read_text()) if ns.corpus.exists() else {"cells": []}
    works: dict[tuple, set] = {}
    for c in saved["cells"]:
        if c["verdict"] == "ok":
            works.setdefault((c["case"], c["transform"]), set()).add(c["mechanism"])
    rows = []
    with Progress("cost", len(cells), enabled=not ns.quiet) as progress:
        for n, t, b in cells:
            progress.doing(f"{n} {t} B={b}")
            rows.append(cell(CASES[n], t, b, frozenset(works.get((n, t), ()))))
            progress.advance(failed="error" in rows[-1])
    data = {"torch": torch.__version__, "python": platform.python_version(),
            "basis": f"thread CPU time, one torch thread, median of {ROUNDS} interleaved rounds; "
                     "after one warm-up call", "rows": rows, "summary": summarize(rows)}
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(data, indent=1) + "\n")
    s = data["summary"]
    print(f"fix: median {s['fix']['median']:.2f}x a hand rewrite over {s['fix']['n']} cells "
          f"(target <= {FIX_TARGET}x; floor of a per-op mode {s['floor']['median']:.2f}x); "
          f"memory {s['memory']['median']:.2f}x (target <= {MEMORY_TARGET}x); no-fix: median "
          f"{s['nofix']['median']:.2f}x plain over {s['nofix']['n']} cells (target <= "
          f"{NOFIX_TARGET}x); written to {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
