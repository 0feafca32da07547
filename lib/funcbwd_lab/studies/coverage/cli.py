"""``python -m funcbwd_lab coverage``: every composition functorch tests over torch's OpInfo database.

Runs :func:`funcbwd_lab.studies.coverage.sweep.run_sweep` (``--workers N``: N local Dask worker
processes, 0 = serially in this process; ``--scheduler``: an existing cluster), writes
``--out`` (gzipped JSON: meta, records, upstream verdicts) and prints the per-composition
summary. ``--resume`` continues an interrupted sweep from ``<out>.partial.jsonl``. ``--load FILE``
summarizes a saved run instead of sweeping; ``--cost`` times, per op where builtin and whole
pass, the batched backward under whole / builtin (:mod:`funcbwd_lab.studies.coverage.cost`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from funcbwd_lab import command

HELP = "every functorch composition over torch's OpInfo database"
EPILOG = ("compositions: vmapvjp, vmapvjpvjp, vmapjvpvjp, vmapjvpall, vjpvmap (named as "
          "test/functorch/test_ops.py names its tests); every in_dims choice, distinct batch "
          "entries; strategies: builtin (torch as is), whole, hooks, traced_backward (with the "
          "scoped batching rules around their backward).")


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("--ops", default=None, help="OpInfo names, comma-separated (a bare name "
                   "selects all its variants; default: the whole op_db)")
    p.add_argument("--quick", action="store_true", help="the first float32 sample of each "
                   "composition only (default: the plan in funcbwd_lab.studies.coverage.sweep.DEFAULT_PLAN: "
                   "every float32 sample)")
    p.add_argument("--max-samples", type=int, default=None, metavar="N",
                   help="at most N float32 samples per composition, for speed (default: every "
                   "sample, as upstream's tests; a cap is written into every record and no entry "
                   "whose samples were capped is called stale)")
    p.add_argument("--strategies", default=None, help="comma-separated (default: builtin, whole, "
                   "hooks, traced_backward)")
    p.add_argument("--budget", type=float, default=None, metavar="S",
                   help="seconds per cell before its remaining in_dims choices are left (a timeout "
                   "record, never a pass; default 3)")
    p.add_argument("--workers", type=int, default=0,
                   help="local Dask worker processes (default 0 = serial, in this process)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on an existing Dask cluster (e.g. tcp://host:8786)")
    command.add_out(p, "write the result here (.json.gz; data/coverage.json.gz is committed: "
                       "--force; the whole op_db takes hours)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.partial.jsonl")
    p.add_argument("--load", default=None, help="summarize a saved run instead of sweeping")
    p.add_argument("--cost", action="store_true", help="with --load: time whole / builtin on "
                   "the eligible ops and print the distribution")
    p.add_argument("--format", choices=["text", "json"], default="text")
    command.add_common(p)


def main(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from funcbwd.errors import BadInputError, parse_names
    from funcbwd_lab.studies.coverage import data, render, summary, sweep, verdicts

    width = command.width_of(args)
    command.check_args_out(args)
    if args.load:
        doc = data.load(args.load)
    else:
        plan = sweep.DEFAULT_PLAN
        if args.quick:
            plan = dataclasses.replace(plan, samples={"float32": {c: 1 for c in sweep.COMPOSITIONS}})
        if args.max_samples is not None:
            if args.max_samples < 1:
                raise BadInputError(f"--max-samples must be >= 1, got {args.max_samples}")
            plan = sweep.capped(plan, args.max_samples)
        if args.strategies:
            chosen = parse_names("strategy", args.strategies, sweep.STRATEGIES)
            plan = dataclasses.replace(plan, strategies=tuple(dict.fromkeys([sweep.BASELINE, *chosen])))
        if args.budget is not None:
            if args.budget <= 0:
                raise BadInputError(f"--budget must be seconds > 0, got {args.budget}")
            plan = dataclasses.replace(plan, budget_s=args.budget)
        if args.resume and not args.out:
            raise BadInputError("--resume needs --out (the partial records live beside it)")
        start = time.perf_counter()
        with command.progress_of(args, "coverage") as progress:
            if args.ops is None:  # say how long before starting
                progress("the whole op_db: the saved run took 157 min on 2 workers (--ops NAMES "
                         "for a few ops)")
            results = sweep.run_sweep(args.ops, plan, out=args.out, resume=args.resume,
                                      workers=args.workers, scheduler=args.scheduler,
                                      progress=progress)
        records = [r for res in results for r in res["records"]]
        meta = {**plan.meta(), "torch": torch.__version__, "ops": len(results),
                "seconds": round(time.perf_counter() - start, 1), "workers": args.workers,
                "op_seconds": {res["op"]: res.get("seconds") for res in results}}
        doc = {"meta": meta, "records": records,
               "upstream_xfails": verdicts.upstream_verdicts(records, meta=meta) if args.ops is None else []}
        if args.out:
            data.save(args.out, records, meta, doc["upstream_xfails"])
    s = summary.summarize(doc["records"])
    if args.format == "json":
        json.dump({"meta": doc["meta"], "summary": s}, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        print(render.text(doc, s, width))
    if args.cost:
        from funcbwd_lab.studies.coverage import cost

        by_op: dict[str, list] = {}
        for r in doc["records"]:
            by_op.setdefault(r["op"], []).append(r)
        with command.progress_of(args, "coverage cost") as progress:
            costs = [c for op in progress.track(list(by_op)) if (c := cost.op_cost(op, by_op[op]))]
        print(cost.format_cost(cost.summarize_cost(costs)))
    return 0
