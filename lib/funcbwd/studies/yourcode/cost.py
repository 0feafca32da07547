"""What the in-place mode costs on the corpus: ``funcbwd.vmap`` against a hand rewrite.

``python -m funcbwd.studies.yourcode.cost [--batches 64 512] [--out PATH]``

For every case and transform (``vmap``, ``vmap_vjp``) at each batch size, three series are timed
interleaved in one run (:func:`funcbwd.studies.bench.timing.run_interleaved`, one torch thread,
thread CPU time, medians of ``ROUNDS`` rounds):

* ``mode``: ``funcbwd.vmap`` of the code as written, after one warm-up call (which found what
  works and remembered it, as a user's second call does);
* ``rewrite``: ``torch.func.vmap`` of the case's hand-written out-of-place rewrite (the floor a
  user reaches by rewriting the code);
* ``plain``: ``torch.func.vmap`` of the code as written, where that works (code that needs no fix).

Two ratios per cell: ``mode / rewrite`` where plain fails (what fixing costs) and ``mode / plain``
where plain works (what the drop-in costs code that needs no fix). Targets: medians <= 1.2x and
<= 1.1x. Memory is not measured. Output defaults to ``out/yourcode-cost.json`` (untracked);
progress on stderr.
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

from funcbwd import command
from funcbwd.errors import BadInputError
from funcbwd.progress import Progress
from funcbwd.studies.bench import timing
from funcbwd.studies.yourcode import transforms as T
from funcbwd.studies.yourcode.case import Case, identity

DEFAULT_OUT = Path("out/yourcode-cost.json")
TRANSFORMS = ("vmap", "vmap_vjp")
ROUNDS = 7
FIX_TARGET, NOFIX_TARGET = 1.2, 1.1


def _call(name: str, f, case: Case, args: tuple, cts, vmap) -> Any:
    return T.transformed(name, f, case, args, cts, vmap=vmap)


def cell(case: Case, name: str, batch: int) -> dict[str, Any]:
    from funcbwd.tool.vmap import vmap as fvmap

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
        series = [timing.Timed({"arm": a}, fn, lambda: warnings.catch_warnings(), ROUNDS)
                  for a, fn in arms.items()]
        with timing.one_torch_thread():
            timing.run_interleaved(series, "thread_cpu", target_s=0.02, max_number=50)
    for s in series:
        row[s.key["arm"]] = timing.median(s.samples) if not s.error else None
        row[f"{s.key['arm']}_noise"] = timing.rel_iqr(s.samples)
    return row


def summarize(rows: list[dict]) -> dict[str, Any]:
    fix = [r["mode"] / r["rewrite"] for r in rows
           if not r.get("plain_works") and r.get("mode") and r.get("rewrite")]
    nofix = [r["mode"] / r["plain"] for r in rows if r.get("plain_works") and r.get("plain")]
    by_batch = {}
    for b in sorted({r["batch"] for r in rows}):
        xs = [r["mode"] / r["rewrite"] for r in rows if r["batch"] == b
              and not r.get("plain_works") and r.get("mode") and r.get("rewrite")]
        by_batch[b] = {"n": len(xs), "median": timing.median(xs), "worst": max(xs, default=None)}
    return {"fix": {"n": len(fix), "median": timing.median(fix), "worst": max(fix, default=None),
                    "target": FIX_TARGET},
            "nofix": {"n": len(nofix), "median": timing.median(nofix),
                      "worst": max(nofix, default=None), "target": NOFIX_TARGET},
            "by_batch": by_batch, "not_timed": sum(1 for r in rows if "error" in r)}


def main(argv: list[str] | None = None) -> int:
    from funcbwd.studies.yourcode.cases import CASES

    p = argparse.ArgumentParser(prog="python -m funcbwd.studies.yourcode.cost",
                                description="Time funcbwd.vmap against hand rewrites on the corpus.")
    p.add_argument("--cases", nargs="*", default=None)
    p.add_argument("--batches", nargs="*", type=int, default=[64, 512])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
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
        print(f"python -m funcbwd.studies.yourcode.cost: error: {e}", file=sys.stderr)
        return 2
    cells = [(n, t, b) for n in names for t in TRANSFORMS for b in ns.batches
             if t not in CASES[n].undefined]
    rows = []
    with Progress("cost", len(cells), enabled=not ns.quiet) as progress:
        for n, t, b in cells:
            progress.doing(f"{n} {t} B={b}")
            rows.append(cell(CASES[n], t, b))
            progress.advance(failed="error" in rows[-1])
    data = {"torch": torch.__version__, "python": platform.python_version(),
            "basis": f"thread CPU time, one torch thread, median of {ROUNDS} interleaved rounds; "
                     "after one warm-up call", "rows": rows, "summary": summarize(rows)}
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(data, indent=1) + "\n")
    s = data["summary"]
    print(f"fix: median {s['fix']['median']:.2f}x a hand rewrite over {s['fix']['n']} cells "
          f"(target <= {FIX_TARGET}x); no-fix: median {s['nofix']['median']:.2f}x plain over "
          f"{s['nofix']['n']} cells (target <= {NOFIX_TARGET}x); written to {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
