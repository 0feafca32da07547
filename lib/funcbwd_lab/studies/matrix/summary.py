"""What each strategy fixes over ``plain``, computed from cells (the single source for the
README, notebooks and report).

Cells are op x scenario over all samples (the worst status wins, :func:`funcbwd_lab.studies.matrix.matrix.
summarize`). For each strategy a cell is exactly one of:

* ``fixes``: ``plain`` fails (fail or mismatch) and the strategy passes with its mechanism ran
  in every sample;
* ``also_plain``: the strategy passes with its mechanism ran, and ``plain`` passes too (no evidence
  the mechanism was needed);
* ``without_mechanism``: the strategy passes but its mechanism did not run in every sample (it
  passed on the plain path: no evidence for the strategy at all);
* ``not_passing``: the strategy fails or mismatches;
* ``no_plain``: the strategy passes with its mechanism but ``plain`` has no applicable result;
* ``uninformative``: the strategy's cell is ``uninformative`` (an all-zeros result passes the
  same check: torch's answer is zero there): no evidence either way, never a fix;
* ``formula_wrong``: the strategy passes where ``plain`` is wrong because the legacy formula
  itself is (mismatch ``legacy_wrong``: wrong per sample, not a transform failure): only a strategy
  that does not run the legacy formula (handfixed, builtin) gets here; not a fix.

"Plain fails" (:func:`plain_fails`) means under the transform: a failure, or a result that differs
from torch's own gradient for another reason than the formula's own error.
"""

from __future__ import annotations

from typing import Sequence

from funcbwd_lab.studies.matrix.matrix import without_mechanism, summarize
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab.tables import WIDTH, paragraph, table

KINDS = ("fixes", "also_plain", "without_mechanism", "not_passing", "no_plain", "formula_wrong",
         "uninformative")


def plain_fails(cell: dict[str, Any]) -> bool:
    """A summarized plain cell that fails under the transform (see the module docstring)."""
    return cell["status"] == "fail" or (cell["status"] == "mismatch" and cell["reason"] != "legacy_wrong")


def fixes_over_plain(results: Sequence[CellResult]) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """strategy -> kind (:data:`KINDS`) -> sorted (op, scenario) cells; not-applicable cells are
    in no kind."""
    summary = summarize(results)
    strategies = list(dict.fromkeys(r.strategy for r in results))
    out: dict[str, dict[str, list[tuple[str, str]]]] = {st: {k: [] for k in KINDS} for st in strategies}
    for (op, sc, st), cell in summary.items():
        plain_cell = summary.get((op, sc, "plain"), {"status": "not_applicable", "reason": ""})
        plain = plain_cell["status"]
        if cell["status"] == "not_applicable":
            continue
        if cell["status"] == "uninformative":
            kind = "uninformative"
        elif cell["status"] != "pass":
            kind = "not_passing"
        elif without_mechanism(cell):
            kind = "without_mechanism"
        elif plain == "pass":
            kind = "also_plain"
        elif plain_fails(plain_cell):
            kind = "fixes"
        elif plain == "mismatch":
            kind = "formula_wrong"
        else:
            kind = "no_plain"
        out[st][kind].append((op, sc))
    for kinds in out.values():
        for cells in kinds.values():
            cells.sort()
    return out


def counts(results: Sequence[CellResult]) -> dict[str, dict[str, int]]:
    """strategy -> kind -> number of cells."""
    return {st: {k: len(v) for k, v in kinds.items()} for st, kinds in fixes_over_plain(results).items()}


def format_fixes(results: Sequence[CellResult], width: int = WIDTH) -> str:
    """One line per strategy: the counts of :func:`fixes_over_plain`, for under the matrix table
    (fitting ``width`` columns)."""
    ran_plain = any(r.strategy == "plain" for r in results)
    # without plain there is nothing to compare with: "not run", never a count of 0
    rows = [[st, *((c["fixes"], c["also_plain"]) if ran_plain else ("not run", "not run")),
             c["without_mechanism"], c["not_passing"]]
            for st, c in counts(results).items()]
    head = ("What each strategy fixes over plain, in cells (op x scenario, worst over samples); a fix "
            "is a pass with the strategy's mechanism ran where plain fails"
            + (":" if ran_plain else "; plain was not run (add it to --strategies to compare):"))
    return paragraph(head, width) + "\n" + table(
        ["strategy", "fixes over plain", "passes plain also passes", "passes without its mechanism",
         "not passing"], rows, width=width, align="lrrrr")
