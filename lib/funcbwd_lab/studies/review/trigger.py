"""Which transforms need the mechanism at all? The in-place formulas (the legacy formulas of the
test and extended groups, and the fast path of every live site of FunctionsManual.cpp) run under
one transform at a time, as written (strategy ``plain``: nothing functionalized), every sample,
each result compared with torch's own through ``torch.func``:

* backward formulas: ``vjp`` alone and ``grad`` alone (no vmap level), and ``vmap`` over the
  vjp's cotangents (the matrix's ``vmap_cotangents``);
* forward-mode formulas: ``jvp`` alone, and ``vmap`` over the jvp's tangents (``vmap_jvp``).

If every formula passes under ``vjp``/``grad``/``jvp`` alone, the prologue's trigger can be a vmap
level, not any functorch layer (today a ``grad`` level already makes ``isTensorSubclassLike`` true:
``FuncTorchGradWrapper`` is in its key set, so the C++ branches take the out-of-place path there).
``python -m funcbwd_lab.studies.review.trigger --out data/review-trigger.json`` (about a minute).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from funcbwd_lab.studies.review import saved

SCHEMA = "funcbwd-review-trigger/1"
FILE = "review-trigger.json"
GROUPS = ("test", "extended", "live")
#: transform -> does it hold a vmap level
VMAP = {"vjp": False, "grad": False, "jvp": False, "vmap_cotangents": True, "vmap_jvp": True}


def _one(spec: Any, smp: Any, transform: str) -> str:
    from funcbwd.compare import Mismatch, check_close
    from funcbwd_lab.run import runner
    from funcbwd_lab.run.scenario import bind, torch_bind
    from funcbwd_lab.strategies import get_strategy

    if transform in ("vmap_cotangents", "vmap_jvp"):
        r = runner.run(spec, transform, "plain", smp)
        return r.status if r.status != "fail" else f"fail: {r.reason or 'error'}"
    st = get_strategy("plain")
    args, diff = smp.args, list(smp.diff)
    prim = [args[p] for p in diff]
    f, ref = bind(spec, st, args, diff), torch_bind(spec, args, diff)
    gen = torch.Generator().manual_seed(0)

    def results(g: Any) -> Any:
        if transform == "jvp":
            return torch.func.jvp(g, tuple(prim), tuple(tan))[1]
        if transform == "vjp":
            return torch.func.vjp(g, *prim)[1](tuple(cts))
        argnums = tuple(range(len(prim)))  # grad of <outs, cts>: one scalar, every primal
        return torch.func.grad(lambda *x: sum((o * c).sum() for o, c in zip(g(*x), cts)),
                               argnums)(*prim)

    tan = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in prim]
    with torch.no_grad():
        outs = ref(*prim)
    cts = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    try:
        want = results(ref)
    except Exception:  # noqa: BLE001 - torch's own raises on this sample: no verdict
        return "reference raises"
    try:
        got = results(f)
        check_close(list(got), list(want))
        return "pass"
    except Mismatch:
        return "mismatch"
    except Exception as e:  # noqa: BLE001 - the cell's outcome
        from funcbwd_lab.run.outcomes import classify

        try:
            return f"fail: {classify(e)}"
        except Exception:  # noqa: BLE001
            return f"fail: {type(e).__name__}"


def run() -> dict[str, Any]:
    import funcbwd_lab.ops.live  # noqa: F401 - registers the live sites
    from funcbwd_lab.ops import registry
    from funcbwd_lab.ops.live.common import BACKWARD_SITES, JVP_SITES

    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for group in GROUPS:
            for name in registry.op_names(group):
                site = BACKWARD_SITES.get(name) or JVP_SITES.get(name)
                if site is not None and (not site.counted or site.kind == "control"):
                    continue
                spec = registry.get_op(name)
                transforms = (("jvp", "vmap_jvp") if spec.kind == "jvp"
                              else ("vjp", "grad", "vmap_cotangents"))
                for i, smp in enumerate(spec.samples()):
                    for t in transforms:
                        row = {"group": group, "op": name, "sample": i, "transform": t,
                               "vmap": VMAP[t], "status": _one(spec, smp, t)}
                        if (not VMAP[t] and row["status"] not in ("pass", "reference raises")
                                and spec.handfixed is not None):  # the out-of-place path too?
                            oop = dataclasses.replace(spec, name=f"{name}_out_of_place",
                                                      formula=spec.handfixed)
                            row["out_of_place"] = _one(oop, smp, t)
                        rows.append(row)
            print(f"{group}: {sum(r['group'] == group for r in rows)} runs", flush=True)
    return {"schema": SCHEMA, "torch": torch.__version__, "rows": rows,
            "summary": summary(rows)}


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """transform -> status -> sample runs (a failure's reason kept)."""
    out: dict[str, Counter] = {}
    for r in rows:
        out.setdefault(r["transform"], Counter())[r["status"]] += 1
    return {t: dict(c) for t, c in out.items()}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv,
                      summary=lambda d: str(d["summary"]))


if __name__ == "__main__":
    raise SystemExit(main())
