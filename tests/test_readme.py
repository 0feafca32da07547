"""The README's strategies table is generated from the saved matrix, and the saved matrix is what
a fresh run computes (so neither can drift, and the matrix JSON is deterministic across runs)."""

from __future__ import annotations

import json

from funcbwd.views import readme


def test_readme_strategies_table_is_generated_from_the_saved_matrix():
    text = readme.README.read_text()
    assert readme.block(text, "strategies") == readme.strategies_markdown(readme.load())


def test_saved_matrix_equals_a_fresh_run():
    saved = json.loads(readme.MATRIX_FILE.read_text())
    fresh = readme.stable_records(readme.run_test_ops_matrix())
    assert len(saved) == len(fresh)
    diffs = [(s["op"], s["sample"], s["scenario"], s["strategy"], s["status"], f["status"])
             for s, f in zip(saved, fresh) if s != f]
    assert not diffs, f"{len(diffs)} records differ; regenerate with tools/update_readme.py: {diffs[:5]}"


def test_readme_bench_headline_is_generated_from_the_saved_run():
    from funcbwd.measure import bench

    text = readme.README.read_text()
    assert readme.block(text, "bench") == readme.bench_markdown(bench.load(readme.BENCH_FILE))


def test_readme_recommendation_matches_the_design_review_notebook():
    import re

    nb = json.loads((readme.ROOT / "notebooks" / "design_review.ipynb").read_text())
    texts = ["".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
             for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    winners = {m.group(1) for t in texts for m in [re.search(r"Recommendation: (\w+)\.", t)] if m}
    runner_up = {m.group(1) for t in texts for m in [re.search(r"Runner-up: (\w+);", t)] if m}
    text = readme.README.read_text()
    assert len(winners) == 1 and f"**`{winners.pop()}`**" in text
    assert runner_up and all(f"`{r}` as the simpler runner-up" in text for r in runner_up)
