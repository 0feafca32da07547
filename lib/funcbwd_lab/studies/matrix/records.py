"""Cells as records: JSON / CSV text, records back to cells, and the saved matrix file.

``stable_records`` drop the volatile timing so two runs of the same code give identical records;
:func:`save` / :func:`load` read and write such a file at an explicit path (the README's is the
repository's ``data/matrix-test-ops.json``, passed by ``tools/update_readme.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from funcbwd_lab.run.runner import RECORD_KEYS, CellResult


def to_json(results: Sequence[CellResult]) -> str:
    return json.dumps([r.record() for r in results], indent=1)


def to_csv(results: Sequence[CellResult]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(RECORD_KEYS))
    w.writeheader()
    for r in results:
        rec = r.record()
        rec["fallback_ops"] = ";".join(rec["fallback_ops"])
        w.writerow(rec)
    return buf.getvalue()


def from_records(records: Iterable[dict[str, Any]]) -> list[CellResult]:
    """Cells from records (unknown keys ignored; missing ones take the field defaults)."""
    fields = {f.name for f in dataclasses.fields(CellResult)}
    out = []
    for rec in records:
        kw = {k: v for k, v in rec.items() if k in fields}
        for k in ("max_abs_err", "max_rel_err", "truth_err"):
            if kw.get(k) == "inf":
                kw[k] = float("inf")
        out.append(CellResult(**kw))
    return out


def stable_records(results: Sequence[CellResult]) -> list[dict]:
    """Records without the volatile timing, for saving and comparing runs."""
    out = []
    for r in results:
        rec = r.record()
        rec.pop("seconds")
        out.append(rec)
    return out


def save(results: Sequence[CellResult], path: str | Path) -> None:
    """Write ``results`` as stable records (JSON) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stable_records(results), indent=1) + "\n")


def load(path: str | Path) -> list[CellResult]:
    """The cells saved at ``path`` by :func:`save`."""
    return from_records(json.loads(Path(path).read_text()))
