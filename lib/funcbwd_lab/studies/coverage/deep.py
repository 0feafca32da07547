"""The deep pass: the sweep's cells where ``builtin`` fails with an in-place write meeting vmap
(vmap's in-place error or the in-place shape error), re-run with
a larger budget per cell, so a functionalizing strategy that ran out of the sweep's budget there
gets a verdict (every in_dims choice run) instead of "budget".

    python -m funcbwd_lab.studies.coverage.deep [--coverage data/coverage.json.gz]
                                            [--budget 120] [--out data/coverage-deep.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Sequence

from funcbwd_lab import command
from funcbwd_lab.studies.coverage import data, summary, sweep

SCHEMA = "funcbwd-coverage-deep/1"
FILE_NAME = "coverage-deep.json"  # in the checkout's data/
KEYS = ("strategy", "status", "reason", "message", "mechanism_ran", "trials_run", "trials_total",
        "seconds", "max_abs_err", "fallback_ops")


def inplace_cells(records: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """The cells (op, sample, dtype, composition) where builtin fails with an in-place write
    meeting vmap (vmap's in-place error or the in-place shape error)."""
    return [f["cell"] for f in summary.summarize(records)["inplace_failures"]]


def pending(records: Sequence[dict[str, Any]], doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The in-place cells of ``records`` the deep pass ``doc`` has not re-run (e.g. the in-place
    shape error's cells, found after the deep pass ran): their verdicts rest on the sweep's
    budget."""
    done = set(doc["records"])
    return [c for c in inplace_cells(records) if f"{c[0]} {c[3]}" not in done
            and f"{c[0]} {c[3]} sample {c[1]}" not in done]


def run(cells: Sequence[tuple[str, str, str, str]], budget_s: float = 120.0) -> dict[str, Any]:
    """Each cell's records under every sweep strategy with ``budget_s`` per cell (that sample of
    the op only)."""
    out: dict[str, list] = {}
    plans = []
    for op, smp, dtype, comp in cells:
        plan = dataclasses.replace(sweep.DEFAULT_PLAN, samples={dtype: {comp: int(smp) + 1}},
                                   budget_s=budget_s, op_budget_s=10 * budget_s)
        plans.append(plan)
        start = time.perf_counter()
        res = sweep.sweep_op(op, plan, only_sample=smp)
        key = f"{op} {comp}" if smp == "0" else f"{op} {comp} sample {smp}"
        out[key] = [{k: r[k] for k in KEYS} for r in res["records"] if r["sample"] == smp]
        print(f"{op} {comp}: {time.perf_counter() - start:.0f} s, "
              + ", ".join(f"{r['strategy']} {r['status']}" for r in res["records"]), flush=True)
    return {"records": out, "plan": plans[0].meta() if plans else {}}


def format_result(doc: dict[str, Any]) -> str:
    lines = [f"budget {doc['meta']['budget_s']:g} s per cell (the sweep's: 3 s):"]
    for cell, rs in doc["records"].items():
        lines.append(f"  {cell}:")
        lines += [f"    {r['strategy']:16s} {r['status']:8s} {r['trials_run']}/{r['trials_total']} in_dims "
                  f"choices run" for r in rs]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.coverage.deep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coverage", default=f"data/{data.FILE_NAME}", metavar="FILE")
    ap.add_argument("--budget", type=float, default=120.0, metavar="S")
    ap.add_argument("--out", default=f"out/{FILE_NAME}", metavar="FILE",
                    help=f"default out/{FILE_NAME} (untracked); data/{FILE_NAME} is the committed one")
    ap.add_argument("--pending", default=None, metavar="DEEP_FILE", help="only the in-place cells "
                    "that deep pass file has not re-run (write --out to a new file)")
    command.add_force(ap)
    args = ap.parse_args(argv)
    command.check_out(args.out, args.force)
    records = data.load(args.coverage)["records"]
    cells = (pending(records, json.loads(Path(args.pending).read_text())) if args.pending
             else inplace_cells(records))
    if args.pending and Path(args.out).resolve() == Path(args.pending).resolve():
        raise SystemExit("--out must be a new file with --pending")
    res = run(cells, args.budget)
    doc = {"schema": SCHEMA,
           "meta": {"what": "the cells where builtin fails with an in-place write meeting vmap in "
                            f"{Path(args.coverage).name}"
                            + (f" that {Path(args.pending).name} has not re-run" if args.pending else "")
                            + f", re-run with a {args.budget:g} s budget per cell",
                    "torch": torch.__version__, "script": "python -m funcbwd_lab.studies.coverage.deep",
                    **res["plan"]},
           "records": res["records"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(format_result(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
