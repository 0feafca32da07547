"""The one place the study compares a transform with its truth: a per-sample loop of eager
autograd on the same call.

For a ``function`` case the corpus's machinery (:mod:`funcbwd_lab.studies.yourcode.transforms`)
computes vmap, vmap(vjp), vmap(jacrev), jacfwd and hessian and their per-sample loops; this module
adds a bare ``jacrev`` (``torch.func.jacrev(g)(x_0)`` against ``torch.autograd.functional
.jacobian``), per-sample gradients of a model's loss (``functional_call`` + ``vmap(grad(loss))``
against ``torch.autograd.grad`` of each sample's loss, one sample at a time) and Opacus's
functorch grad sampler (``p.grad_sample`` against the same loop). Every run builds its own
objects (:attr:`LibCase.build`), so the loop and each arm start from the same state; after each,
the owner's buffers are recorded: the caller's state, compared with the loop's too.

:func:`run_cell` returns one record per arm (``status``: ``ok``, ``wrong`` (outputs differ from
the loop), ``state`` (outputs right, the caller's state afterwards not the loop's), ``error``
(raised; ``refused`` when the error is funcbwd's own), ``n/a`` (the arm has nothing to run)) or
``noref`` for the cell (the loop itself raised: eager autograd refuses the call).
"""

from __future__ import annotations

import contextlib
import inspect
import time
import warnings
from typing import Any, Callable

import torch
from torch.autograd import functional as AF

import funcbwd
from funcbwd.compare import Comparison, compare
from funcbwd.errors import first_line
from funcbwd.tolerances import Tolerance, tolerance
from funcbwd_lab.studies.libraries.case import Built, LibCase
from funcbwd_lab.studies.yourcode import transforms as T

BATCH = T.BATCH  # distinct samples per batch (3)
SHARED = ("vmap", "vmap_vjp", "vmap_jacrev", "jacfwd", "hessian")  # the corpus computes these
ARMS = ("plain", "mode", "discard")


#: float64: 1e-6 (the project's 1e-9 exists to catch a float32 computation in a float64 cell;
#: here a library's batched kernels (vmap's batching rules, e.g.
#: binary_cross_entropy_with_logits) and its per-sample ones differ by float64 roundoff, and a
#: hessian (jacfwd of jacrev against autograd's double backward) through a transformer or a
#: state-space model amplifies it: 7e-7 at most seen, far below any real difference (0.02 and up))
FLOAT64 = Tolerance(1e-6, 1e-6, "float64 roundoff of batched vs per-sample kernels, hessians")


def tol(dtype: torch.dtype) -> Tolerance:
    """float32 (models): upstream's tolerance for functorch's compositions (1e-4, test_ops.py):
    a batched and a per-sample computation of the same ops differ by reduction order; float64
    (functions): :data:`FLOAT64`; integers exact."""
    if dtype == torch.float64:
        return FLOAT64
    return tolerance(dtype, None, "vmapvjp")


# ------------------------------------------------------------------------------ the arms
def discard_available() -> bool:
    """Does ``funcbwd.allow_inplace`` accept the opt-in ``state_writes="discard"`` yet?"""
    return "state_writes" in inspect.signature(funcbwd.allow_inplace).parameters


def arm_context(arm: str) -> Callable[[], Any]:
    if arm == "plain":
        return contextlib.nullcontext
    if arm == "mode":
        return funcbwd.allow_inplace
    if arm == "discard":
        return lambda: funcbwd.allow_inplace(state_writes="discard")
    raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")


# ------------------------------------------------------------------------------ state
def state_of(built: Built) -> list[tuple[str, torch.Tensor]]:
    """The caller's state after a call: the owner's buffers (copies), by name."""
    if built.owner is None:
        return []
    return [(n, b.detach().clone()) for n, b in built.owner.named_buffers()]


def _cmp(got: list, want: list) -> Comparison:
    return compare([g for _, g in got], [w for _, w in want], tol) if got or want else \
        Comparison(True, 0.0, 0.0)


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, dict):
        return [out[k] for k in sorted(out)]
    return list(out) if isinstance(out, (tuple, list)) else [out]


# ------------------------------------------------------------------------------ model transforms
def _loss(case: LibCase, built: Built, out: Any, target: torch.Tensor) -> torch.Tensor:
    logits = getattr(out, "logits", out)
    return torch.nn.functional.cross_entropy(logits, target)


def per_sample_grads(case: LibCase, built: Built, x: torch.Tensor, y: torch.Tensor) -> dict:
    """The torch.func tutorial's per-sample gradients, as written there."""
    from torch.func import functional_call, grad, vmap

    model = built.fn
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0)
        targets = target.unsqueeze(0)
        predictions = functional_call(model, (params, buffers), (batch,))
        return _loss(case, built, predictions, targets)

    return vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)


def opacus_grad_samples(case: LibCase, built: Built, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Opacus's functorch grad sampler as its users run it: wrap, forward, backward, read."""
    from opacus import GradSampleModule

    gsm = GradSampleModule(built.fn, batch_first=True, loss_reduction="sum", force_functorch=True)
    out = gsm(x)
    torch.nn.functional.cross_entropy(getattr(out, "logits", out), y, reduction="sum").backward()
    return {n: p.grad_sample for n, p in built.fn.named_parameters() if p.requires_grad}


def model_loop(case: LibCase, built: Built, x: torch.Tensor, y: torch.Tensor) -> dict:
    """The truth of both: each sample's loss alone, ``torch.autograd.grad``, one at a time."""
    model = built.fn
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        loss = _loss(case, built, model(x[i:i + 1]), y[i:i + 1])
        rows.append(torch.autograd.grad(loss, params, allow_unused=True))
    return {n: torch.stack([torch.zeros_like(p) if r[j] is None else r[j] for r in rows])
            for j, (n, p) in enumerate(zip(names, params))}


# ------------------------------------------------------------------------------ one transform
def computed(transform: str, case: LibCase, built: Built, args: tuple, cts: Any) -> Any:
    """``built`` under ``transform`` on batched ``args``."""
    if transform in SHARED:
        return T.transformed(transform, built.fn, case, args, cts)
    if transform == "jacrev":
        one = T._entries(case, args)[0]
        return torch.func.jacrev(T._g(built.fn, one, case.diff))(one[case.diff])
    if transform == "per_sample_grad":
        return per_sample_grads(case, built, *args)
    if transform == "opacus":
        return opacus_grad_samples(case, built, *args)
    raise ValueError(f"unknown transform {transform!r}")


def truth(transform: str, case: LibCase, built: Built, args: tuple, cts: Any) -> Any:
    """The per-sample loop of eager autograd that :func:`computed` must equal."""
    if transform in SHARED:
        return T.loop(transform, built.fn, case, args, cts)
    if transform == "jacrev":
        one = T._entries(case, args)[0]
        return AF.jacobian(T._g(built.fn, one, case.diff), one[case.diff])
    if transform in ("per_sample_grad", "opacus"):
        return model_loop(case, built, *args)
    raise ValueError(f"unknown transform {transform!r}")


def inputs(case: LibCase, transform: str, size: int = BATCH) -> tuple[tuple, Any]:
    """(batched args, cotangents) for ``transform``."""
    args = T.batch_args(case, size)
    cts = None
    if transform == "vmap_vjp":
        with torch.no_grad():
            out = case.build().fn(*case.sample(0))
        cts = T.cotangents(case, out, size)
    return args, cts


def fresh(args: tuple) -> tuple:
    """Copies of the batched arguments: a call that writes into its own inputs (torchaudio's
    ``dcshift`` does) must not change what the next run sees."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _error(e: BaseException) -> dict:
    return {"status": "error", "error_type": type(e).__name__,
            "refused": isinstance(e, funcbwd.FuncbwdError),
            "message": first_line(str(e), 300)}


def run_arm(arm: str, transform: str, case: LibCase, args: tuple, cts: Any, want: Any,
            want_state: list, before: list) -> dict:
    """One arm of one cell (see the module docstring); the mode runs twice (a fresh build
    each), its second call going straight to what worked on the first."""
    if arm == "discard" and not discard_available():
        return {"status": "n/a", "message": "opt-in not available: funcbwd.allow_inplace "
                                            "takes no state_writes yet"}
    rec: dict = {}
    for attempt in range(2 if arm != "plain" else 1):
        built = case.build()
        start = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught, arm_context(arm)():
                warnings.simplefilter("always")
                got = computed(transform, case, built, fresh(args), cts)
        except Exception as e:  # noqa: BLE001 - the failure is the finding
            rec = _error(e)
            break
        out = compare(_flat(got), _flat(want), tol)
        state = state_of(built)
        vs_loop = _cmp(state, want_state)
        vs_before = _cmp(state, before)
        rec = {"status": "ok", "seconds": round(time.perf_counter() - start, 3),
               "max_abs_err": out.max_abs_err, "warnings": sorted({first_line(str(w.message), 120)
                                                                  for w in caught})[:3]}
        if not out.ok:
            rec.update(status="wrong", message=out.detail[:300])
        elif not vs_loop.ok:
            rec.update(status="state", message="outputs right; the caller's state afterwards "
                       f"differs from the loop's ({vs_loop.detail[:200]})",
                       state_as_before=vs_before.ok)
        if rec["status"] != "ok" or attempt:
            if attempt:
                rec["message"] = "second call: " + rec.get("message", "")
            break
    return rec


def isolated_plain(name: str, transform: str, timeout: float = 300.0) -> dict:
    """The plain arm of case ``name`` in a child process: its record, or the crash's (the child
    killed by a signal: plain torch.func took the process down)."""
    import json
    import subprocess
    import sys

    code = ("import json, sys, warnings; warnings.simplefilter('ignore')\n"
            "from funcbwd_lab.studies.libraries import env; env.activate()\n"
            "from funcbwd_lab.studies.libraries.cases import CASES\n"
            "from funcbwd_lab.studies.libraries.harness import run_cell\n"
            f"cell = run_cell(CASES[{name!r}], {transform!r}, ('plain',), isolated=True)\n"
            "print(json.dumps(cell.get('plain', {})))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout)
    if run.returncode < 0:
        return {"status": "error", "error_type": "crash", "refused": False,
                "message": f"plain torch.func crashed the process (signal {-run.returncode}; "
                           "run in a child process)"}
    try:
        return json.loads(run.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"status": "error", "error_type": "harness", "refused": False,
                "message": "harness: the child process printed no record: "
                           + first_line(run.stderr[-300:], 250)}


def run_cell(case: LibCase, transform: str, arms: tuple[str, ...] = ARMS,
             isolated: bool = False) -> dict:
    """``{"truth": ..., arm: record}`` for one (case, transform)."""
    torch.manual_seed(0)
    args, cts = inputs(case, transform)
    built = case.build()
    before = state_of(built)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = truth(transform, case, built, fresh(args), cts)
    except Exception as e:  # noqa: BLE001 - eager autograd refuses: no reference
        return {"truth": {**_error(e), "status": "noref"}}
    want_state = state_of(built)
    out = {"truth": {"status": "ok", "writes_state": not _cmp(want_state, before).ok}}
    for arm in arms:
        if arm == "plain" and case.isolate and not isolated:
            out[arm] = isolated_plain(case.name, transform)
            continue
        if arm == "discard" and not before:
            out[arm] = {"status": "n/a", "message": "no caller-owned state"}
            continue
        out[arm] = run_arm(arm, transform, case, args, cts, want, want_state, before)
    return out
