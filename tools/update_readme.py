"""Regenerate the README's computed sections.

Re-runs the test-op matrix (saving data/matrix-test-ops.json) unless --reuse, then rewrites the
strategies table and the bad-input table from computed results.
Usage: python tools/update_readme.py [--reuse]"""

import sys

from funcbwd.measure import bad_input
from funcbwd.views import readme

if __name__ == "__main__":
    results = readme.load() if "--reuse" in sys.argv else readme.run_test_ops_matrix()
    readme.save(results)
    text = readme.README.read_text()
    text = readme.replace_block(text, "strategies", readme.strategies_markdown(results))
    text = readme.replace_block(text, "bad-input",
                                bad_input.markdown([bad_input.try_case(c) for c in bad_input.CASES]))
    from funcbwd.measure import bench

    text = readme.replace_block(text, "bench", readme.bench_markdown(bench.load(readme.BENCH_FILE)))
    readme.README.write_text(text)
    print("README.md updated")
