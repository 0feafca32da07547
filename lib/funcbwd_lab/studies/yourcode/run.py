"""Run the corpus: every case x transform x mechanism, each cell against the per-sample loop.

``python -m funcbwd_lab.studies.yourcode.run [--cases NAME ..] [--mechanisms M ..] [--out PATH]``

writes one record per cell (``case``, ``transform``, ``mechanism``, ``verdict``, ``detail``,
``error``): ``ok`` (equal to a per-sample loop of torch's autograd on the case's out-of-place
rewrite, within 1e-4), ``wrong`` (ran, differs), ``fail`` (raised), ``refused`` (the tool's
contract refuses it, with the reason: never counted as fixed), ``unknown`` (the truth itself
raised: never counted as pass), ``n/a`` (the mechanism has nothing to act on) and, from the case,
``undefined`` transforms (with why). The output defaults to ``out/yourcode-corpus.json``
(untracked); ``--out data/yourcode-corpus.json`` refreshes the committed data. A run resumes:
cells already in the output file for this torch version and these sources (the tool's and
this study's, :func:`funcbwd_lab.provenance.source_hash`) are kept (``--fresh`` starts over).
Progress goes to stderr (one line at least every 2 s when piped).

The summary (:func:`summarize`) is what the docs, the notebook and the README quote.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from funcbwd_lab import command
from funcbwd.errors import BadInputError
from funcbwd_lab.progress import Progress
from funcbwd_lab.provenance import source_hash
from funcbwd_lab.studies.yourcode.case import CLASSES, TRANSFORMS

DEFAULT_OUT = Path("out/yourcode-corpus.json")
DATA = Path(__file__).resolve().parents[4] / "data" / "yourcode-corpus.json"


def _key(r: dict) -> tuple:
    return r["case"], r["transform"], r["mechanism"]


def run(names: list[str], mechanisms: list[str], previous: list[dict] | None = None,
        progress: Progress | None = None) -> list[dict]:
    from funcbwd_lab.studies.yourcode.cases import CASES
    from funcbwd_lab.studies.yourcode.mechanisms import LOOPED, error_class, run as run_mechanism

    done = {_key(r): r for r in previous or []}
    cells = [(n, t, m) for n in names for t in TRANSFORMS for m in mechanisms]
    progress = progress or Progress.off()
    progress.start(len(cells), "corpus")
    out = []
    for n, t, m in cells:
        if (n, t, m) in done:
            out.append(done[(n, t, m)])
            progress.advance(label=f"{n} {t} {m} (kept)")
            continue
        case = CASES[n]
        progress.doing(f"{n} {t} {m}")
        if t in case.undefined:
            verdict, detail = "undefined", case.undefined[t]
        else:
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                verdict, detail = run_mechanism(m, case, t)
            detail = detail if verdict != "ok" or detail == LOOPED else ""
        out.append({"case": n, "transform": t, "mechanism": m, "verdict": verdict,
                    "detail": detail[:300],
                    "error": error_class(detail) if verdict == "fail" else None,
                    "seconds": round(time.perf_counter() - start, 3)
                    if t not in case.undefined else None})
        progress.advance(failed=verdict in ("fail", "wrong"), label=f"{n} {t} {m}")
    progress.close()
    return out


def cases_table() -> dict[str, dict[str, Any]]:
    from funcbwd_lab.studies.yourcode.cases import CASES

    return {n: {"library": c.library, "source": c.source, "what": c.what,
                "classes": list(c.classes), "undefined": dict(c.undefined)}
            for n, c in CASES.items()}


def summarize(data: dict) -> dict[str, Any]:
    """Per mechanism: cells run, plain-failing cells it fixes, regressions (plain ok, it not),
    wrong answers, unknown; per class: fixed of plain-failing."""
    cells = data["cells"]
    plain = {(r["case"], r["transform"]): r["verdict"] for r in cells if r["mechanism"] == "plain"}
    failing = {k for k, v in plain.items() if v in ("fail", "wrong")}
    working = {k for k, v in plain.items() if v == "ok"}
    out: dict[str, Any] = {"plain_failing": len(failing), "plain_ok": len(working),
                           "unknown": sorted({k for k, v in plain.items() if v == "unknown"}),
                           "mechanisms": {}}
    for m in data["mechanisms"]:
        mine = {(r["case"], r["transform"]): r for r in cells if r["mechanism"] == m}
        applicable = {k for k in failing if mine.get(k, {}).get("verdict") != "n/a"}
        fixed = sorted(k for k in applicable if mine.get(k, {}).get("verdict") == "ok")
        regress = sorted(k for k in working if mine.get(k, {}).get("verdict") in ("fail", "wrong"))
        wrong = sorted(k for k, r in mine.items() if r["verdict"] == "wrong")
        refused = sorted(k for k, r in mine.items() if r["verdict"] == "refused")
        by_class: dict[str, list[int]] = {}
        for (n, t) in applicable:
            for cls in data["cases"][n]["classes"]:
                row = by_class.setdefault(cls, [0, 0])
                row[1] += 1
                row[0] += (n, t) in fixed
        looped = sorted(k for k in fixed if mine[k].get("detail") == "via the per-sample loop")
        out["mechanisms"][m] = {
            "applicable": len(applicable), "fixed": len(fixed), "looped": looped,
            "still_failing": sorted(k for k in applicable if k not in fixed),
            "regressions": regress, "wrong": wrong, "refused": refused, "by_class": by_class}
    return out


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab.studies.yourcode.cases import CASES
    from funcbwd_lab.studies.yourcode.mechanisms import MECHANISMS

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.yourcode.run",
                                description="Run the corpus of public in-place code under every "
                                            "transform and mechanism.")
    p.add_argument("--cases", nargs="*", default=None, help="case names (default: all)")
    p.add_argument("--mechanisms", nargs="*", default=list(MECHANISMS),
                   help=f"default: all of {', '.join(MECHANISMS)}")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"default {DEFAULT_OUT} (untracked); data/yourcode-corpus.json to refresh "
                        "the committed data")
    p.add_argument("--fresh", action="store_true", help="ignore cells already in --out")
    command.add_force(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    ns = p.parse_args(argv)
    names = ns.cases if ns.cases else list(CASES)
    bad = [n for n in names if n not in CASES] + [m for m in ns.mechanisms if m not in MECHANISMS]
    if bad or not names or not ns.mechanisms:
        print(f"nothing to run: unknown {', '.join(bad) or 'empty selection'}; cases: "
              f"{len(CASES)} (see `python -m funcbwd_lab.studies.yourcode.check`), mechanisms: "
              f"{', '.join(MECHANISMS)}", file=sys.stderr)
        return 2
    try:
        command.check_out(ns.out, ns.force)
    except BadInputError as e:
        print(f"python -m funcbwd_lab.studies.yourcode.run: error: {e}", file=sys.stderr)
        return 2
    previous: list[dict] = []
    source = source_hash(Path(__file__).parent)
    if ns.out.exists() and not ns.fresh:
        old = json.loads(ns.out.read_text())
        if old.get("torch") == torch.__version__ and old.get("source") == source:
            previous = old["cells"]
    torch.set_num_threads(1)
    cells = run(names, ns.mechanisms, previous, Progress("corpus", enabled=not ns.quiet))
    keep = {_key(c) for c in cells}
    cells += [c for c in previous if _key(c) not in keep and c["case"] in CASES]
    mechanisms = [m for m in MECHANISMS if any(c["mechanism"] == m for c in cells)]
    data = {"torch": torch.__version__, "python": platform.python_version(), "source": source,
            "basis": "every case x transform x mechanism; batch of 3 distinct samples (2 x 3 for "
                     "vmap_vmap); truth: a per-sample loop of torch.autograd on the case's "
                     "out-of-place rewrite; tolerance 1e-4",
            "classes": CLASSES, "transforms": list(TRANSFORMS), "mechanisms": mechanisms,
            "cases": cases_table(),
            "cells": sorted(cells, key=lambda c: (c["case"], TRANSFORMS.index(c["transform"]),
                                                  MECHANISMS.index(c["mechanism"])))}
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(data, indent=1) + "\n")
    s = summarize(data)
    print(f"{len(data['cases'])} cases, {s['plain_failing']} cells where plain torch.func fails, "
          f"{s['plain_ok']} where it works; written to {ns.out}")
    for m, r in s["mechanisms"].items():
        if m == "plain":
            continue
        print(f"  {m:10s} fixes {r['fixed']:3d} of {r['applicable']:3d}  regressions "
              f"{len(r['regressions'])}  wrong {len(r['wrong'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
