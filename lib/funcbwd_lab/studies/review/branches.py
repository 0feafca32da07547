"""What happens to one of today's ``isTensorSubclassLike`` branches under the three choices: keep it
(the status quo), rewrite it out of place (PR #46674's pattern: one path, no guard), or delete its
out-of-place side (the fast path alone, the large change's premise). Measured per counted site of
the live registry (the Python re-creations of torch/csrc/autograd/FunctionsManual.cpp's sites,
``funcbwd_lab.ops.live``), on each site's first sample, CPU, plain float tensors:

* **eager**: the out-of-place path's time over the fast path's, vmap off (what rewriting costs
  every user); thread CPU time, one torch thread, median of :data:`ROUNDS` interleaved rounds;
* **fake tracing** (AOTAutograd's recorder: ``make_fx(tracing_mode="fake")``): the in-place ATen
  calls each path records, and whether the two graphs are the same after functionalization;
* **CompositeCompliance** (``torch.testing._internal.composite_compliance.check_all_permutations``,
  what test/test_ops.py's ``CompositeCompliance`` tests run): does the path pass with every
  subset of its tensor arguments wrapped in the compliance subclass;
* **what the recorder sees of torch's own formula**: the site's in-place calls
  (``Site.fast_calls``) that torch's C++ backward (or forward-mode formula) of the site's op makes
  eagerly (torch.profiler: no dispatch mode) and in a ``make_fx`` trace of the same computation
  (a dispatch mode: ``isTensorSubclassLike`` is then true for every tensor, so the C++ guard takes
  the out-of-place branch). The prototype's ``traced_backward`` records with ``make_fx``.

``python -m funcbwd_lab.studies.review.branches --out data/review-branches.json`` (about a
minute). Nothing here runs torch's C++ fast paths under a transform: the eager and tracing columns
run the Python re-creations; only the last column runs torch's own C++ formulas.
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from funcbwd_lab.studies.review import saved

SCHEMA = "funcbwd-review-branches/1"
FILE = "review-branches.json"
ROUNDS = 7


def _sites() -> list[tuple[Any, Any]]:
    import funcbwd_lab.ops.live  # noqa: F401 - registers the sites
    from funcbwd_lab.ops import registry
    from funcbwd_lab.ops.live.common import BACKWARD_SITES, JVP_SITES

    sites = {**BACKWARD_SITES, **JVP_SITES}
    return [(registry.get_op(n), s) for n, s in sites.items() if s.counted and s.kind != "control"]


def _calls(spec: Any, smp: Any) -> tuple[tuple, Callable, Callable]:
    """The formula's arguments on the sample, and the fast and out-of-place paths on them."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        outs = spec.outputs_tuple(spec.torch_op(*smp.args))
    if spec.kind == "jvp":
        extra = tuple(torch.randn(smp.args[p].shape, generator=gen, dtype=smp.args[p].dtype)
                      for p in smp.diff)
    else:
        extra = tuple(torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs)
    fa = tuple(spec.formula_args(smp.args, outs, extra))
    return fa, (lambda *a: spec.formula(*a)), (lambda *a: spec.handfixed(*a))


def _time_ratio(fast: Callable, slow: Callable, fa: tuple) -> float:
    from funcbwd_lab.studies.bench import timing

    with timing.one_torch_thread():
        nf = timing.calibrate(lambda: fast(*fa), 0.005, 2000)
        ns = timing.calibrate(lambda: slow(*fa), 0.005, 2000)
        ratios = []
        for _ in range(ROUNDS):
            f = timing.sample_once(lambda: fast(*fa), nf)["thread_cpu"]
            s = timing.sample_once(lambda: slow(*fa), ns)["thread_cpu"]
            ratios.append(s / f if f > 0 else float("nan"))
    return round(statistics.median(ratios), 3)


def _inplace(graph: Any) -> list[str]:
    out = []
    for n in graph.graph.nodes:
        if n.op == "call_function" and hasattr(n.target, "overloadpacket"):
            name = n.target.overloadpacket.__name__
            if name.endswith("_") and not name.startswith("_"):
                out.append(name)
    return sorted(out)


def _ops(graph: Any) -> list[str]:
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]


def _fake(fast: Callable, slow: Callable, fa: tuple) -> dict[str, Any]:
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functionalize

    g = {k: make_fx(fn, tracing_mode="fake")(*fa) for k, fn in (("fast", fast), ("slow", slow))}
    f = {k: make_fx(functionalize(fn), tracing_mode="fake")(*fa)
         for k, fn in (("fast", fast), ("slow", slow))}
    return {"inplace_fast": _inplace(g["fast"]), "inplace_slow": _inplace(g["slow"]),
            "ops_fast": len(_ops(g["fast"])), "ops_slow": len(_ops(g["slow"])),
            "functionalized_same": _ops(f["fast"]) == _ops(f["slow"])}


def _compliance(fn: Callable, fa: tuple) -> str:
    from torch.testing._internal import composite_compliance as cc

    def equal(a: Any, b: Any) -> None:
        torch.testing.assert_close(a, b)

    try:
        cc.check_all_permutations(fn, fa, {}, equal)
        return "pass"
    except Exception as e:  # noqa: BLE001 - the verdict is the error's first line
        first = str(e).strip().splitlines()
        return "fail: " + (first[0][:100] if first else type(e).__name__)


def _recorded(spec: Any, smp: Any, fast_calls: tuple) -> dict[str, Any]:
    """torch's own formula of the site's op: its in-place calls eagerly (profiler) and in a
    make_fx trace (a dispatch mode)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.profiler import ProfilerActivity, profile

    args = smp.args
    diff = list(smp.diff)
    gen = torch.Generator().manual_seed(1)

    def run(*xs: torch.Tensor) -> tuple:
        full = list(args)
        for p, x in zip(diff, xs):
            full[p] = x
        if spec.kind == "jvp":
            import torch.autograd.forward_ad as fwAD

            with fwAD.dual_level():
                for j, p in enumerate(diff):
                    full[p] = fwAD.make_dual(full[p], tangents[j])
                out = spec.outputs_tuple(spec.torch_op(*full))
                return tuple(fwAD.unpack_dual(o).tangent for o in out)
        xs_req = [x.detach().requires_grad_() for x in xs]
        for p, x in zip(diff, xs_req):
            full[p] = x
        out = [o for o in spec.outputs_tuple(spec.torch_op(*full)) if o.requires_grad]
        return torch.autograd.grad(out, xs_req, [torch.ones_like(o) for o in out],
                                   allow_unused=True)

    tangents = [torch.randn(args[p].shape, generator=gen, dtype=args[p].dtype) for p in diff]
    primals = [args[p] for p in diff]
    wanted = {c.rstrip("_") + "_" for c in fast_calls}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(*primals)
    eager = sorted({e.name.split("::", 1)[1] for e in prof.events()
                    if e.name.startswith("aten::") and e.name.split("::", 1)[1] in wanted})
    traced = sorted(set(_inplace(make_fx(run)(*primals))) & wanted)
    return {"eager": eager, "traced": traced}


def run() -> dict[str, Any]:
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for spec, site in _sites():
            smp = spec.samples()[0]
            fa, fast, slow = _calls(spec, smp)
            row: dict[str, Any] = {"site": site.site_id, "kind": site.kind, "op": spec.name}
            row["eager_slow_over_fast"] = _time_ratio(fast, slow, fa)
            try:
                row["fake"] = _fake(fast, slow, fa)
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                row["fake"] = {"error": str(e).splitlines()[0][:100]}
            row["compliance_fast"] = _compliance(fast, fa)
            row["compliance_slow"] = _compliance(slow, fa)
            try:
                row["torch_formula"] = _recorded(spec, smp, site.fast_calls)
            except Exception as e:  # noqa: BLE001
                row["torch_formula"] = {"error": str(e).splitlines()[0][:100]}
            rows.append(row)
            print(f"{site.site_id}: eager {row['eager_slow_over_fast']}x, compliance "
                  f"{row['compliance_fast'][:4]}/{row['compliance_slow'][:4]}", flush=True)
    return {"schema": SCHEMA, "torch": torch.__version__, "rounds": ROUNDS, "rows": rows,
            "date": time.strftime("%Y-%m-%d"), "subclass_like": subclass_like(),
            "scalar_branches": scalar_branches()}


def subclass_like() -> dict[str, Any]:
    """What ``isTensorSubclassLike`` tests, read from the installed torch's own header
    (ATen/TensorSubclassLikeUtils.h): the dispatch keys, and whether any dispatch mode makes it
    true for every tensor."""
    import re

    header = Path(torch.__file__).parent / "include" / "ATen" / "TensorSubclassLikeUtils.h"
    if not header.exists():
        return {}
    text = header.read_text()
    body = text[text.index("kFunctorchWrappedTensors"):text.index("inline bool isTensorSubclassLike")]
    keys = re.findall(r"DispatchKey::(\w+)", body) + re.findall(r"BackendComponent::(\w+)", body)
    fn = text[text.index("inline bool isTensorSubclassLike"):]
    fn = fn[:fn.index("}") + 1]
    return {"keys": keys, "dispatch_mode_makes_true": "dispatch_mode_enabled()" in fn,
            "git": torch.version.git_version}


def scalar_branches() -> dict[str, Any]:
    """norm_jvp (FunctionsManual.cpp at 002ca6715ba1, re-created in funcbwd_lab.ops.live) branches
    on its scalar p: the graph make_fx records differs with p, so a graph keyed without p's value,
    or with p as a graph input, would run the wrong branch."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from funcbwd_lab.ops.live.jvp_reductions import norm_jvp_fast

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    t = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    graphs = {}
    for p in (1.0, float("inf")):
        norm = torch.linalg.vector_norm(x, p, 1, False)
        def jvp_at(order: float) -> Any:
            return lambda a, b, n: norm_jvp_fast(a, b, order, n, [1], False)
        g = make_fx(jvp_at(p))(x, t, norm)
        graphs["inf" if p == float("inf") else str(p)] = _ops(g)
    return {"op": "norm_jvp", "graphs": graphs, "same": len(set(map(tuple, graphs.values()))) == 1}


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """Counts over the sites (what the RFC says)."""
    rows = doc["rows"]
    ratios = sorted(r["eager_slow_over_fast"] for r in rows)
    fake = [r["fake"] for r in rows if "error" not in r["fake"]]
    rec = [r["torch_formula"] for r in rows if "error" not in r["torch_formula"]]
    return {
        "sites": len(rows), "eager_median": statistics.median(ratios) if ratios else None,
        "eager_worst": ratios[-1] if ratios else None,
        "eager_slower": sum(x > 1.0 for x in ratios),
        "fake_traced": len(fake),
        "fake_fast_inplace": sum(bool(f["inplace_fast"]) for f in fake),
        "fake_slow_inplace": sum(bool(f["inplace_slow"]) for f in fake),
        "functionalized_same": sum(f["functionalized_same"] for f in fake),
        "compliance_fast_fail": sum(r["compliance_fast"] != "pass" for r in rows),
        "compliance_slow_fail": sum(r["compliance_slow"] != "pass" for r in rows),
        "recorded": len(rec), "eager_takes_fast": sum(bool(r["eager"]) for r in rec),
        "trace_takes_fast": sum(bool(r["traced"]) for r in rec),
    }


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv,
                      summary=lambda d: str(summary(d)))


if __name__ == "__main__":
    raise SystemExit(main())
