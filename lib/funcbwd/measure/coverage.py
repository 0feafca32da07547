"""The OpInfo coverage sweep: ``vmap(vjp)`` over torch's op database, per strategy.

It asks "what would functionalizing torch's *own* backward formulas do to every op?", with
PyTorch's test_vmapvjp methodology (docs/methodology.md): float32 CPU
samples of ``op_db``; every flattened tensor arg (input, index, mask, weight...) and every cotangent
batched; in_dims ``(0,)*n`` then each ``(-1, None)`` combination except all-None (capped); batched
inputs are copies of one sample, so the reference is the unbatched builtin result expanded along
the batch dim (today's PyTorch); atol = rtol = 1e-4. Only strategies that act on torch's C++
backward nodes apply (``builtin``, ``whole``, ``hooks``). Each (op, sample, strategy) record says
pass / fail (classified with :func:`funcbwd.run.matrix.classify`) / mismatch / skipped / unavailable,
and which ATen ops sent vmap to its slow per-sample fallback (the "performance drop" warning).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import html
import io
import itertools
import json
import sys
import time
import warnings
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.func import vmap
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.errors import BadInputError, UnknownNameError, first_line, parse_names
from funcbwd.run import scenarios
from funcbwd.run.matrix import classify, fallback_ops
from funcbwd.strategies import STRATEGY_NAMES, available, get_strategy

SWEEP_STRATEGIES = ("builtin", "whole", "hooks")
STATUSES = ("pass", "fail", "mismatch", "skipped", "unavailable")
BATCH = 2
ATOL = RTOL = 1e-4
DEFAULT_MAX_IN_DIMS = 8
DEFAULT_BUDGET_S = 2.0
RECORD_KEYS = ("op", "sample", "strategy", "status", "reason", "message", "error_class",
               "fallback_ops", "in_dims_tried", "in_dims_total", "bad_in_dims", "timed_out",
               "seconds", "max_abs_err")


# ------------------------------------------------------------------------------ the op database
def op_db() -> list:
    """torch's OpInfo list (importing it needs ``expecttest``; it takes a few seconds)."""
    try:
        return internals.opinfo_database()
    except ImportError as e:  # pragma: no cover - environment problem
        raise BadInputError(f"cannot import torch's op_db ({e}); install expecttest") from e


def op_id(op: Any) -> str:
    """``name`` or ``name.variant`` (unique over op_db)."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def select_ops(names: str | Iterable[str] | None = None) -> list:
    """OpInfos by id; a bare name selects all its variants. Unknown names raise, listing the ids."""
    db = op_db()
    if names is None or names == "all":
        return db
    wanted = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    wanted = [n for n in wanted if n]
    ids = [op_id(o) for o in db]
    chosen: list = []
    for name in wanted:
        hits = [o for o, i in zip(db, ids) if i == name or o.name == name]
        if not hits:
            raise UnknownNameError("OpInfo op", name, ids)
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def sweep_strategies(names: str | Iterable[str] | None) -> list[str]:
    """Validate strategy names: only strategies that can act on torch's C++ nodes qualify. A
    known one whose module is missing is kept (its records say 'unavailable')."""
    names = list(SWEEP_STRATEGIES) if names is None else names
    chosen = parse_names("strategy", names, [n for n in STRATEGY_NAMES])
    for n in chosen:
        if n in available() and not get_strategy(n).acts_on_builtin_nodes:
            valid = [s for s in available() if get_strategy(s).acts_on_builtin_nodes]
            raise BadInputError(f"strategy {n!r} only changes funcbwd's legacy formulas, not "
                                f"torch's own backward nodes; valid for coverage: {', '.join(valid)}")
    return chosen


# ------------------------------------------------------------------------------ one sample
@dataclasses.dataclass
class Prepared:
    """One OpInfo sample flattened like PyTorch's get_vjp_fn_and_args_with_cotangents."""

    op: Any
    flat: list  # flattened (input, *args), detached
    spec: Any
    kwargs: dict
    diff: list[int]  # flat positions of differentiable tensors (requires_grad in the sample)
    tpos: list[int]  # flat positions of all tensors (each batched by vmap)
    cts: list[torch.Tensor]
    process: Callable | None

    def call(self, flat: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        args = pytree.tree_unflatten(list(flat), self.spec)
        out = self.op.op(*args, **self.kwargs)
        if self.process is not None:
            out = self.process(out)
        return tuple(t for t in pytree.tree_leaves(out)
                     if isinstance(t, torch.Tensor) and t.is_floating_point())

    def vjp_function(self, strategy) -> Callable[..., tuple]:
        """h(*tensors, *cotangents) -> grads of the diff args: the function vmap batches."""
        n = len(self.tpos)

        def h(*xs: torch.Tensor) -> tuple:
            full = list(self.flat)
            for p, x in zip(self.tpos, xs[:n]):
                full[p] = x

            def f(*prims: torch.Tensor) -> tuple:
                inner = list(full)
                for p, v in zip(self.diff, prims):
                    inner[p] = v
                return self.call(inner)

            _, vjp_fn = strategy.vjp(f, *[full[p] for p in self.diff])
            return tuple(vjp_fn(tuple(xs[n:])))

        return h

    def tensors(self) -> list[torch.Tensor]:
        return [self.flat[p] for p in self.tpos] + list(self.cts)


def _detach(x: Any) -> Any:
    return x.detach() if isinstance(x, torch.Tensor) else x


def prepare(op: Any, sample: Any, seed: int = 0) -> Prepared | str:
    """A :class:`Prepared` sample, or the reason it cannot be swept."""
    flat, spec = pytree.tree_flatten((sample.input, *sample.args))
    diff = [i for i, a in enumerate(flat)
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point()]
    if not diff:
        return "no differentiable tensor input"
    flat = [_detach(a) for a in flat]
    kwargs = pytree.tree_map(_detach, dict(sample.kwargs))
    p = Prepared(op, flat, spec, kwargs, diff,
                 [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)], [],
                 sample.output_process_fn_grad)
    with torch.no_grad():
        outs = p.call(flat)
    if not outs:
        return "no floating-point output"
    g = torch.Generator().manual_seed(seed)
    p.cts = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    return p


def add_batch_dim(t: torch.Tensor, bdim: int | None, batch: int = BATCH) -> torch.Tensor:
    """PyTorch's add_batch_dim: bdim 0 by repeat, bdim -1 by unsqueeze/expand/contiguous."""
    if bdim is None:
        return t
    if bdim == 0:
        return t.unsqueeze(0).repeat(batch, *([1] * t.dim()))
    return t.unsqueeze(-1).expand(*t.shape, batch).contiguous()


def in_dims_choices(n: int, cap: int | None = DEFAULT_MAX_IN_DIMS) -> tuple[list, int]:
    """(choices, total) of :func:`funcbwd.run.scenarios.in_dims_choices` (PyTorch's test_vmapvjp)."""
    return scenarios.in_dims_choices(n, cap), 2 ** n  # (0,)*n plus 2**n - 1 (-1, None) combos


def _close(actual: Sequence[Any], ref: Sequence[torch.Tensor]) -> float | None:
    """None if every output equals the reference expanded over the batch, else the max abs error."""
    if len(actual) != len(ref):
        return float("inf")
    worst, bad = 0.0, False
    for a, r in zip(actual, ref):
        a = torch.zeros((BATCH, *r.shape), dtype=r.dtype) if a is None else a
        e = r.unsqueeze(0).expand(BATCH, *r.shape)
        if a.shape != e.shape:
            return float("inf")
        if not torch.allclose(a, e, atol=ATOL, rtol=RTOL, equal_nan=True):
            bad = True
            diff = (a.double() - e.double()).abs().nan_to_num(float("inf"))
            worst = max(worst, diff.max().item() if diff.numel() else 0.0)
    return worst if bad else None


def classify_sweep(exc: BaseException) -> str:
    """:func:`funcbwd.run.matrix.classify`, with two OpInfo-specific refinements of 'other'."""
    reason, msg = classify(exc), str(exc)
    if reason == "other" and "randomness" in msg:
        return "randomness"  # a random op under vmap's default randomness='error'
    if reason == "other" and ("Batching rule not implemented" in msg or "fallback is currently disabled" in msg):
        return "no_batch_rule"  # no rule, and the fallback cannot run it (view/out= op)
    return reason


def _fallbacks(caught: list) -> set[str]:
    return set(fallback_ops(caught))


def run_strategy(p: Prepared, strategy: str, ref: Sequence[torch.Tensor], *,
                 max_in_dims: int | None = DEFAULT_MAX_IN_DIMS,
                 budget_s: float | None = DEFAULT_BUDGET_S) -> dict[str, Any]:
    """Batched vjp of one prepared sample under one strategy, each in_dims choice in turn until
    the first failure or mismatch, or until ``budget_s`` is spent (the rest are skipped)."""
    rec: dict[str, Any] = {"strategy": strategy, "status": "pass", "reason": "", "message": "",
                           "error_class": "", "fallback_ops": [], "in_dims_tried": 0,
                           "bad_in_dims": "", "timed_out": False, "max_abs_err": None}
    choices, total = in_dims_choices(len(p.tensors()), max_in_dims)
    rec["in_dims_total"] = total
    if strategy not in available():
        rec.update(status="unavailable", message=f"strategy {strategy!r} has no module yet")
        rec["seconds"] = 0.0
        return rec
    st = get_strategy(strategy)
    h = p.vjp_function(st)
    fallbacks: set[str] = set()
    start = time.perf_counter()
    for in_dims in choices:
        if budget_s is not None and rec["in_dims_tried"] and time.perf_counter() - start > budget_s:
            rec["timed_out"] = True
            break
        batched = [add_batch_dim(t, d) for t, d in zip(p.tensors(), in_dims)]
        rec["in_dims_tried"] += 1
        depth = internals.stack_depth()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with st.active():
                    actual = vmap(h, in_dims=in_dims)(*batched)
                err = _close(actual, ref)
                if err is not None:
                    rec.update(status="mismatch", max_abs_err=err, bad_in_dims=str(in_dims),
                               message=f"max abs error {err:.3g} vs the expanded unbatched result")
            except Exception as e:  # noqa: BLE001 - every failure is a classified record
                rec.update(status="fail", reason=classify_sweep(e), error_class=type(e).__name__,
                           message=first_line(str(e)), bad_in_dims=str(in_dims))
            finally:
                internals.restore_stack_depth(depth)  # a failing transform leaves no level behind
        fallbacks |= _fallbacks(caught)
        if rec["status"] != "pass":
            break
    rec["seconds"] = round(time.perf_counter() - start, 4)
    rec["fallback_ops"] = sorted(fallbacks)
    return rec


def _reference(p: Prepared) -> tuple[torch.Tensor, ...] | str:
    """The unbatched builtin vjp (run twice: a random op gives two answers and is skipped)."""
    h = p.vjp_function(get_strategy("builtin"))
    try:
        torch.manual_seed(0)
        first = h(*p.tensors())
        torch.manual_seed(1)
        second = h(*p.tensors())
    except Exception as e:  # noqa: BLE001
        return f"unbatched vjp fails: {type(e).__name__}: {first_line(str(e), 160)}"
    first = tuple(torch.zeros_like(p.flat[d]) if g is None else g.detach()
                  for g, d in zip(first, p.diff))
    second = tuple(torch.zeros_like(p.flat[d]) if g is None else g.detach()
                   for g, d in zip(second, p.diff))
    if any(not torch.allclose(a, b, equal_nan=True) for a, b in zip(first, second)):
        return "nondeterministic (random op)"
    return first


def _skip_records(op: str, sample: str, strategies: Sequence[str], why: str) -> list[dict]:
    return [{"op": op, "sample": sample, "strategy": s, "status": "skipped", "reason": "",
             "message": why, "error_class": "", "fallback_ops": [], "in_dims_tried": 0,
             "in_dims_total": 0, "bad_in_dims": "", "timed_out": False, "seconds": 0.0,
             "max_abs_err": None} for s in strategies]


def _samples(op: Any, all_samples: bool) -> Iterable:
    it = op.sample_inputs("cpu", torch.float32, requires_grad=True)
    return it if all_samples else itertools.islice(it, 1)


def sweep_op(op: Any, strategies: Sequence[str], *, all_samples: bool = False,
             max_in_dims: int | None = DEFAULT_MAX_IN_DIMS,
             budget_s: float | None = DEFAULT_BUDGET_S) -> list[dict[str, Any]]:
    """Records for one OpInfo: one per sample per strategy."""
    name = op_id(op)
    if not op.supports_autograd:
        return _skip_records(name, "-", strategies, "op does not support autograd")
    if torch.float32 not in op.supported_dtypes("cpu"):
        return _skip_records(name, "-", strategies, "no float32 on CPU")
    records: list[dict] = []
    before = internals.dispatch_state()
    try:
        samples = list(_samples(op, all_samples))
    except Exception as e:  # noqa: BLE001
        return _skip_records(name, "-", strategies, f"sample_inputs fails: {first_line(str(e), 160)}")
    if not samples:
        return _skip_records(name, "-", strategies, "no samples")
    for i, sample in enumerate(samples):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p = prepare(op, sample)
                ref = _reference(p) if isinstance(p, Prepared) else p
            except Exception as e:  # noqa: BLE001
                ref = f"forward fails: {type(e).__name__}: {first_line(str(e), 160)}"
        if isinstance(ref, str):
            records.extend(_skip_records(name, str(i), strategies, ref))
            continue
        for s in strategies:
            rec = run_strategy(p, s, ref, max_in_dims=max_in_dims, budget_s=budget_s)
            records.append({"op": name, "sample": str(i), **rec})
    after = internals.dispatch_state()
    if after != before:  # a strategy leaked state: say so on this op's records
        leak = f"dispatch state changed: {before.describe_difference(after)}"
        internals.restore_stack_depth(before.depth)
        for r in records:
            r["message"] = (r["message"] + "; " if r["message"] else "") + leak
    return [{k: r.get(k) for k in RECORD_KEYS} for r in records]


def fallback_warnings_work() -> bool:
    """Probe: does vmap's slow fallback still warn? (Detection relies on the warning.)"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vmap(lambda q: torch.quantile(torch.arange(5.0), q))(torch.tensor([0.2, 0.7]))
    return bool(_fallbacks(caught))


def run_sweep(ops: str | Iterable[str] | None = None,
              strategies: str | Iterable[str] | None = SWEEP_STRATEGIES, all_samples: bool = False,
              *, max_in_dims: int | None = DEFAULT_MAX_IN_DIMS,
              budget_s: float | None = DEFAULT_BUDGET_S,
              progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """The sweep: a list of records (see ``RECORD_KEYS``), one per op x sample x strategy."""
    strategies = sweep_strategies(strategies)
    if max_in_dims is not None and max_in_dims < 1:
        raise BadInputError(f"max_in_dims must be >= 1 (or None for all), got {max_in_dims}")
    records: list[dict[str, Any]] = []
    for op in select_ops(ops):
        for r in sweep_op(op, strategies, all_samples=all_samples, max_in_dims=max_in_dims,
                          budget_s=budget_s):
            records.append(r)
            if progress:
                progress(r)
    return records


# ------------------------------------------------------------------------------ summaries
# Known mechanisms behind a functionalizing strategy failing where builtin passes: (pattern in the
# message or reason, explanation). First match wins.
MECHANISMS = [
    ("functionalization_assert", "functionalization met a non-functional tensor: the backward "
     "mutates or views a tensor built outside the functionalized region (from saved tensors) "
     "with a functional one"),
    ("doesn't work on out= or view ops", "the functionalized backward calls a view/out= op that "
     "has no batching rule, and vmap's fallback cannot run views"),
    ("requires special handling, and does not yet have a batching rule", "functionalization "
     "rewrites the backward's in-place write through an as_strided view (as_strided_backward "
     "writes into a zeros storage) into aten::as_strided_scatter, which has no batching rule and "
     "cannot use vmap's fallback"),
    ("no_batch_rule", "functionalization emits an op with no batching rule that the fallback "
     "cannot run"),
    ("vmap_inplace", "an in-place op still meets a batched operand: the tensor it writes into is "
     "not functionalized (e.g. created inside a node the strategy does not reach)"),
    ("data_dependent", "data-dependent shape or control flow under the functional wrapper"),
    ("mismatch", "wrong numbers: the functionalized backward differs from the unbatched builtin "
     "result (e.g. a mutation through an aliasing view that functionalization replays differently)"),
]


def mechanism(rec: dict[str, Any]) -> str:
    hay = " ".join(str(rec.get(k, "")) for k in ("status", "reason", "message"))
    for pattern, text in MECHANISMS:
        if pattern in hay:
            return text
    return f"{rec.get('error_class') or rec['status']}: {rec.get('message', '')}"


def _by_key(records: Sequence[dict]) -> dict[tuple[str, str], dict[str, dict]]:
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for r in records:
        out.setdefault((r["op"], r["sample"]), {})[r["strategy"]] = r
    return out


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts per strategy, regressions (builtin pass -> strategy fail/mismatch, with a mechanism),
    fixes (builtin fail -> strategy pass), slow-fallback ops per strategy, and the ops whose
    fallback functionalization removes (or introduces)."""
    strategies = list(dict.fromkeys(r["strategy"] for r in records))
    counts = {s: {k: 0 for k in (*STATUSES, "fallback", "timed_out")} for s in strategies}
    reasons: dict[str, dict[str, int]] = {s: {} for s in strategies}
    fallback_ops: dict[str, dict[str, int]] = {s: {} for s in strategies}
    for r in records:
        c = counts[r["strategy"]]
        c[r["status"]] += 1
        c["fallback"] += bool(r["fallback_ops"])
        c["timed_out"] += bool(r["timed_out"])
        if r["status"] == "fail":
            rs = reasons[r["strategy"]]
            rs[r["reason"]] = rs.get(r["reason"], 0) + 1
        for f in r["fallback_ops"]:
            fallback_ops[r["strategy"]][f] = fallback_ops[r["strategy"]].get(f, 0) + 1
    regressions, fixes = [], []
    batched_by: dict[str, list[str]] = {s: [] for s in strategies if s != "builtin"}
    new_fallback: dict[str, list[str]] = {s: [] for s in strategies if s != "builtin"}
    for (op, sample), per in _by_key(records).items():
        base = per.get("builtin")
        if base is None:
            continue
        for s, r in per.items():
            if s == "builtin" or r["status"] in ("skipped", "unavailable"):
                continue
            item = {"op": op, "sample": sample, "strategy": s, "status": r["status"],
                    "reason": r["reason"], "message": r["message"]}
            if base["status"] == "pass" and r["status"] in ("fail", "mismatch"):
                regressions.append({**item, "mechanism": mechanism(r)})
            elif base["status"] in ("fail", "mismatch") and r["status"] == "pass":
                fixes.append({**item, "builtin_reason": base["reason"] or base["status"],
                              "builtin_message": base["message"]})
            if base["status"] in ("skipped", "unavailable"):
                continue
            # Per ATen op: which fallbacks functionalization removes (e.g. an in-place op without
            # a batching rule becoming its batched out-of-place twin) or brings in (aten::copy).
            removed = sorted(set(base["fallback_ops"]) - set(r["fallback_ops"]))
            added = sorted(set(r["fallback_ops"]) - set(base["fallback_ops"]))
            if removed and r["status"] == "pass":
                batched_by[s].append(f"{op}[{sample}] ({', '.join(removed)})")
            if added:
                new_fallback[s].append(f"{op}[{sample}] ({', '.join(added)})")
    return {
        "strategies": strategies,
        "ops": len({r["op"] for r in records}),
        "records": len(records),
        "counts": counts,
        "fail_reasons": reasons,
        "regressions": regressions,
        "fixes": fixes,
        "fallback_ops": {s: dict(sorted(v.items(), key=lambda kv: -kv[1])) for s, v in fallback_ops.items()},
        "fallback_removed": batched_by,
        "fallback_introduced": new_fallback,
        "seconds": {s: round(sum(r["seconds"] or 0 for r in records if r["strategy"] == s), 1)
                    for s in strategies},
    }


def format_summary(summary: dict[str, Any], limit: int = 40) -> str:
    lines = [f"{summary['ops']} OpInfo ops, {summary['records']} records"]
    head = ["strategy", *STATUSES, "fallback", "timed_out", "seconds"]
    rows = [head] + [[s, *[str(summary["counts"][s][k]) for k in head[1:-1]],
                      str(summary["seconds"][s])] for s in summary["strategies"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    for s, rs in summary["fail_reasons"].items():
        if rs:
            lines.append(f"{s} failure reasons: " + ", ".join(f"{k or 'other'}={v}" for k, v in rs.items()))
    regs = summary["regressions"]
    lines.append(f"\nregressions (builtin passes, strategy fails): {len(regs)}")
    for r in regs[:limit]:
        lines.append(f"  {r['strategy']:8s} {r['op']}[{r['sample']}] {r['status']} {r['reason']}: "
                     f"{r['mechanism']} | {first_line(r['message'], 140)}")
    if len(regs) > limit:
        lines.append(f"  ... {len(regs) - limit} more (see the JSON)")
    lines.append(f"\nfixes (builtin fails, strategy passes): {len(summary['fixes'])}")
    for r in summary["fixes"][:limit]:
        lines.append(f"  {r['strategy']:8s} {r['op']}[{r['sample']}] (builtin: {r['builtin_reason']})")
    for s, ops in summary["fallback_ops"].items():
        if ops:
            lines.append(f"\n{s} slow-fallback ATen ops (records): "
                         + ", ".join(f"{k}={v}" for k, v in list(ops.items())[:limit]))
    for s, items in summary["fallback_removed"].items():
        lines.append(f"\n{s} turns {len(items)} builtin slow-fallback records (partly) into batched execution"
                     + (": " + "; ".join(items[:limit]) if items else ""))
    for s, items in summary["fallback_introduced"].items():
        if items:
            lines.append(f"{s} introduces the fallback in {len(items)} records: " + "; ".join(items[:limit]))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ files
def to_json(records: Sequence[dict], meta: dict | None = None) -> str:
    return json.dumps({"meta": meta or {}, "records": list(records)}, indent=1)


def to_csv(records: Sequence[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(RECORD_KEYS))
    w.writeheader()
    for r in records:
        w.writerow({**r, "fallback_ops": ";".join(r["fallback_ops"])})
    return buf.getvalue()


def load(path: str) -> list[dict[str, Any]]:
    """Records from a JSON (``{"meta", "records"}`` or a bare list) or CSV file of a sweep."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise BadInputError(f"cannot read coverage results {path!r}: {e.strerror}") from e
    if path.endswith(".csv"):
        out = []
        for row in csv.DictReader(io.StringIO(text)):
            row["fallback_ops"] = [x for x in row["fallback_ops"].split(";") if x]
            row["timed_out"] = row["timed_out"] == "True"
            for k in ("in_dims_tried", "in_dims_total"):
                row[k] = int(row[k] or 0)
            row["seconds"] = float(row["seconds"] or 0)
            row["max_abs_err"] = float(row["max_abs_err"]) if row["max_abs_err"] else None
            out.append(row)
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInputError(f"{path!r} is not a coverage JSON or CSV file: {e}") from e
    records = data.get("records") if isinstance(data, dict) else data
    if not isinstance(records, list) or (records and "strategy" not in records[0]):
        raise BadInputError(f"{path!r} holds no coverage records")
    return records


def load_meta(path: str) -> dict[str, Any]:
    with open(path) as f:
        data = json.load(f)
    return data.get("meta", {}) if isinstance(data, dict) else {}


# ------------------------------------------------------------------------------ views
_COLORS = {"pass": "#d4edda", "fail": "#f8d7da", "mismatch": "#fde2b8", "skipped": "#eeeeee",
           "unavailable": "#e2e3f3"}


def _change(per: dict[str, dict]) -> str:
    base = per.get("builtin")
    if base is None:
        return ""
    tags = []
    for s, r in per.items():
        if s == "builtin":
            continue
        if base["status"] == "pass" and r["status"] in ("fail", "mismatch"):
            tags.append(f"regression:{s}")
        elif base["status"] in ("fail", "mismatch") and r["status"] == "pass":
            tags.append(f"fix:{s}")
        if r["status"] == "pass" and set(base["fallback_ops"]) - set(r["fallback_ops"]):
            tags.append(f"batched:{s}")
    return " ".join(tags)


def table_html(records: Sequence[dict[str, Any]]) -> str:
    """A self-contained sortable HTML table (click a header), one row per op x sample, one
    column per strategy; no external scripts."""
    strategies = list(dict.fromkeys(r["strategy"] for r in records))
    head = ["op", "sample", *strategies, "change", "builtin fallback ops"]
    rows = []
    for (op, sample), per in _by_key(records).items():
        cells = [f"<td>{html.escape(op)}</td>", f"<td>{html.escape(sample)}</td>"]
        for s in strategies:
            r = per.get(s)
            if r is None:
                cells.append("<td></td>")
                continue
            text = r["status"] + (f" {r['reason']}" if r["reason"] else "")
            text += " +fb" if r["fallback_ops"] else ""
            text += " (timed out)" if r["timed_out"] else ""
            tip = "; ".join(x for x in (r["message"], ", ".join(r["fallback_ops"]),
                                        f"in_dims {r['in_dims_tried']}/{r['in_dims_total']}") if x)
            cells.append(f'<td style="background:{_COLORS.get(r["status"], "")}" '
                         f'title="{html.escape(tip)}">{html.escape(text)}</td>')
        base = per.get("builtin", {})
        cells.append(f"<td>{html.escape(_change(per))}</td>")
        cells.append(f"<td>{html.escape(', '.join(base.get('fallback_ops', [])))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    ths = "".join(f'<th onclick="funcbwdSort(this)" style="cursor:pointer">{html.escape(h)}</th>'
                  for h in head)
    script = """<script>
function funcbwdSort(th) {
  const table = th.closest('table'), body = table.tBodies[0];
  const i = Array.from(th.parentNode.children).indexOf(th);
  const asc = th.dataset.asc !== '1'; th.dataset.asc = asc ? '1' : '0';
  const rows = Array.from(body.rows);
  rows.sort((a, b) => a.cells[i].textContent.localeCompare(b.cells[i].textContent) * (asc ? 1 : -1));
  rows.forEach(r => body.appendChild(r));
}
</script>"""
    return (f'<table class="funcbwd-coverage" style="border-collapse:collapse;font-size:12px">'
            f"<thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>{script}")


def summary_figure(records: Sequence[dict[str, Any]]):
    """A plotly stacked bar per strategy: records by status, plus records with a slow fallback."""
    import plotly.graph_objects as go

    summary = summarize(records)
    strategies = summary["strategies"]
    fig = go.Figure()
    for status in STATUSES:
        fig.add_bar(name=status, x=strategies,
                    y=[summary["counts"][s][status] for s in strategies],
                    marker_color=_COLORS[status].replace("#eeeeee", "#bbbbbb"),
                    offsetgroup="status")
    fig.add_bar(name="slow fallback", x=strategies,
                y=[summary["counts"][s]["fallback"] for s in strategies],
                marker_color="#6c8ebf", offsetgroup="fallback")
    fig.update_layout(barmode="stack", title=f"vmap(vjp) over {summary['ops']} OpInfo ops",
                      yaxis_title="op samples", xaxis_title="strategy")
    return fig


# ------------------------------------------------------------------------------ CLI
def configure_coverage(p: argparse.ArgumentParser) -> None:
    p.epilog = ("strategies: builtin (torch as is), whole (the entire backward functionalized "
                "under vmap), hooks (each backward node functionalized by autograd hooks).\n"
                "status: pass | fail (classified reason) | mismatch | skipped | unavailable; "
                "'+fb' = vmap used its slow per-sample fallback.")
    p.add_argument("--ops", default=None, help="OpInfo names, comma-separated (a bare name "
                   "selects all its variants; default: the whole op_db)")
    p.add_argument("--strategies", default=",".join(SWEEP_STRATEGIES),
                   help=f"comma-separated (default {','.join(SWEEP_STRATEGIES)})")
    p.add_argument("--all-samples", action="store_true", help="every sample (default: the first)")
    p.add_argument("--max-in-dims", type=int, default=DEFAULT_MAX_IN_DIMS,
                   help=f"in_dims choices per sample (default {DEFAULT_MAX_IN_DIMS}; 0 = all)")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help="seconds per op sample and strategy before the remaining in_dims "
                   f"choices are skipped (default {DEFAULT_BUDGET_S}; 0 = no limit)")
    p.add_argument("--out", default=None, help="write the records here")
    p.add_argument("--format", choices=["json", "csv"], default=None,
                   help="file format (default: from --out's extension, else json)")
    p.add_argument("--load", default=None, help="summarize a saved run instead of sweeping")
    p.add_argument("--progress", action="store_true", help="print one line per op to stderr")


def main_coverage(args: argparse.Namespace) -> int:
    if args.load:
        records = load(args.load)
        print(format_summary(summarize(records)))
        return 0
    if args.max_in_dims < 0 or args.budget < 0:
        raise BadInputError("--max-in-dims and --budget must be >= 0 (0 = no limit)")
    fmt = args.format or ("csv" if (args.out or "").endswith(".csv") else "json")
    seen: set[str] = set()

    def progress(r: dict) -> None:
        if args.progress and r["op"] not in seen:
            seen.add(r["op"])
            print(f"[{len(seen)}] {r['op']}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    fallback_ok = fallback_warnings_work()
    records = run_sweep(args.ops, args.strategies, args.all_samples,
                        max_in_dims=args.max_in_dims or None, budget_s=args.budget or None,
                        progress=progress)
    meta = {"torch": torch.__version__, "ops": args.ops or "all", "strategies": args.strategies,
            "all_samples": args.all_samples, "max_in_dims": args.max_in_dims,
            "budget_s": args.budget, "batch": BATCH, "atol": ATOL, "rtol": RTOL,
            "fallback_detection": "performance-drop warning" if fallback_ok
            else "UNAVAILABLE (the fallback did not warn)",
            "wall_seconds": round(time.perf_counter() - start, 1)}
    summary = summarize(records)
    print(format_summary(summary))
    print(f"\nwall time {meta['wall_seconds']} s; fallback detection: {meta['fallback_detection']}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(to_json(records, meta) if fmt == "json" else to_csv(records))
        print(f"wrote {len(records)} records to {args.out}")
    return 0
