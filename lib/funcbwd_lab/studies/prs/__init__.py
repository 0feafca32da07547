"""The small PRs of the RFC as artifacts (docs/prs/): their kernels built out of tree against the
installed torch (:mod:`.build`, ``csrc/``), what they change (:mod:`.effects`) and the upstream
test entries they retire (:mod:`.upstream`). Saved runs: ``data/prs-*.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_saved(data_dir: str | Path, name: str, schema: str) -> dict[str, Any] | None:
    """``data_dir/name`` as saved, or None if it is not there (a wrong schema raises)."""
    path = Path(data_dir) / name
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if doc.get("schema") != schema:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {schema}")
    return doc
