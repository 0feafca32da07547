"""``python -m funcbwd coverage``: the vmap(vjp) sweep over torch's OpInfo database.

Strategies ``builtin`` (torch as is), ``whole`` and ``hooks`` (torch's own backward formulas
functionalized under vmap), each OpInfo sample compared with the per-sample loop
(:mod:`funcbwd.measure.coverage_sweep`). ``--workers N`` runs the ops on N local Dask worker
processes (0 = serially in this process), ``--scheduler`` on an existing cluster; an op that
crashes its worker or exceeds ``--item-timeout`` gets failed records and the sweep goes on.
``--rules`` (default) enters the scoped batching rules for ``aten::copy`` and
``aten::as_strided_scatter`` around the functionalizing strategies (:func:`funcbwd.batching.scoped_rules`);
``--no-rules`` runs them as torch 2.13 would. ``--cost`` also times, per op where builtin and whole
pass, the batched backward under whole / builtin (:mod:`funcbwd.measure.coverage_cost`).
"""

from __future__ import annotations

import argparse
import time

from funcbwd.cli import options

HELP = "vmap(vjp) sweep over torch's OpInfo database"
EPILOG = ("strategies: builtin (torch as is), whole (the entire backward functionalized under "
          "vmap), hooks (each backward node functionalized by autograd hooks).\n"
          "status: pass | fail (classified reason; crash/timeout/error when the op's worker died "
          "or hung) | mismatch (vs the per-sample loop) | not_applicable (with why);\n"
          "'+fb' = vmap used its slow per-sample fallback.")


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("--ops", default=None, help="OpInfo names, comma-separated (a bare name "
                   "selects all its variants; default: the whole op_db)")
    p.add_argument("--strategies", default="builtin,whole,hooks",
                   help="comma-separated (default builtin,whole,hooks)")
    p.add_argument("--all-samples", action="store_true", help="every sample (default: the first)")
    p.add_argument("--max-in-dims", type=int, default=8,
                   help="in_dims choices per sample (default 8; 0 = all)")
    p.add_argument("--budget", type=float, default=2.0,
                   help="seconds per op sample and strategy before the remaining in_dims "
                   "choices are skipped (default 2; 0 = no limit)")
    p.add_argument("--rules", action=argparse.BooleanOptionalAction, default=True,
                   help="enter the scoped aten::copy and aten::as_strided_scatter batching rules "
                   "around the backward of whole/hooks (default on; never around builtin, never around the forward)")
    p.add_argument("--cost", action="store_true", help="also time the batched backward, whole / "
                   "builtin, per op where both pass (first sample, 64 cotangents)")
    p.add_argument("--workers", type=int, default=0,
                   help="local Dask worker processes (default 0 = serial, in this process)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on an existing Dask cluster (e.g. tcp://host:8786)")
    p.add_argument("--item-timeout", type=float, default=300.0, metavar="S",
                   help="seconds one op may take on a worker before it is recorded as a timeout "
                   "(default 300; 0 = none; not enforced when serial)")
    p.add_argument("--out", default=None, help="write the records here (.json, .json.gz: "
                   "compressed, or .csv)")
    p.add_argument("--format", choices=["json", "csv"], default=None,
                   help="file format (default: from --out's extension, else json)")
    p.add_argument("--load", default=None, help="summarize a saved run instead of sweeping")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    import torch

    from funcbwd import batching
    from funcbwd.errors import BadInputError
    from funcbwd.measure import coverage_cost, coverage_ops, coverage_summary, coverage_sweep
    from funcbwd.run import compare
    from funcbwd.tables import fit

    width = options.width_of(args)
    if args.load:
        with options.progress_of(args, "coverage") as progress:
            progress(f"loading and summarizing {args.load}")
            text = coverage_summary.format_summary(
                coverage_summary.summarize(coverage_summary.load(args.load)), width=width)
            if not args.load.endswith(".csv") and coverage_summary.load_cost(args.load):
                text += "\n\n" + fit(coverage_cost.format_cost(coverage_cost.summarize_cost(
                    coverage_summary.load_cost(args.load))), width)
        print(text)
        return 0
    if args.max_in_dims < 0 or args.budget < 0 or args.item_timeout < 0 or args.workers < 0:
        raise BadInputError("--max-in-dims, --budget, --item-timeout and --workers must be >= 0 "
                            "(0 = no limit / serial)")
    fmt = args.format or ("csv" if (args.out or "").endswith(".csv") else "json")
    start = time.perf_counter()
    fallback_ok = coverage_sweep.fallback_warnings_work()
    records, costs = coverage_sweep.run_sweep(
        args.ops, args.strategies, args.all_samples, max_in_dims=args.max_in_dims or None,
        budget_s=args.budget or None, rules=args.rules, cost=args.cost, workers=args.workers,
        scheduler=args.scheduler, item_timeout=args.item_timeout or None,
        progress=options.progress_of(args, "coverage"))
    meta = {"torch": torch.__version__, "ops": args.ops or "all", "strategies": args.strategies,
            "all_samples": args.all_samples, "max_in_dims": args.max_in_dims or "all",
            "budget_s": args.budget, "batch": coverage_ops.BATCH,
            "entries": "distinct per batch entry (funcbwd.run.entries), copies where invalid",
            "tolerance": compare.tolerance(torch.float32).text(),
            "rules": list(batching.RULES) if args.rules else [],
            "rules_scope": "around the backward (vjp_fn call) of whole/hooks only (funcbwd.batching.scoped_rules)" if args.rules
            else "none (torch 2.13 as is)",
            "workers": args.workers, "scheduler": args.scheduler,
            "item_timeout_s": args.item_timeout or None, "cost": args.cost,
            "fallback_detection": "performance-drop warning" if fallback_ok
            else "UNAVAILABLE (the fallback did not warn)",
            "wall_seconds": round(time.perf_counter() - start, 1)}
    print(coverage_summary.format_summary(coverage_summary.summarize(records), width=width))
    if args.cost:
        print("\n" + fit(coverage_cost.format_cost(coverage_cost.summarize_cost(costs)), width))
    print("\n" + fit(f"wall time {meta['wall_seconds']} s; fallback detection: "
                     f"{meta['fallback_detection']}; rules: {', '.join(meta['rules']) or 'none'}", width))
    if args.out:
        if fmt == "csv":
            with open(args.out, "w") as f:
                f.write(coverage_summary.to_csv(records))
        else:  # JSON, gzip-compressed if the name ends in .gz
            coverage_summary.write(args.out, records, meta, costs)
        print(f"wrote {len(records)} records to {args.out}")
    return 0
