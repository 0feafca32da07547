"""The study rendered: markdown blocks computed from the saved data (docs/libraries.md and the
notebook chapter show the same blocks). Rendering only: nothing here runs a case."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from funcbwd_lab.studies.libraries.verdicts import VERDICTS, rows, summarize

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "data" / "libraries.json"
TRANSFORM_COLUMNS = ("vmap", "vmap_vjp", "vmap_jacrev", "jacrev", "jacfwd", "hessian",
                     "per_sample_grad", "opacus")
SHORT = {"pass": "pass", "fixed": "FIXED", "fixed_opt_in": "opt-in", "refused": "refused",
         "fails": "fails", "regression": "REGRESSION", "wrong": "WRONG",
         "inherited": "torch-wrong", "no_reference": "no-ref", "unknown": "unknown"}


def wrap(text: str, indent: str = "") -> str:
    """Prose fitted to 100 columns (docs and notebook alike)."""
    import textwrap

    return textwrap.fill(text, 100, subsequent_indent=indent, break_on_hyphens=False)


def load(path: Path = DATA) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.0f}%" if b else "n/a"


def headline(data: dict) -> str:
    s = summarize(data)
    v = s["verdicts"]
    wrong_state = sum(1 for w in s["wrong"] if "caller's state" in w[2])
    return (
        f"{s['cases']} public functions and modules of {len(s['libraries'])} installed "
        f"libraries ({s['control_cases']} of them a control group with no in-place write on "
        f"the path), {s['cells']} cells. Plain `torch.func` fails or is wrong in "
        f"{s['plain_failing']} cells with a reference; `funcbwd.allow_inplace()` fixes "
        f"{s['fixed']} of them ({pct(s['fixed'], s['plain_failing'])}; target 95%: "
        f"{'met' if s['plain_failing'] and s['fixed'] >= 0.95 * s['plain_failing'] else 'missed'}"
        f"), {v['fixed_opt_in']} of those only with the opt-in `state_writes=\"discard\"`"
        f"{'' if s['discard_opt_in'] else ' (not available in this build of the tool)'}. "
        f"Regressions: {v['regression']} (target 0). Wrong answers: {v['wrong']} (target 0; "
        f"{wrong_state} of them the caller's state only, outputs right). Refused with funcbwd's "
        f"own reason: {v['refused']}; still failing with torch's error: {v['fails']}; torch "
        f"already wrong and passed through: {v['inherited']}; no reference (eager autograd "
        f"refuses the call): {v['no_reference']}; unknown (budget): {v['unknown']}.")


def table(header: list[str], body: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def verdict_table(data: dict) -> str:
    s = summarize(data)
    return table(["verdict", "cells"], [[f"`{k}`", s["verdicts"][k]] for k in VERDICTS])


def library_table(data: dict) -> str:
    s = summarize(data)
    cases = collections.Counter(c["library"] for c in data["cases"].values())
    body = []
    for lib_ in s["libraries"]:
        c = s["by_library"].get(lib_, {})
        failing = sum(c.get(k, 0) for k in ("fixed", "fixed_opt_in", "refused", "fails",
                                             "inherited"))
        body.append([lib_, data["pins"].get(lib_, "?"), cases[lib_], sum(c.values()),
                     c.get("pass", 0), f"{c.get('fixed', 0) + c.get('fixed_opt_in', 0)} of "
                     f"{failing}", c.get("refused", 0), c.get("fails", 0), c.get("wrong", 0),
                     c.get("regression", 0), c.get("no_reference", 0), c.get("unknown", 0)])
    return table(["library", "version", "cases", "cells", "pass", "fixed (of plain-failing)",
                  "refused", "fails", "wrong", "regressions", "no ref", "unknown"], body)


def causes_table(data: dict, key: str) -> str:
    s = summarize(data)
    return table(["cause", "cells"], [[c, n] for c, n in s[key].items()]) if s[key] else \
        "_none_"


def listing(items: list, empty: str = "_none_") -> str:
    if not items:
        return empty
    return "\n".join(wrap(f"- `{c}` {t}: {d}" if d else f"- `{c}` {t}", "  ")
                     for c, t, *rest in items for d in [rest[0] if rest else ""])


def cases_table(data: dict) -> str:
    by = collections.defaultdict(dict)
    for r in rows(data):
        by[r["case"]][r["transform"]] = SHORT[r["verdict"]]
    body = []
    for name, c in data["cases"].items():
        cells = [by[name].get(t, "") for t in TRANSFORM_COLUMNS]
        body.append([f"`{c['call']}`", c["library"], c["group"], *cells, c["cite"]])
    return table(["call", "library", "group", "vmap", "vmap(vjp)", "vmap(jacrev)", "jacrev",
                  "jacfwd", "hessian", "per-sample grad", "opacus", "users call it so in"], body)


def bench_block(data: dict) -> str:
    from funcbwd_lab.studies.libraries.bench import summary

    if not data.get("bench"):
        return "_not measured in this data file (`python -m funcbwd_lab.studies.libraries bench`)_"
    b = summary(data["bench"])

    def judge(x, target):
        return "not resolved" if x is None else ("met" if x <= target else "missed")
    return (
        f"At B={b['batch']} (median of 3 calls, one process, one thread): where the mode fixes, "
        f"it takes {b['fixed_mode_over_loop']}x a per-sample Python loop of the call (median "
        f"over {b['fixed_cells']} vmap and vmap(vjp) cells; worst {b['fixed_worst_over_loop']}x, "
        f"`{b['fixed_worst_cell']}`; "
        f"the last resort's target, at most 1.1x the loop: "
        f"{judge(b['fixed_worst_over_loop'], 1.1)}); where plain already works, the mode takes "
        f"{b['pass_mode_over_plain']}x plain (median over {b['pass_cells']} cells; target "
        f"1.05x: {judge(b['pass_mode_over_plain'], 1.05)}) and the mode takes "
        f"{b['pass_mode_over_loop']}x the loop there. Cells not timed (the mode over 1 s at B=3, "
        f"its first call here over 5 s, or raised): {b['not_timed']}. A benchmark of this run, "
        f"not a test.")


def blocks(data: dict) -> dict[str, str]:
    s = summarize(data)
    return {
        "headline": wrap(headline(data)), "verdicts": verdict_table(data),
        "libraries": library_table(data),
        "plain_causes": causes_table(data, "plain_failing_by_cause"),
        "left": causes_table(data, "left_by_cause"),
        "refused": listing(s["refused"]), "wrong": listing(s["wrong"]),
        "regressions": listing(s["regressions"]), "unknown": listing(s["unknown"]),
        "cases": cases_table(data), "bench": wrap(bench_block(data)),
        "basis": wrap(data["basis"]), "torch": data["torch"],
    }


def write_page(data_path: Path, out: Path) -> None:
    from funcbwd_lab.studies.libraries.page import PAGE

    b = blocks(load(data_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(PAGE.format(**b))
