"""The generated programs' counts, and the docs blocks rendered from them.

:func:`summarize` turns the long run's records (:mod:`funcbwd_lab.studies.generated.run`) into
``data/generated.json``: what the run rests on, counts per entry point x transform x verdict,
per feature, and every program with a cell that did not pass (its source and those cells).
:func:`seeded_summary` does the same for the seeded subset (``data/generated-seeded.json``, the
baseline of ``make test``). :func:`markdown` and :func:`seeded_markdown` render the blocks of
docs/generated.md; ``python -m funcbwd_lab.studies.generated.report --write`` rewrites them
there (``tests/test_generated_data.py`` keeps them equal to the data).

    python -m funcbwd_lab.studies.generated.report     # rewrite the blocks (a second)
"""

from __future__ import annotations

import collections
import platform
import subprocess
from pathlib import Path
from typing import Any

from funcbwd import harness

ROOT = Path(__file__).resolve().parents[4]
DOCS = ROOT / "docs" / "generated.md"
LONG_RUN = ROOT / "data" / "generated.json"
SEEDED = ROOT / "data" / "generated-seeded.json"
#: verdicts beyond the harness's: a cell after a hang in its program, and a Dask item's failure
VERDICTS = (*harness.VERDICTS, "not_run", "timeout", "crash", "error")
OUTSIDE = ("wrong", "unclear_error", "regression", "hang", "timeout", "crash", "error")


def _environment() -> dict[str, Any]:
    import hypothesis
    import torch

    try:  # the last commit that changed the tool (lib/funcbwd, the harness aside)
        commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", "lib/funcbwd",
                                 ":!lib/funcbwd/harness"], cwd=ROOT, text=True,
                                capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"torch": torch.__version__, "hypothesis": hypothesis.__version__,
            "python": platform.python_version(), "commit": commit}


def _cells(record: dict) -> list[dict]:
    """A long-run record's cells as dicts (they are stored as lists to keep the file small)."""
    keys = ("transform", "entry", "verdict", "call", "plain", "detail")
    return [c if isinstance(c, dict) else dict(zip(keys, c)) for c in record["cells"]]


#: one letter per verdict in a program's ``verdicts`` string (``.``: a cell not checked)
CODES = {"pass": "P", "wrong": "W", "refused": "R", "unclear_error": "U", "regression": "G",
         "no_reference": "N", "hang": "H", "not_run": "-", "timeout": "T", "crash": "C",
         "error": "E", "raised": "r", "": "."}
_PROGRAM_DEFAULTS = {"randomness": "error", "around": "", "threads": 1, "state": [],
                     "between": False, "rebuild": False}


def _count(records: list[dict], feature_of=None) -> dict[str, Any]:
    """Counts per entry point x transform x verdict and per feature, and every program with a
    cell that did not pass (``not_pass``: its source, a letter per cell of ``cells`` in
    :data:`CODES`, and for each cell outside the contract its call, plain torch.func's verdict
    and an index into ``details``)."""
    from funcbwd_lab.studies.generated.program import CELLS

    counts: dict = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    features: dict = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    details: dict[str, int] = {}
    failing = []
    for r in records:
        cells = {(c["transform"], c["entry"]): c for c in _cells(r)}
        for c in cells.values():
            counts[c["entry"]][c["transform"]][c["verdict"]] += 1
            totals[c["verdict"]] += 1
            for f in (feature_of(r) if feature_of else r["program"]["features"]) or ["basic"]:
                features[f][c["verdict"]] += 1
        if all(c["verdict"] == "pass" for c in cells.values()):
            continue
        program = {k: v for k, v in r["program"].items()
                   if k in ("source", "features", "seed") or v != _PROGRAM_DEFAULTS.get(k)}
        why = [[i, c["call"], CODES[c["plain"]], details.setdefault(c["detail"][:160], len(details))]
               for i, c in ((i, cells.get(cell)) for i, cell in enumerate(CELLS))
               if c is not None and c["verdict"] in OUTSIDE]
        failing.append({k: r[k] for k in ("key", "index", "feature") if k in r} | {
            "program": program, "verdicts": "".join(
                CODES[cells[cell]["verdict"]] if cell in cells else "." for cell in CELLS),
            "why": why})
    order = lambda c: {v: c[v] for v in VERDICTS if c[v]}  # noqa: E731
    return {"totals": order(totals),
            "counts": {e: {t: order(c) for t, c in ts.items()} for e, ts in counts.items()},
            "by_feature": {f: order(c) for f, c in sorted(features.items())},
            "not_pass": {"cells": [list(c) for c in CELLS], "codes": CODES,
                         "details": list(details), "programs": failing}}


def outside(doc: dict[str, Any]) -> list[tuple[dict, list[dict]]]:
    """(program record, its cells outside the contract as dicts) for each program of a summary."""
    np = doc["not_pass"]
    verdict = {code: v for v, code in np["codes"].items()}
    out = []
    for p in np["programs"]:
        program = {**_PROGRAM_DEFAULTS, **p["program"]}
        cells = [{"transform": np["cells"][i][0], "entry": np["cells"][i][1],
                  "verdict": verdict[p["verdicts"][i]], "call": call, "plain": verdict[plain],
                  "detail": np["details"][d]} for i, call, plain, d in p["why"]]
        out.append((program | {k: p[k] for k in ("key", "index", "feature") if k in p}, cells))
    return out


def dumps(doc: dict[str, Any]) -> str:
    """A summary as JSON text: indented, each kept program on one line (diffs stay readable)."""
    import json

    programs = doc["not_pass"]["programs"]
    body = json.dumps({**doc, "not_pass": {**doc["not_pass"], "programs": "@"}}, indent=1)
    lines = ",\n".join("  " + json.dumps(p, separators=(",", ":")) for p in programs)
    return body.replace('"programs": "@"', f'"programs": [\n{lines}\n  ]') + "\n"


def summarize(records: list[dict], timeout: float, requested: int, chunk: int,
              seed: int) -> dict[str, Any]:
    """``data/generated.json`` from the long run's records (see the module docstring)."""
    checked = [r for r in records if "program" in r]
    meta = {**_environment(), "requested": requested, "programs": len(checked),
            "duplicates": sum("duplicate" in r for r in records), "chunk": chunk,
            "seed": seed, "timeout_s": timeout, "calls": 2,
            "threaded": sum(r["program"]["threads"] > 1 for r in checked),
            "cpu_s": round(sum(r.get("cpu_s", 0) for r in checked), 1)}
    return {"meta": meta, **_count(checked)}


def seeded_summary(records: list[dict], per_feature: int, free: int,
                   timeout: float) -> dict[str, Any]:
    """``data/generated-seeded.json``: the seeded subset's run, counted by the feature each
    program was drawn for."""
    meta = {**_environment(), "programs": len(records), "per_feature": per_feature,
            "free": free, "timeout_s": timeout,
            "cpu_s": round(sum(r.get("cpu_s", 0) for r in records), 1)}
    return {"meta": meta, **_count(records, feature_of=lambda r: [r["feature"]])}


# ------------------------------------------------------------------------------ rendering
_SHORT = {"pass": "pass", "refused": "refused", "no_reference": "no ref.", "wrong": "wrong",
          "unclear_error": "unclear", "regression": "regr.", "hang": "hang",
          "not_run": "not run", "timeout": "timeout", "crash": "crash", "error": "error"}


def _prose(text: str, indent: str = "") -> str:
    """A paragraph wrapped at 100 columns (``indent``: a list item's continuation lines)."""
    import textwrap

    return textwrap.fill(text, 100, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def _table(rows: dict[str, dict[str, int]], head: str) -> list[str]:
    shown = [v for v in VERDICTS if any(r.get(v) for r in rows.values())]
    lines = [f"| {head} | cells | " + " | ".join(_SHORT[v] for v in shown) + " |",
             "|---|---|" + "---|" * len(shown)]
    for name, r in rows.items():
        lines.append(f"| {name} | {sum(r.values())} | "
                     + " | ".join(str(r.get(v, 0)) for v in shown) + " |")
    return lines


def _target(name: str, n: int, noun: str, rest: str = "") -> str:
    return f"- {name}: {'met' if n == 0 else 'MISSED'} ({n} {noun}{'' if n == 1 else 's'}{rest})"


def markdown(doc: dict[str, Any]) -> str:
    """The long run's block: what it rests on, counts per cell, per feature, the targets."""
    m, totals = doc["meta"], doc["totals"]
    rows = {f"`{e}` {t}": c for e in harness.ENTRIES if e in doc["counts"]
            for t, c in doc["counts"][e].items()}
    cells = sum(totals.values())
    lines = [_prose(
        f"{m['programs']} programs ({m['requested']} requested, {m['duplicates']} duplicates "
        f"skipped; hypothesis {m['hypothesis']}, seeds {m['seed']} + k, chunks of {m['chunk']}), "
        f"each in 21 cells ({m['threaded']} called from two threads: 15, no forward mode), "
        f"{m['calls']} calls each: {cells} cells; torch {m['torch']}, tool at commit "
        f"`{m['commit']}`; {m['timeout_s']:g} s per call before a hang is declared; "
        f"{m['cpu_s']:g} s of CPU."), "",
             *_table(rows, "entry point, transform"), "", "By feature (a cell counts under every "
             "feature of its program; `basic`: none):", "",
             *_table(doc["by_feature"], "feature"), "", "Targets (over every cell run):", "",
             _target("0 wrong answers", totals.get("wrong", 0), "wrong cell"),
             _target("0 hangs", totals.get("hang", 0) + totals.get("timeout", 0), "cell",
                     " hung or timed out"),
             _target("every error names its cause and file:line", totals.get("unclear_error", 0),
                     "unclear error"),
             _target("no regression", totals.get("regression", 0), "cell",
                     " raising where plain torch.func passes"),
             _prose(f"- unknown: {totals.get('no_reference', 0)} cells have no reference (the "
                    f"per-sample loop raises) and {totals.get('not_run', 0)} were not run (after a "
                    "hang in their program); never counted as passing.", "  "), "",
             *classes_table(doc)]
    return "\n".join(lines)


def readme_summary(doc: dict[str, Any]) -> str:
    """The long run in one paragraph (the README's ``generated-summary`` block): what it rests
    on, the fewest cells run of any entry point x transform, and each target met or missed."""
    m, totals = doc["meta"], doc["totals"]
    per_cell = [sum(v for k, v in c.items() if k != "not_run")
                for ts in doc["counts"].values() for c in ts.values()]
    least = min(per_cell) if per_cell else 0

    def target(n: int) -> str:
        return "met" if n == 0 else "missed"

    wrong, hangs = totals.get("wrong", 0), totals.get("hang", 0) + totals.get("timeout", 0)
    unclear, regr = totals.get("unclear_error", 0), totals.get("regression", 0)
    return _prose(
        f"On {m['programs']} programs a grammar of in-place idioms wrote (hypothesis, seeds "
        f"{m['seed']} + k; [docs/generated.md](docs/generated.md)), each checked in every entry "
        f"point x transform against the per-sample loop (values, gradients, the caller's state, "
        f"random state; tool at `{m['commit']}`): {wrong} wrong answers (target 0: "
        f"{target(wrong)}), {hangs} hangs (target 0: {target(hangs)}), {unclear} errors that do "
        f"not name their cause (target 0: {target(unclear)}), {regr} regressions where plain "
        f"torch.func passes (target 0: {target(regr)}); at least {least} programs run in every "
        f"entry point x transform (target 10,000: {'met' if least >= 10_000 else 'missed'}); "
        f"{totals.get('no_reference', 0)} cells without a reference (the loop itself raises) and "
        f"{totals.get('not_run', 0)} not run after a hang in their program, never counted as "
        f"passing.")


def seeded_markdown(doc: dict[str, Any]) -> str:
    """The seeded subset's block: what ``make test`` runs and what it finds, by feature."""
    m, totals = doc["meta"], doc["totals"]
    bad = collections.Counter(p["feature"] for p, cells in outside(doc) if cells)
    lines = [_prose(
        f"{m['programs']} programs ({m['per_feature']} per feature, {m['free']} with none "
        f"required), each in 21 cells, 2 calls each; torch {m['torch']}, tool at commit "
        f"`{m['commit']}`; {m['cpu_s']:g} s of CPU. {sum(bad.values())} programs have a cell "
        f"outside the contract ({sum(totals.get(v, 0) for v in OUTSIDE)} cells)."), "",
             *_table(doc["by_feature"], "drawn for feature"), "",
             _prose("Features with a program outside the contract: " + (", ".join(
                 f"{f} ({n})" for f, n in sorted(bad.items())) or "none") + "."), "",
             *classes_table(doc)]
    return "\n".join(lines)


def classes_table(doc: dict[str, Any]) -> list[str]:
    """Issue 37's classes (:mod:`funcbwd_lab.studies.generated.classes`): where each is seen."""
    from funcbwd_lab.studies.generated.classes import found

    rows = found(outside(doc))
    return ["| issue 37's class, recognized in a cell | programs | cells |", "|---|---|---|",
            *(f"| {name} | {p} | {c} |" for name, p, c in rows), "",
            f"Classes seen: {sum(p > 0 for _, p, _ in rows)} of {len(rows)}."]


def mutations_markdown() -> str:
    """The mutation table: each class of issue 37, how it is re-created, or what it needs."""
    from funcbwd_lab.studies.generated.mutations import MUTATIONS

    lines = ["| mutation | issue 37's class | feature, entry point | written? |",
             "|---|---|---|---|"]
    for m in MUTATIONS.values():
        how = "yes" if m.patch is not None else f"no: needs {m.hook}"
        lines.append(f"| `{m.name}` | {m.bug} | `{m.feature}`, `{m.entry}` | {how} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ the docs page
def _from(path: Path, render) -> Any:
    import json

    return lambda: render(json.loads(path.read_text())) if path.exists() else None


#: each block of docs/generated.md and its renderer (None when its data is not there yet)
BLOCKS = {"generated-seeded": _from(SEEDED, seeded_markdown),
          "generated-mutations": mutations_markdown,
          "generated-long-run": _from(LONG_RUN, markdown)}


def block(text: str, name: str) -> str:
    """The body of ``<!-- name:begin -->`` ... ``<!-- name:end -->`` in ``text``."""
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"{DOCS.name} has no single {name!r} block")
    return text.split(begin)[1].split(end)[0]


def write() -> list[str]:
    """Rewrite every block of docs/generated.md whose data exists; the names written."""
    text, done = DOCS.read_text(), []
    for name, render in BLOCKS.items():
        body = render()
        if body is not None:
            text = text.replace(f"<!-- {name}:begin -->\n{block(text, name)}",
                                f"<!-- {name}:begin -->\n{body}\n")
            done.append(name)
    DOCS.write_text(text)
    return done


if __name__ == "__main__":
    print("rewrote:", ", ".join(write()) or "nothing (no data yet)")
