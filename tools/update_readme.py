"""Regenerate the README's computed sections.

Re-runs the test-op matrix (saving data/matrix-test-ops.json) unless --reuse, then rewrites the
strategies table, the bad-input table and the bench block from computed results, and the design
review's evidence (data/review-evidence.json: that matrix over all samples, the saved bench run and
the live probes) with the decision block computed from it. The paths are
the repository's (this tool lives in it); the library only renders.
Usage: python tools/update_readme.py [--reuse]"""

import sys
from pathlib import Path

from funcbwd.studies.bad_input import cases as bad_input
from funcbwd.studies.matrix import matrix
from funcbwd.studies.matrix import records
from funcbwd.views import readme

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DATA = ROOT / "data"
MATRIX_FILE = DATA / readme.MATRIX_FILE_NAME
BENCH_FILE = DATA / readme.BENCH_FILE_NAME
EVIDENCE_FILE = DATA / readme.EVIDENCE_FILE_NAME

if __name__ == "__main__":
    results = records.load(MATRIX_FILE) if "--reuse" in sys.argv else matrix.run_test_ops()
    records.save(results, MATRIX_FILE)
    text = README.read_text()
    text = readme.replace_block(text, "strategies", readme.strategies_markdown(results))
    text = readme.replace_block(text, "bad-input",
                                bad_input.markdown([bad_input.try_case(c) for c in bad_input.CASES]))
    from funcbwd.studies.bench import results as bench_results

    bench = bench_results.load(BENCH_FILE)
    text = readme.replace_block(text, "bench", readme.bench_markdown(
        bench, source=str(BENCH_FILE.relative_to(ROOT))))
    from funcbwd.studies.review import review

    evidence = review.collect_evidence(results, bench, bench_source=str(BENCH_FILE.relative_to(ROOT)))
    review.save_evidence(evidence, EVIDENCE_FILE)
    text = readme.replace_block(text, "decision", readme.decision_markdown(evidence))
    import json

    from funcbwd.studies.deletable import render as live

    live_file = DATA / live.LIVE_FILE_NAME
    text = readme.replace_block(text, "live", live.markdown(json.loads(live_file.read_text())))
    from funcbwd.measure import coverage_summary
    from funcbwd.views import coverage

    cov = str(DATA / coverage.COVERAGE_FILE_NAME)
    text = readme.replace_block(text, "coverage", coverage.markdown(
        coverage_summary.load(cov), coverage_summary.load_meta(cov), coverage_summary.load_cost(cov)))
    README.write_text(text)
    print("README.md updated")
