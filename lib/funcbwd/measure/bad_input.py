"""The bad inputs funcbwd promises to reject clearly, tried for real.

Each case calls a public entry point (library or CLI) with one bad input and records what comes
back. ``tests/test_bad_input.py`` checks every case is rejected with an error naming the problem
(and the valid choices where there are any), and that the README's table is this module's output.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any, Callable

import torch

from funcbwd.ops import legacy_ops, registry
from funcbwd.run import matrix, runner
from funcbwd.errors import FuncbwdError


@dataclasses.dataclass(frozen=True)
class Case:
    entry: str          # the entry point, as a user would write it
    bad: str            # what is wrong with the input
    call: Callable[[], Any] | None = None
    argv: tuple[str, ...] = ()   # a CLI case instead of a library call
    expect: str = ""    # a substring the error must contain


@dataclasses.dataclass(frozen=True)
class Outcome:
    case: Case
    rejected: bool
    error: str          # "ErrorClass: message" or "exit N: first stderr line"
    clear: bool         # a one-line message containing ``case.expect``; no traceback for the CLI


def _sample(*args: Any, diff: tuple[int, ...] = (0,)) -> registry.Sample:
    return registry.Sample("bad", args, diff)


def _mismatched_batches() -> Any:
    from funcbwd.strategies import get_strategy

    st = get_strategy("per_formula")
    _, fn = st.vjp(lambda x: (torch.diag(x, 1),), torch.randn(3, 5))
    return torch.func.vmap(lambda a, b: fn((a + b,)))(torch.randn(4, 3), torch.randn(5, 3))


def _graph_capture_bad_form() -> Any:
    from funcbwd.observe import graphs

    return graphs.capture("diag", "fast")


def _trace_bad_scenario() -> Any:
    from funcbwd.observe import trace

    return trace.trace("diag", "plain", "vmap_everything")


CASES: tuple[Case, ...] = (
    Case("runner.run(op, ...)", "unknown op name", lambda: runner.run("dig", "jacrev", "plain"),
         expect="valid ops:"),
    Case("runner.run(op, ...)", "op is not a string", lambda: runner.run(3, "jacrev", "plain"),
         expect="valid ops:"),
    Case("runner.run(..., scenario, ...)", "unknown scenario",
         lambda: runner.run("diag", "vmap_everything", "plain"), expect="valid scenarios:"),
    Case("runner.run(..., strategy)", "unknown strategy",
         lambda: runner.run("diag", "jacrev", "fast"), expect="valid strategies:"),
    Case("runner.run(..., sample=)", "unknown sample name",
         lambda: runner.run("diag", "jacrev", "plain", "4x4"), expect="valid samples of diag:"),
    Case("runner.run(..., sample=Sample)", "wrong shape (3-D input to diag)",
         lambda: runner.run("diag", "jacrev", "plain", _sample(torch.randn(2, 2, 2), 0)),
         expect="Supports 1D or 2D"),
    Case("runner.run(..., sample=Sample)", "integer dtype",
         lambda: runner.run("diag", "jacrev", "plain", _sample(torch.arange(6).view(2, 3), 0)),
         expect="use float32 or float64"),
    Case("runner.run(..., sample=Sample)", "complex dtype",
         lambda: runner.run("diag", "jacrev", "plain",
                            _sample(torch.randn(2, 3, dtype=torch.complex64), 0)),
         expect="use float32 or float64"),
    Case("runner.run(..., sample=Sample)", "non-tensor argument",
         lambda: runner.run("diag", "jacrev", "plain", _sample([[1.0, 2.0]], 0)),
         expect="must be a tensor"),
    Case("runner.run(..., sample=Sample)", "index out of range (index_select)",
         lambda: runner.run("index_select", "jacrev", "plain",
                            _sample(torch.randn(3, 2), 0, torch.tensor([5]))),
         expect="not valid input for index_select"),
    Case("runner.run(..., batch=)", "batch size 0", lambda: runner.run("diag", "jacrev", "plain", batch=0),
         expect="positive int"),
    Case("matrix.run_matrix(ops=...)", "empty op list", lambda: matrix.run_matrix(ops=""),
         expect="no op given"),
    Case("legacy.<op>", "unknown legacy op", lambda: getattr(legacy_ops, "dig"),
         expect="valid ops:"),
    Case("strategy.vjp + vmap", "mismatched batch sizes", _mismatched_batches,
         expect="same size in the mapped dimension"),
    Case("graphs.capture(op, form)", "unknown graph form", _graph_capture_bad_form, expect="valid"),
    Case("trace.trace(op, strategy, scenario)", "unknown scenario", _trace_bad_scenario,
         expect="valid scenarios:"),
    Case("python -m funcbwd matrix", "unknown strategy",
         argv=("matrix", "--strategies", "plain,fast"), expect="valid strategies:"),
    Case("python -m funcbwd matrix", "unknown op", argv=("matrix", "--ops", "dig"), expect="valid ops:"),
    Case("python -m funcbwd matrix", "unknown scenario",
         argv=("matrix", "--scenarios", "vmap_everything"), expect="valid scenarios:"),
    Case("python -m funcbwd trace", "unknown op", argv=("trace", "dig"), expect="valid ops:"),
    Case("python -m funcbwd graph", "unknown form", argv=("graph", "diag", "--from", "fast"),
         expect="fast"),
    Case("python -m funcbwd bench", "unknown strategy", argv=("bench", "--strategies", "fast"),
         expect="valid"),
    Case("python -m funcbwd coverage", "unknown OpInfo op", argv=("coverage", "--ops", "no_such_op"),
         expect="no_such_op"),
    Case("python -m funcbwd", "unknown command", argv=("frobnicate",), expect="invalid choice"),
)


def try_case(case: Case) -> Outcome:
    if case.argv:
        p = subprocess.run([sys.executable, "-m", "funcbwd", *case.argv], capture_output=True,
                           text=True, timeout=300)
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else ""
        clear = (p.returncode != 0 and "Traceback" not in p.stderr and case.expect in last)
        return Outcome(case, p.returncode != 0, f"exit {p.returncode}: {last}", clear)
    try:
        case.call()
    except FuncbwdError as e:
        msg = str(e)
        return Outcome(case, True, f"{type(e).__name__}: {msg}", "\n" not in msg and case.expect in msg)
    except Exception as e:  # noqa: BLE001 - torch's own errors, recorded as they are
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Outcome(case, True, f"{type(e).__name__}: {first}", case.expect in first)
    return Outcome(case, False, "accepted (no error)", False)


def markdown(outcomes: list[Outcome]) -> str:
    def short(text: str, n: int = 150) -> str:
        text = text.replace("|", "\\|")
        return text if len(text) <= n else text[: n - 3] + "..."

    lines = ["| entry point | bad input | what it gets |", "|---|---|---|"]
    for o in outcomes:
        lines.append(f"| `{o.case.entry}` | {o.case.bad} | {short(o.error)} |")
    lines.append("")
    lines.append(f"_{len(outcomes)} bad inputs, tried by `tests/test_bad_input.py` "
                 "(regenerate with `python tools/update_readme.py --reuse`)._")
    return "\n".join(lines)
