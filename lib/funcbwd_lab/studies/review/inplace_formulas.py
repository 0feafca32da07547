"""The generated list of backward formulas that write in place: where the prologue would go.

For every OpInfo of torch 2.13's op_db with autograd (float32, its first :data:`SAMPLES` samples),
torch's own backward runs eagerly on plain CPU tensors under ``torch.profiler`` (no dispatch mode:
``isTensorSubclassLike`` stays false, so the C++ formulas take their in-place fast paths), and every
in-place ATen call (a name ending in ``_``) is attributed to the backward Node whose ``apply`` encloses
it (a profiler range opened by a pre-hook and closed by a hook on every Node: the engine's own work
around a Node, accumulating gradients into the next Node's input buffer, is outside it):

* **direct**: the call's parent event is the Node itself (the formula writes in place);
* **nested**: the call sits inside another ATen op the formula calls (a composite that writes in
  place, e.g. ``index_select_backward``'s ``index_add_``); the fill of a fresh factory
  (``zeros``, ``ones``, ``full``, ``*_like``, ``new_*``) is not a write of the formula and is not
  counted.

The list is a lower bound per formula: a branch a sample does not reach is not seen.
``python -m funcbwd_lab.studies.review.inplace_formulas --out data/review-inplace-formulas.json
[--workers 1]`` (about 5 minutes; Dask, one item per op).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from funcbwd_lab.studies.review import saved

SCHEMA = "funcbwd-review-inplace-formulas/1"
FILE = "review-inplace-formulas.json"
SAMPLES = 3
NODE_PREFIX = "funcbwd::node: "
FACTORIES = ("zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
             "empty_like", "new_zeros", "new_ones", "new_full", "new_empty", "scalar_tensor",
             "arange", "eye", "tensor")
SKIP_NODES = ("AccumulateGrad", "torch::autograd::AccumulateGrad")


def _attribute(events: Any) -> dict[str, dict[str, set]]:
    """Node -> {"direct": in-place op names, "nested": ...} from profiler events."""
    out: dict[str, dict[str, set]] = {}
    for e in events:
        if not e.name.startswith("aten::") or not e.name.endswith("_") or e.name.endswith("__"):
            continue
        chain, p = [], e.cpu_parent
        while p is not None and not p.name.startswith(NODE_PREFIX):
            chain.append(p.name)
            p = p.cpu_parent
        if p is None:
            continue
        node = p.name[len(NODE_PREFIX):]
        if any(s in node for s in SKIP_NODES):
            continue
        aten = [c for c in chain if c.startswith("aten::")]
        if aten and aten[0].split("::", 1)[1] in FACTORIES:
            continue  # the fill of a fresh factory
        kind = "nested" if aten else "direct"
        if kind == "nested" and e.name in ("aten::fill_", "aten::zero_"):
            continue  # a helper filling the fresh tensor it made (a scalar, a factory)
        out.setdefault(node, {"direct": set(), "nested": set()})[kind].add(e.name[6:])
    return out


def bracket(outs: list) -> None:
    """A profiler range around every Node's apply of the graph behind ``outs`` (pre-hook opens
    it, hook closes it)."""
    import torch

    seen, todo = set(), [o.grad_fn for o in outs if o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo += [n for n, _ in node.next_functions if n is not None]
        if any(s in node.name() for s in SKIP_NODES):
            continue
        ranges: list = []

        def pre(grads, node=node, ranges=ranges):
            r = torch.profiler.record_function(NODE_PREFIX + node.name())
            r.__enter__()
            ranges.append(r)

        def post(grads_in, grads_out, ranges=ranges):
            if ranges:
                ranges.pop().__exit__(None, None, None)
        node.register_prehook(pre)
        node.register_hook(post)


def profile_op(op_id: str) -> dict[str, Any]:
    """One OpInfo (a Dask item): nodes seen, and their in-place writes."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from funcbwd_lab.studies.coverage import opinfo

    seen: dict[str, dict[str, set]] = {}
    nodes: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        op = opinfo.op_by_id(op_id)
        if opinfo.not_sweepable(op, torch.float32):
            return {"op": op_id, "status": "not_sweepable", "nodes": [], "inplace": {}}
        for i, smp in enumerate(opinfo.samples(op, torch.float32, SAMPLES)):
            case = opinfo.case_for(op, smp, str(i))
            if isinstance(case, str):
                continue
            spec, s = case
            prim = [s.args[p].detach().clone().requires_grad_() for p in s.diff]
            full = list(s.args)
            for p, x in zip(s.diff, prim):
                full[p] = x
            outs = [o for o in spec.outputs_tuple(spec.torch_op(*full)) if o.requires_grad]
            if not outs:
                continue
            bracket(outs)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                torch.autograd.grad(outs, prim, [torch.ones_like(o) for o in outs],
                                    allow_unused=True)
            nodes |= {e.name[len(NODE_PREFIX):] for e in prof.events()
                      if e.name.startswith(NODE_PREFIX)}
            for node, kinds in _attribute(prof.events()).items():
                d = seen.setdefault(node, {"direct": set(), "nested": set()})
                for k, v in kinds.items():
                    d[k] |= v
    return {"op": op_id, "status": "ok", "nodes": sorted(n for n in nodes
                                                        if not any(s in n for s in SKIP_NODES)),
            "inplace": {n: {k: sorted(v) for k, v in d.items()} for n, d in seen.items()}}


def merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Node -> {"direct", "nested", "ops"} over every op, and the counts."""
    formulas: dict[str, dict[str, Any]] = {}
    nodes: set[str] = set()
    for r in rows:
        nodes |= set(r.get("nodes", []))
        for node, d in r.get("inplace", {}).items():
            f = formulas.setdefault(node, {"direct": set(), "nested": set(), "ops": set()})
            f["direct"] |= set(d["direct"])
            f["nested"] |= set(d["nested"])
            f["ops"].add(r["op"])
    out = {n: {k: sorted(v) for k, v in f.items()} for n, f in sorted(formulas.items())}
    return {"formulas": out, "nodes_seen": len(nodes),
            "direct": sum(bool(f["direct"]) for f in out.values()),
            "nested_only": sum(not f["direct"] and bool(f["nested"]) for f in out.values()),
            "calls": dict(Counter(c for f in out.values() for c in f["direct"]).most_common())}


def run(workers: int) -> dict[str, Any]:
    import torch

    from funcbwd_lab import parallel
    from funcbwd_lab.studies.coverage import opinfo

    ops = opinfo.select_ops(None)
    print(f"inplace_formulas: {len(ops)} OpInfos, about {len(ops) * 0.5 / max(workers, 1) / 60:.0f}"
          " min", file=sys.stderr, flush=True)
    rows = parallel.map_items(profile_op, ops, workers=workers, timeout=300.0)
    rows = [r if "nodes" in r else {"op": r.get("item"), "status": r.get("reason", "fail"),
                                    "nodes": [], "inplace": {}} for r in rows]
    return {"schema": SCHEMA, "torch": torch.__version__, "samples": SAMPLES,
            "ops": len(ops), "status": dict(Counter(r["status"] for r in rows)), **merge(rows)}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab import command

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.review.inplace_formulas",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=1)
    command.add_force(p)
    a = p.parse_args(argv)
    if command.out_refused(p.prog, a.out, a.force):
        return 2
    doc = run(a.workers)
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}: {doc['direct']} formulas write in place directly, "
          f"{doc['nested_only']} only inside a composite, of {doc['nodes_seen']} nodes seen")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
