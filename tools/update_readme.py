"""Regenerate the computed blocks of the README and of the docs pages it points to.

Re-runs the test-op matrix (saving data/matrix-test-ops.json) unless --reuse, then renders every
block from computed results: the strategies table, the bad-input table, the bench block, the
findings list, the design review's evidence (data/review-evidence.json: that matrix over all
samples, the saved bench run and the live probes) with the decision and its summary computed from
it, the live (deletable branches) block and the OpInfo sweep's block. Each block is written in its
home, ``funcbwd_lab.views.readme.HOMES`` (the README keeps the decision summary and the findings; the
others live in docs/*.md, linked from the README). The paths are the repository's (this tool
lives in it); the library only renders.
Usage: python tools/update_readme.py [--reuse]"""

import json
import sys
from pathlib import Path

from funcbwd_lab.studies.bad_input import cases as bad_input
from funcbwd_lab.studies.coverage import data as coverage_data
from funcbwd_lab.studies.coverage import render as coverage_render
from funcbwd_lab.studies.coverage import summary as coverage_summary
from funcbwd_lab.studies.findings import findings
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.studies.matrix import records
from funcbwd_lab.views import corpus, readme
from funcbwd_lab.studies.deletable import render as live
from funcbwd_lab.studies.generated import report as generated_report
from funcbwd_lab.studies.yourcode import first_call

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
MATRIX_FILE = DATA / readme.MATRIX_FILE_NAME
BENCH_FILE = DATA / readme.BENCH_FILE_NAME
EVIDENCE_FILE = DATA / readme.EVIDENCE_FILE_NAME
CORPUS_FILE_NAME = "yourcode-corpus.json"


def _coverage() -> str:
    doc = coverage_data.load(DATA / coverage_data.FILE_NAME)
    return coverage_render.markdown(doc, coverage_summary.summarize(doc["records"]))


#: How each block of ``readme.HOMES`` is rendered from the inputs of :func:`render` (the matrix
#: ``results``, the saved ``bench`` run, the review ``evidence``); the live table and the sweep are
#: read from data/, the bad inputs tried now.
RENDERERS = {
    "decision-summary": lambda i: readme.decision_summary_markdown(i["evidence"], i["bench"]),
    "findings": lambda i: readme.findings_markdown(findings.FINDINGS),
    "decision": lambda i: readme.decision_markdown(i["evidence"]),
    "strategies": lambda i: readme.strategies_markdown(i["results"]),
    "coverage": lambda i: _coverage(),
    "live": lambda i: live.markdown(json.loads((DATA / live.LIVE_FILE_NAME).read_text())),
    "bench": lambda i: readme.bench_markdown(i["bench"], source=str(BENCH_FILE.relative_to(ROOT))),
    "bad-input": lambda i: bad_input.markdown([bad_input.try_case(c) for c in bad_input.CASES]),
    "corpus": lambda i: corpus.markdown(json.loads((DATA / CORPUS_FILE_NAME).read_text())),
    "corpus-summary": lambda i: corpus.summary_markdown(
        json.loads((DATA / CORPUS_FILE_NAME).read_text()),
        json.loads((DATA / "yourcode-cost.json").read_text())),
    "corpus-cost": lambda i: corpus.cost_markdown(
        json.loads((DATA / "yourcode-cost.json").read_text())),
    "first-call": lambda i: first_call.markdown(
        json.loads((DATA / "decorator-first-call.json").read_text())),
    "cpp-pick": lambda i: _cpp_pick(i["evidence"]),
    "libraries-summary": lambda i: _libraries_summary(),
    "generated-summary": lambda i: generated_report.readme_summary(
        json.loads((DATA / "generated.json").read_text())),
}


def _cpp_pick(evidence) -> str:
    """The pick on C++ numbers (data/cpp.json), as the RFC makes it, in a few lines."""
    from funcbwd_lab.studies.review import cpp_decision
    from funcbwd_lab.tables import WIDTH, paragraph

    decision = cpp_decision.decide(cpp_decision.normalize(cpp_decision.load(DATA, evidence)))
    return paragraph(cpp_decision.short(decision) + " In Python ([every criterion]"
                     "(docs/decision.md)):", WIDTH)


def _libraries_summary() -> str:
    from funcbwd_lab.studies.libraries import render as libraries
    from funcbwd_lab.tables import WIDTH, paragraph

    return paragraph("On real libraries installed from the package index at pinned versions, "
                     "each called as its users call it ([docs/libraries.md](docs/libraries.md)): "
                     + libraries.headline(libraries.load(DATA / "libraries.json")), WIDTH)


def render(results, bench, evidence, names=None) -> dict[str, str]:
    """The blocks ``names`` (default: every block of ``readme.HOMES``), by name."""
    inputs = {"results": results, "bench": bench, "evidence": evidence}
    return {name: RENDERERS[name](inputs) for name in (names or readme.HOMES)}


def write(blocks: dict[str, str]) -> list[str]:
    """Write each block of ``blocks`` in its home file; the homes, repository-relative."""
    texts = {home: (ROOT / home).read_text() for home in sorted({readme.HOMES[n] for n in blocks})}
    for name, body in blocks.items():  # every block replaced before any file is written
        home = readme.HOMES[name]
        texts[home] = readme.replace_block(texts[home], name, body, where=home)
    for home, text in texts.items():
        (ROOT / home).write_text(text)
    return list(texts)


if __name__ == "__main__":
    results = records.load(MATRIX_FILE) if "--reuse" in sys.argv else matrix.run_test_ops()
    records.save(results, MATRIX_FILE)
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.review import review

    bench = bench_results.load(BENCH_FILE)
    evidence = review.collect_evidence(results, bench, bench_source=str(BENCH_FILE.relative_to(ROOT)))
    review.save_evidence(evidence, EVIDENCE_FILE)
    print("updated " + ", ".join(write(render(results, bench, evidence))))
