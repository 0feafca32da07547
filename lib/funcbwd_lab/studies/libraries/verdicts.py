"""From the saved records to verdicts and counts: what the docs, the notebook and the tests quote.

One verdict per (case, transform) (:data:`VERDICTS`), from the truth and the arms' records:

==============  ==========================================================================
``pass``         plain torch.func equals the per-sample loop (and so does the mode)
``fixed``        plain fails; the mode equals the loop (outputs and the caller's state)
``fixed_opt_in`` plain fails; only the mode with ``state_writes="discard"`` answers: outputs
                 equal the loop's, the caller's state kept as it was (the difference from the
                 loop's state is stated)
``refused``      plain fails; the mode raises funcbwd's own error naming the cause
``fails``        plain fails; so does the mode, with torch's error (not fixed)
``regression``   plain passes; the mode fails
``wrong``        the mode returns outputs (or leaves the caller's state) other than the loop's,
                 with no error: the worst outcome
``inherited``    plain torch.func already returns other values than the loop's and the mode
                 returns the same (torch's answer passed through; reported, not the tool's);
                 or forward mode where torch's forward AD defines another derivative than
                 the reverse-mode loop (:data:`FORWARD_SEMANTICS`, each checked by a test)
``no_reference`` eager autograd itself refuses the call (no per-sample loop to compare with)
``unknown``      the case did not finish within its budget (timeout or crash)
==============  ==========================================================================
"""

from __future__ import annotations

import collections
from typing import Any

VERDICTS = ("pass", "fixed", "fixed_opt_in", "refused", "fails", "regression", "wrong",
            "inherited", "no_reference", "unknown")

#: (text in an error message, the cause it names), first match wins
CAUSES = (
    ("crashed the process", "torch crashes the process (segmentation fault)"),
    ("Batch norm got a batched tensor", "BatchNorm running statistics under vmap"),
    ("would mutate a captured Tensor", "grad transform: a captured tensor written"),
    ("must override the setup_context", "old-style autograd.Function"),
    ("modified by an inplace operation", "a tensor autograd saved, overwritten"),
    ("inplace arithmetic", "vmap: in-place write of a batched value"),
    ("doesn't match the broadcast shape", "vmap: in-place write of a batched value"),
    ("aten::equal", "no batching rule: aten::equal"),
    ("_assert_async", "no batching rule: aten::_assert_async"),
    ("Batching rule not implemented", "no batching rule"),
    ("mutating directly with `.data`", ".data under vmap"),
    (".data", ".data under vmap"),
    ("out= or view ops", "op(..., out=t) under vmap"),
    ("not made in the call", "write into a tensor an op returned (per-sample stage)"),
    ("dynamic shape", "data-dependent shape (nonzero, masked_select)"),
    ("data-dependent control flow", "value read: data-dependent control flow"),
    (".item()", "value read: .item()"),
    ("forward AD", "no forward-mode AD formula"),
    ("is a view and is being modified inplace", "in-place write into a multi-output view"),
    ("loss wrote into one of its inputs", "a write into an input"),
    ("leaf Variable that requires grad", "in-place write into a leaf that requires grad"),
    ("requires_grad_()", "torch.autograd API called inside a transform"),
    ("allclose", "no batching rule: aten::allclose"),
    ("caller's state", "caller's state differs from the loop's"),
    ("max abs error", "value differs from the loop"),
)


#: (case, transform) -> why torch's forward mode differs from the reverse-mode loop there. torch's
#: forward AD ignores ``torch.no_grad`` (tangents flow through it); reverse mode does not. The
#: adaptive solvers choose the next step size under ``@torch.no_grad()``
#: (``torchdiffeq._impl.misc._optimal_step_size``): forward mode differentiates through the step
#: size, the loop's reverse mode does not. tests/test_libraries.py checks that funcbwd's jacfwd
#: equals reverse mode with the step size differentiated (within 1e-10).
_STEP_SIZE = ("torch's forward AD differentiates through the step size chosen under no_grad; "
              "the reverse-mode loop does not (funcbwd's jacfwd equals reverse mode through the "
              "step size: tests/test_libraries.py)")
FORWARD_SEMANTICS = {(f"torchdiffeq.odeint({m})", t): _STEP_SIZE
                     for m in ("dopri5", "bosh3", "adaptive_heun", "dopri8")
                     for t in ("jacfwd", "hessian")}


def cause(message: str | None) -> str:
    """The cause an error or difference message names (``other`` if none)."""
    text = message or ""
    return next((c for m, c in CAUSES if m in text), "other")


def _failed(rec: dict | None) -> bool:
    return rec is not None and rec.get("status") in ("error", "wrong", "state")


def verdict(cell: dict) -> tuple[str, str]:
    """(verdict, detail) of one (case, transform) from its records (see the module docstring)."""
    truth = cell.get("truth", {})
    if truth.get("status") == "noref":
        return "no_reference", truth.get("message", "")
    plain, mode, discard = cell.get("plain"), cell.get("mode"), cell.get("discard")
    if (plain or {}).get("status") == "wrong" and (mode or {}).get("status") == "wrong" and \
            mode.get("max_abs_err") == plain.get("max_abs_err"):
        return "inherited", plain.get("message", "")
    if mode is not None and mode.get("status") == "wrong":
        return "wrong", mode.get("message", "")
    if plain is not None and plain.get("status") == "ok":
        if mode is None or mode.get("status") == "ok":
            return "pass", ""
        if mode.get("status") == "state":
            return "wrong", mode.get("message", "")
        return "regression", mode.get("message", "")
    if mode is not None and mode.get("status") == "ok":
        return "fixed", ""
    if discard is not None and (discard.get("status") == "ok" or (
            discard.get("status") == "state" and discard.get("state_as_before"))):
        return "fixed_opt_in", "state kept as it was; the loop's differs"
    if mode is not None and mode.get("status") == "state":
        return "wrong", mode.get("message", "")
    if mode is not None and mode.get("refused"):
        return "refused", mode.get("message", "")
    return "fails", (mode or plain or {}).get("message", "")


def rows(data: dict) -> list[dict[str, Any]]:
    """One row per (case, transform): case, library, group, transform, verdict, detail, the
    plain failure's cause and the cause the mode ends with."""
    out = []
    for r in data["results"]:
        info = data["cases"].get(r["case"], {})
        if "unknown" in r:
            for t in info.get("transforms", []):
                out.append({"case": r["case"], "library": info.get("library"),
                            "group": info.get("group"), "transform": t, "verdict": "unknown",
                            "detail": f"{r['unknown']}: {r.get('message', '')[:120]}",
                            "plain_cause": None, "mode_cause": None})
            continue
        # torch's own transform already differs from the loop on this case (a plain cell is
        # wrong): where the mode's answer is wrong too, it is torch's, passed through
        torch_wrong = [t for t, c in r["cells"].items() if (c.get("plain") or {}).get("status")
                       == "wrong"]
        for t, cell in r["cells"].items():
            v, detail = verdict(cell)
            if v == "wrong" and (r["case"], t) in FORWARD_SEMANTICS:
                v, detail = "inherited", f"{FORWARD_SEMANTICS[r['case'], t]}: {detail}"
            if v == "wrong" and torch_wrong and (cell.get("mode") or {}).get("status") == "wrong":
                v, detail = "inherited", (f"torch's own {', '.join(torch_wrong)} already differs "
                                          f"from the loop on this case: {detail}")
            plain, mode = cell.get("plain") or {}, cell.get("mode") or {}
            out.append({"case": r["case"], "library": info.get("library"),
                        "group": info.get("group"), "transform": t, "verdict": v,
                        "detail": detail,
                        "plain_cause": cause(plain.get("message")) if _failed(plain) else None,
                        "mode_cause": cause(mode.get("message")) if _failed(mode) else None,
                        "plain_seconds": plain.get("seconds"), "mode_seconds": mode.get("seconds")})
    return out


def summarize(data: dict) -> dict[str, Any]:
    """The counts and their basis (see docs/libraries.md)."""
    rs = rows(data)
    count = collections.Counter(r["verdict"] for r in rs)
    plain_failing = [r for r in rs if r["verdict"] in
                     ("fixed", "fixed_opt_in", "refused", "fails", "inherited")] + \
        [r for r in rs if r["verdict"] == "wrong" and r["plain_cause"]]
    fixed = count["fixed"] + count["fixed_opt_in"]
    libraries = sorted({c["library"] for c in data["cases"].values()})
    by_library = {lib: dict(collections.Counter(r["verdict"] for r in rs if r["library"] == lib))
                  for lib in libraries}
    left = collections.Counter(r["mode_cause"] or cause(r["detail"]) for r in rs
                               if r["verdict"] in ("fails", "refused"))
    plain_causes = collections.Counter(r["plain_cause"] for r in plain_failing)
    return {
        "cases": len(data["cases"]), "libraries": libraries,
        "functions": sum(1 for c in data["cases"].values()),
        "control_cases": sum(1 for c in data["cases"].values() if c["group"] == "control"),
        "cells": len(rs), "verdicts": {v: count.get(v, 0) for v in VERDICTS},
        "plain_failing": len(plain_failing), "fixed": fixed,
        "fixed_pct": round(100.0 * fixed / len(plain_failing), 1) if plain_failing else None,
        "plain_ok": count["pass"] + count["regression"] +
        sum(1 for r in rs if r["verdict"] == "wrong" and not r["plain_cause"]),
        "by_library": by_library, "left_by_cause": dict(left.most_common()),
        "plain_failing_by_cause": dict(plain_causes.most_common()),
        "refused": [(r["case"], r["transform"], r["detail"][:120]) for r in rs
                    if r["verdict"] == "refused"],
        "wrong": [(r["case"], r["transform"], r["detail"][:160]) for r in rs
                  if r["verdict"] == "wrong"],
        "regressions": [(r["case"], r["transform"], r["detail"][:160]) for r in rs
                        if r["verdict"] == "regression"],
        "unknown": [(r["case"], r["transform"]) for r in rs if r["verdict"] == "unknown"],
        "discard_opt_in": data.get("discard_opt_in", False),
    }
