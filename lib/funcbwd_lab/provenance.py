"""What a saved result was computed with: a hash of the source that computed it.

A resumable study keeps the cells an earlier run saved only when they were computed by the same
code: :func:`source_hash` covers every ``.py`` file of the tool (``lib/funcbwd``) and of the
study's own folder, so editing either starts the study over instead of mixing verdicts of two
versions of the tool in one table.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

LIB = Path(__file__).resolve().parents[1]


def source_hash(*folders: Path) -> str:
    """sha256 (16 hex digits) of the tool's sources and those under ``folders``."""
    h = hashlib.sha256()
    for folder in (LIB / "funcbwd", *folders):
        for path in sorted(Path(folder).rglob("*.py")):
            h.update(str(path.relative_to(LIB)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
