"""The known torch bug of ``funcbwd_lab.studies.findings.known``: inductor's compiled vmap over
``index_add`` into an unbatched tensor (pytorch#183986, fixed by pytorch#184488 after 2.13).

The repro must still give wrong values on this torch where eager vmap is right; the day torch
fixes it this test fails and says what to update. The compiled study's verdicts count the rows
the bug explains as wrong (tests/test_compiled.py reads the saved data). One inductor compile:
about 12 s on 2 shared cores, compile caches off.
"""

from __future__ import annotations

import torch

from funcbwd_lab.studies.findings import known


def test_inductor_index_add_on_an_expanded_tensor_is_still_wrong():
    bug = known.INDEX_ADD_EXPANDED
    outcome = bug.check()
    assert "eager == loop: True" in outcome.printed, f"eager vmap is no longer right: {outcome.printed}"
    err = (outcome.namespace["batched"] - outcome.namespace["looped"]).abs().max().item()
    assert outcome.status == "wrong values" and err > 1.0, (
        f"torch {torch.__version__} fixed {bug.issue} ({bug.cite()}): the compiled repro now gives "
        f"{outcome.status} (max abs error {err:.3g}). Update the finding: drop or re-date "
        "INDEX_ADD_EXPANDED in lib/funcbwd_lab/studies/findings/known.py, re-run the compiled study "
        "(python -m funcbwd_lab.studies.compiled --only cost --out data/compiled.json --force) and "
        "the README/RFC blocks that quote it.")


def test_the_bug_names_its_upstream_issue_and_fix():
    bug = known.INDEX_ADD_EXPANDED
    assert bug.issue == "pytorch#183986" and bug.fixed_by == "pytorch#184488"
    assert bug.explains({"backend": "inductor", "op": "index_select"})
    assert not bug.explains({"backend": "aot_eager", "op": "index_select"})
    assert known.known_bug_for({"backend": "inductor", "op": "diag"}) is None
