"""The sweep's saved data: one gzipped JSON file, ``{"meta", "records", "upstream_xfails"}``.

``meta`` says what the data covers (``compositions``, ``dtypes``, ``samples`` per dtype and
composition, ``max_in_dims`` (null: no cap), budgets, ``strategies``, torch's version, the ops,
how long it took); every record carries its ``composition`` and ``dtype``; ``upstream_xfails``
is the upstream table with a computed verdict per entry
(:func:`funcbwd_lab.studies.coverage.verdicts.upstream_verdicts`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

SCHEMA = "funcbwd-coverage/3"
FILE_NAME = "coverage.json.gz"  # in the checkout's data/


def save(path: str | Path, records: list[dict[str, Any]], meta: dict[str, Any],
         upstream: list[dict[str, Any]] | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "meta": meta, "records": records, "upstream_xfails": upstream or []}
    text = json.dumps(doc, separators=(",", ":"), sort_keys=False)
    tmp = path.with_name(path.name + ".tmp")  # written whole, then renamed: never half a file,
    with gzip.open(tmp, "wt", compresslevel=9) as f:  # never written through a link
        f.write(text)
    tmp.replace(path)


def load(path: str | Path) -> dict[str, Any]:
    """The saved document (a FuncbwdError names a wrong schema)."""
    from funcbwd.errors import BadInputError

    if not Path(path).is_file():
        raise BadInputError(f"no saved coverage run at {path}; pass --load FILE (e.g. the "
                            "checkout's data/coverage.json.gz)")
    with gzip.open(Path(path), "rt") as f:
        doc = json.load(f)
    if doc.get("schema") != SCHEMA:
        raise BadInputError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}; rerun "
                            "python -m funcbwd_lab coverage")
    return doc
