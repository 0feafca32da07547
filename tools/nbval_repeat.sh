#!/usr/bin/env bash
# Run strict nbval over every notebook N times in a row (default 20) and stop at the first
# failure: the determinism check of the hardening issue (not part of `make test`).
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20}"
for i in $(seq 1 "$n"); do
    echo "nbval run $i/$n"
    .venv/bin/python -m pytest -q -p no:cacheprovider notebooks \
        --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
done
echo "nbval passed $n times in a row"
