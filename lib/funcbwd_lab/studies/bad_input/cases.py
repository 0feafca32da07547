"""The bad inputs funcbwd promises to reject clearly, tried for real.

Each case calls a public entry point (library or CLI) with one bad input and records what comes
back. ``tests/test_bad_input.py`` checks every case is rejected with an error naming the problem
(and the valid choices where there are any, the closest first), and that the README's table is
this module's output.

A clear error: its first line names what was wrong, it contains the case's ``expect`` text, and
its list of valid names (if any) has no line over 100 columns (by group, long groups shortened).
A CLI error also names the command (``python -m funcbwd_lab matrix: error: ...``), shows no
traceback, and every line of its stderr fits 100 columns.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any, Callable

import torch

from funcbwd_lab.ops import legacy_ops, registry
from funcbwd_lab.run import runner
from funcbwd_lab.studies.matrix import matrix
from funcbwd.errors import FuncbwdError
from funcbwd_lab.tables import shorten


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
    error: str          # "ErrorClass: message" or "exit N: the error line", cut for the table
    clear: bool         # see the module docstring


def _sample(*args: Any, diff: tuple[int, ...] = (0,)) -> registry.Sample:
    return registry.Sample("bad", args, diff)


def _mismatched_batches() -> Any:
    from funcbwd_lab.strategies import get_strategy

    st = get_strategy("per_formula")
    _, fn = st.vjp(lambda x: (torch.diag(x, 1),), torch.randn(3, 5))
    return torch.func.vmap(lambda a, b: fn((a + b,)))(torch.randn(4, 3), torch.randn(5, 3))


def _graph_capture_bad_form() -> Any:
    from funcbwd_lab.studies.graphs import graphs

    return graphs.capture("diag", "fast")


def _trace_bad_scenario() -> Any:
    from funcbwd_lab.studies.trace import trace

    return trace.trace("diag", "plain", "vmap_everything")


CASES: tuple[Case, ...] = (
    Case("runner.run(op, ...)", "misspelt op name", lambda: runner.run("dig", "jacrev", "plain"),
         expect="did you mean diag?"),
    Case("runner.run(op, ...)", "op is not a string", lambda: runner.run(3, "jacrev", "plain"),
         expect="valid ops, by group:"),
    Case("runner.run(..., scenario, ...)", "unknown scenario",
         lambda: runner.run("diag", "vmap_everything", "plain"), expect="valid scenarios, by group:"),
    Case("runner.run(..., strategy)", "unknown strategy",
         lambda: runner.run("diag", "jacrev", "fast"), expect="valid strategies, by group:"),
    Case("runner.run(..., strategy)", "misspelt strategy",
         lambda: runner.run("diag", "jacrev", "trcaed"), expect="did you mean traced"),
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
         expect="valid ops, by group:"),
    Case("strategy.vjp + vmap", "mismatched batch sizes", _mismatched_batches,
         expect="same size in the mapped dimension"),
    Case("graphs.capture(op, form)", "unknown graph form", _graph_capture_bad_form, expect="valid"),
    Case("trace.trace(op, strategy, scenario)", "unknown scenario", _trace_bad_scenario,
         expect="valid scenarios, by group:"),
    Case("python -m funcbwd_lab matrix", "unknown strategy",
         argv=("matrix", "--strategies", "plain,fast"), expect="valid strategies: builtin"),
    Case("python -m funcbwd_lab matrix", "misspelt op", argv=("matrix", "--ops", "dig"),
         expect="python -m funcbwd_lab matrix: error: unknown op 'dig'; did you mean diag?"),
    Case("python -m funcbwd_lab matrix", "unknown option",
         argv=("matrix", "--ops", "diag", "--batch", "0"),
         expect="python -m funcbwd_lab matrix: error: unrecognized arguments: --batch 0"),
    Case("python -m funcbwd_lab matrix", "unknown scenario",
         argv=("matrix", "--scenarios", "vmap_everything"), expect="valid scenarios, by group:"),
    Case("python -m funcbwd_lab trace", "misspelt op", argv=("trace", "dig"), expect="did you mean diag?"),
    Case("python -m funcbwd_lab graph", "unknown form", argv=("graph", "diag", "--from", "fast"),
         expect="fast"),
    Case("python -m funcbwd_lab bench", "unknown strategy", argv=("bench", "--strategies", "fast"),
         expect="valid"),
    Case("python -m funcbwd_lab coverage", "unknown OpInfo op", argv=("coverage", "--ops", "no_such_op"),
         expect="no_such_op"),
    Case("python -m funcbwd_lab coverage", "misspelt OpInfo op", argv=("coverage", "--ops", "atan3"),
         expect="did you mean atan or atanh"),
    Case("python -m funcbwd_lab", "unknown command", argv=("frobnicate",), expect="invalid choice"),
)


def _fits(text: str) -> bool:
    return all(len(line) <= 100 for line in text.splitlines())


def _error_lines(stderr: str) -> list[str]:
    """The CLI's error from its stderr: the ``...: error: ...`` line and the lines after it."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    at = next((i for i, ln in enumerate(lines) if ": error: " in ln), max(len(lines) - 1, 0))
    return lines[at:]


def _summary(lines: list[str]) -> str:
    """An error for the table: its first line and, if there is more, the start of the list of
    valid names (lines continued with a 4-space indent are joined back first)."""
    joined: list[str] = []
    for ln in lines:
        if joined and ln.startswith("    "):
            joined[-1] += " " + ln.strip()
        else:
            joined.append(ln.strip())
    if len(joined) > 2 and joined[1].endswith(":"):  # "valid ops, by group:" and the first group
        joined[1:3] = [f"{joined[1]} {joined[2]}"]
    return " / ".join(joined[:2])


def try_case(case: Case) -> Outcome:
    if case.argv:
        p = subprocess.run([sys.executable, "-m", "funcbwd_lab", *case.argv], capture_output=True,
                           text=True, timeout=300)
        lines = _error_lines(p.stderr)
        message = "\n".join(lines)
        clear = (p.returncode != 0 and "Traceback" not in p.stderr and case.expect in message
                 and bool(lines) and lines[0].startswith("python -m funcbwd_lab")
                 and ": error: " in lines[0] and _fits(p.stderr))
        return Outcome(case, p.returncode != 0, f"exit {p.returncode}: {_summary(lines)}", clear)
    try:
        case.call()
    except FuncbwdError as e:
        msg = str(e)
        return Outcome(case, True, f"{type(e).__name__}: {_summary(msg.splitlines())}",
                       case.expect in msg and _fits("\n".join(msg.splitlines()[1:])))
    except Exception as e:  # noqa: BLE001 - torch's own errors, recorded as they are
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Outcome(case, True, f"{type(e).__name__}: {first}", case.expect in first)
    return Outcome(case, False, "accepted (no error)", False)


def markdown(outcomes: list[Outcome]) -> str:
    def short(text: str, n: int = 150) -> str:
        return shorten(text, n).replace("|", "\\|")

    lines = ["| entry point | bad input | what it gets |", "|---|---|---|"]
    for o in outcomes:
        lines.append(f"| `{o.case.entry}` | {o.case.bad} | {short(o.error)} |")
    lines.append("")
    lines.append(f"_{len(outcomes)} bad inputs, tried by `tests/test_bad_input.py` "
                 "(regenerate with `python tools/update_readme.py --reuse`)._")
    return "\n".join(lines)
