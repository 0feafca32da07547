"""Re-run the test-op matrix, save data/matrix-test-ops.json, and regenerate the README's
strategies table from it. Usage: python tools/update_readme.py [--reuse]"""

import sys

from funcbwd import readme

if __name__ == "__main__":
    results = readme.load() if "--reuse" in sys.argv else readme.run_test_ops_matrix()
    readme.save(results)
    text = readme.README.read_text()
    readme.README.write_text(readme.replace_block(text, "strategies", readme.strategies_markdown(results)))
    print(readme.strategies_markdown(results))
