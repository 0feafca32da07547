"""Torch bugs the workbench found, written up as upstream bug reports that prove themselves.

A :class:`Finding` is data: a title, the torch version it was first seen on, a minimal repro that
imports nothing but torch, the batching rule at fault (file, function and the commit it was read
at in pytorch/pytorch) and a family of related cases. Nothing in a report is typed in by hand:
:meth:`Finding.check` executes the repro and every case in a fresh namespace and compares what the
transform returned with a per-sample Python loop, and checks that an emulation of the rule as
written explains the result and the proposed fix removes it (:mod:`funcbwd_lab.studies.findings.check`).
:class:`Report` (:mod:`funcbwd_lab.studies.findings.report`) renders the result as a PyTorch bug
report, plain text or JSON; ``python -m funcbwd_lab findings`` (:mod:`funcbwd_lab.studies.findings.cli`) prints
them.

Each finding lives in its own module with its cases and its emulation:

* :mod:`~funcbwd_lab.studies.findings.masked_select`: ``masked_select`` backward with a broadcast input;
* :mod:`~funcbwd_lab.studies.findings.index_fill`: ``index_fill`` with a batched 0-dim value;
* :mod:`~funcbwd_lab.studies.findings.roll`: ``torch.roll`` of a batch of 0-d samples;
* :mod:`~funcbwd_lab.studies.findings.cdist`: ``cdist`` backward when only the cotangents are batched.

Each escapes a test whose batch entries are copies of one sample (docs/methodology.md); the roll
and cdist ones were computed by the OpInfo sweep's distinct batch entries (``python -m funcbwd_lab
coverage``). This module collects them and re-exports the API of the modules above.

Torch bugs upstream already knows, which make a peer of ours wrong on this torch, are not findings:
they are cited in :mod:`funcbwd_lab.studies.findings.known` (``KNOWN_BUGS``).
"""

from __future__ import annotations

from funcbwd.errors import BadInputError
from funcbwd_lab.studies.findings.cdist import CDIST
from funcbwd_lab.studies.findings.check import (ATOL, RTOL, STATUSES, Case, CaseResult, Finding, Outcome, Rule,
                                            compare, run, versions)
from funcbwd_lab.studies.findings.index_fill import INDEX_FILL
from funcbwd_lab.studies.findings.masked_select import MASKED_SELECT
from funcbwd_lab.studies.findings.report import Report
from funcbwd_lab.studies.findings.roll import ROLL

FINDINGS: tuple[Finding, ...] = (MASKED_SELECT, INDEX_FILL, ROLL, CDIST)


def finding_keys() -> list[str]:
    return [f.key for f in FINDINGS]


def get_finding(key: str) -> Finding:
    for f in FINDINGS:
        if f.key == key:
            return f
    raise BadInputError(f"unknown finding {key!r}; valid findings: {', '.join(finding_keys())}")


__all__ = ["Finding", "Rule", "Case", "Outcome", "CaseResult", "Report", "FINDINGS", "run", "compare",
           "finding_keys", "get_finding", "versions", "STATUSES", "ATOL", "RTOL", "MASKED_SELECT",
           "INDEX_FILL", "ROLL", "CDIST"]
