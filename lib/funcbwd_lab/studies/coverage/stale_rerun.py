"""Re-run the cells behind the committed sweep's "stale" upstream verdicts with every sample.

The committed sweep (``data/coverage.json.gz``) ran vmapvjpvjp, vmapjvpvjp, vmapjvpall and vjpvmap
on each op's first float32 sample only, so its "stale" verdicts for them said "builtin passes 1 of
1 samples" while upstream's tests loop over every sample. This re-runs ``builtin`` (torch as is)
on every float32 sample of the ops :data:`OPS` names, one composition at a time (only the ops
whose entry for that composition was "stale"), with the sweep's budgets, into a NEW file (never
over the committed data). Resumable: each composition's ops are appended to
``<out>.<composition>.partial.jsonl`` as they finish (``--resume`` skips them).

    nice -n 19 python -m funcbwd_lab.studies.coverage.stale_rerun [--out PATH] [--force] [--resume]
                                                  [--op-budget 90] [--workers N] [--rest]

(``--force`` to overwrite the committed re-run; ``--rest``: the stale cells of the ops not
named in :data:`OPS`, into their own file.)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from funcbwd_lab import command
from funcbwd_lab.studies.coverage import data, sweep, verdicts

FILE_NAME = "coverage-stale-rerun.json.gz"
#: the casts, max_pool2d, max_unpool2d, the dropout family, masked.mean, mvlgamma,
#: hinge_embedding_loss, quantile, nanquantile (cheapest first)
OPS = ("double", "float", "half", "bfloat16", "cfloat", "cdouble", "chalf", "to",
       "mvlgamma.mvlgamma_p_1", "mvlgamma.mvlgamma_p_3", "mvlgamma.mvlgamma_p_5",
       "nn.functional.hinge_embedding_loss", "quantile", "nanquantile", "masked.mean",
       "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
       "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train",
       "nn.functional.feature_alpha_dropout.without_train", "nn.functional.max_unpool2d",
       "nn.functional.max_unpool2d.grad", "nn.functional.max_pool2d")


def one_sample_verdicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdicts the saved sweep's records give when its sample caps are ignored: "stale" on
    the samples it ran (one for the later compositions), what this re-run checks on every sample.
    (The document's own verdicts, with the caps, call those entries unresolved.)"""
    return verdicts.upstream_verdicts(doc["records"])


def stale_cells(doc: dict[str, Any], ops: Sequence[str] | None = OPS) -> dict[str, list[str]]:
    """composition -> the ops of ``ops`` (None: every op) whose upstream entry for it the saved
    sweep's samples call stale."""
    out: dict[str, list[str]] = {}
    for v in one_sample_verdicts(doc):
        oid = v["op"] + (f".{v['variant']}" if v["variant"] else "")
        comp = verdicts.COMPOSITION_OF[v["test"]]
        if v["verdict"] == "stale" and (ops is None or oid in ops) and comp != "vmapvjp":
            out.setdefault(comp, [])
            if oid not in out[comp]:
                out[comp].append(oid)
    order = ("vmapjvpvjp", "vmapvjpvjp", "vmapjvpall", "vjpvmap")  # where upstream's finds are
    rank = list(ops) if ops is not None else []
    return {c: sorted(out[c], key=lambda o: (rank.index(o) if o in rank else len(rank), o))
            for c in sorted(out, key=order.index)}


def rest_cells(doc: dict[str, Any]) -> dict[str, list[str]]:
    """The stale cells of every op (:func:`stale_cells` with ``ops=None``) that the first re-run
    (of :data:`OPS`) did not cover: together the two re-runs cover every one-sample stale entry."""
    named = stale_cells(doc)
    rest = {c: [o for o in ops if o not in named.get(c, [])]
            for c, ops in stale_cells(doc, None).items()}
    return {c: ops for c, ops in rest.items() if ops}


def _oid(v: dict[str, Any]) -> str:
    return v["op"] + (f".{v['variant']}" if v["variant"] else "")


def changes(old: dict[str, Any], new: dict[str, Any],
            cells_of: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Each upstream entry the saved sweep ``old`` called stale on a re-run composition, with the
    re-run's (``new``) verdict and evidence; ``cells_of``: the cells re-run (default
    :func:`stale_cells`; :func:`rest_cells` for ``--rest``)."""
    cells = {(c, o) for c, ops in (cells_of or stale_cells(old)).items() for o in ops}
    again = {(v["test"], _oid(v)): v for v in new["upstream_xfails"]}
    out = []
    for v in one_sample_verdicts(old):
        if v["verdict"] == "stale" and (verdicts.COMPOSITION_OF[v["test"]], _oid(v)) in cells:
            n = again[(v["test"], _oid(v))]
            out.append({"test": v["test"], "op": _oid(v), "was": v["evidence"],
                        "verdict": n["verdict"], "evidence": n["evidence"]})
    return out


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The re-run's outcome as a markdown table (one row per entry)."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    head = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    lines = [f"Of {len(rows)} entries the sweep called stale on one sample: {head}.", "",
             "| test | op | verdict with every sample | evidence |", "|---|---|---|---|"]
    lines += [f"| `{r['test'].removeprefix('test_')}` | `{r['op']}` | {r['verdict']} | "
              f"{r['evidence'][:100].replace('|', '/')} |" for r in rows]
    return "\n".join(lines)


def run(cells: dict[str, list[str]], out: Path, resume: bool, op_budget_s: float,
        workers: int = 0) -> dict[str, Any]:
    records, metas = [], {}
    for comp, ops in cells.items():
        plan = dataclasses.replace(sweep.DEFAULT_PLAN, samples={"float32": {comp: None}},
                                   strategies=(sweep.BASELINE,), op_budget_s=op_budget_s,
                                   item_timeout_s=op_budget_s + 300)
        part = out.with_name(out.name.removesuffix(".json.gz") + f".{comp}")
        print(f"{comp}: {len(ops)} ops, every sample", file=sys.stderr, flush=True)
        results = sweep.run_sweep(",".join(ops), plan, out=part, resume=resume, progress=True,
                                  workers=workers)
        records += [r for res in results for r in res["records"]]
        metas[comp] = {"ops": ops, "op_seconds": {r["op"]: r["seconds"] for r in results}}
    return {"records": records, "per_composition": metas}


INPLACE_FILE_NAME = "coverage-stale-rerun-inplace.json.gz"
REST_FILE_NAME = "coverage-stale-rerun-rest.json.gz"


def inplace_rerun(doc: dict[str, Any], budget_s: float = 3.0) -> list[dict[str, Any]]:
    """The functionalizing strategies on every in-place cell the re-run found (builtin fails with
    an in-place write meeting vmap), with the sweep's budget per cell: builtin's record again and
    one per strategy, as the sweep makes them."""
    import torch

    from funcbwd_lab.studies.coverage import opinfo, summary

    cells = [f["cell"] for f in summary.summarize(doc["records"])["inplace_failures"]]
    plan = dataclasses.replace(sweep.DEFAULT_PLAN, budget_s=budget_s)
    out, smps = [], {}
    for i, (op_id, smp_name, _, comp) in enumerate(cells):
        op = opinfo.op_by_id(op_id)
        if op_id not in smps:
            smps[op_id] = opinfo.samples(op, torch.float32)
        spec, smp = opinfo.case_for(op, smps[op_id][int(smp_name)], smp_name)
        base = sweep.run_cell(spec, smp, comp, sweep.BASELINE, plan)
        first = [base.detail] if base.status in ("fail", "mismatch") else []
        for st in plan.strategies:
            r = base if st == sweep.BASELINE else sweep.run_cell(spec, smp, comp, st, plan, first)
            out.append(sweep._record(r, comp, None, len(smps[op_id])))
        print(f"{i + 1}/{len(cells)} {op_id} sample {smp_name} {comp}: "
              + ", ".join(f"{r['strategy']} {r['status']}" for r in out[-len(plan.strategies):]),
              file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.coverage.stale_rerun",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coverage", default="data/coverage.json.gz")
    ap.add_argument("--out", default=None, help=f"default data/{FILE_NAME}")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--op-budget", type=float, default=90.0, metavar="S",
                    help="seconds per op and composition before its remaining samples are 'not "
                    "started' records (default 90)")
    ap.add_argument("--workers", type=int, default=0, help="Dask workers (each with its memory "
                    "limit and the per-op timeout enforced); 0: serial, in this process")
    ap.add_argument("--rest", action="store_true", help="the ops the sweep calls stale on one "
                    f"sample other than the {len(OPS)} the evidence issue named (default out: "
                    f"data/{REST_FILE_NAME})")
    ap.add_argument("--inplace", action="store_true", help="instead: the functionalizing "
                    f"strategies on the in-place cells of --out, into data/{INPLACE_FILE_NAME}")
    command.add_force(ap)
    args = ap.parse_args(argv)
    out = Path(args.out or f"data/{REST_FILE_NAME if args.rest else FILE_NAME}")
    target = out.with_name(INPLACE_FILE_NAME) if args.inplace else out
    if command.out_refused("python -m funcbwd_lab.studies.coverage.stale_rerun", target, args.force):
        return 2
    if args.inplace:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recs = inplace_rerun(data.load(out))
        target = out.with_name(INPLACE_FILE_NAME)
        data.save(target, recs, {**sweep.DEFAULT_PLAN.meta(), "cells_of": str(out),
                                 "samples": {"float32": {}}, "cells": "the in-place cells of " + str(out)})
        print(f"wrote {target}", file=sys.stderr)
        return 0
    if out.resolve() == Path(args.coverage).resolve():
        raise SystemExit("--out must be a new file, not the committed sweep")
    doc = data.load(args.coverage)
    cells = rest_cells(doc) if args.rest else stale_cells(doc)
    start = time.perf_counter()
    res = run(cells, out, args.resume, args.op_budget, args.workers)
    meta = {**dataclasses.replace(sweep.DEFAULT_PLAN, strategies=(sweep.BASELINE,),
                                  op_budget_s=args.op_budget).meta(),
            "samples": {"float32": {c: None for c in cells}}, "torch": torch.__version__,
            "ops": len({o for ops in cells.values() for o in ops}), "workers": args.workers,
            "seconds": round(time.perf_counter() - start, 1), "rerun_of": args.coverage,
            "per_composition": res["per_composition"]}
    data.save(out, res["records"], meta, verdicts.upstream_verdicts(res["records"], meta=meta))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
