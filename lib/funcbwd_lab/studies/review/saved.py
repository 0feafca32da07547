"""The review studies' saved runs: one JSON file each under ``data/``, read by the RFC, written by
the study's own ``python -m funcbwd_lab.studies.review.NAME [--out FILE [--force]]`` (stdout without
``--out``; a committed file only with ``--force``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from funcbwd_lab import command


def load(data_dir: str | Path, name: str, schema: Any = None) -> dict[str, Any] | None:
    """``data_dir/name`` as saved, or None if it is not there (a wrong ``schema`` raises)."""
    path = Path(data_dir) / name
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if schema is not None and doc.get("schema") != schema:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {schema}")
    return doc


def main(module: str, doc: str, name: str, compute: Callable[[argparse.Namespace], dict],
         argv: list[str] | None = None, *, data_option: str | None = None,
         summary: Callable[[dict], str] | None = None) -> int:
    """A study's command line: compute the document, write it to ``--out`` (or stdout)."""
    if module == "__main__":  # run as ``python -m ...``: the module's own name
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    prog = f"python -m {module}"
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--out", help=f"write the JSON here (e.g. data/{name})")
    command.add_force(p)
    if data_option is not None:
        p.add_argument("--data", default="data", help=data_option)
    a = p.parse_args(argv)
    if command.out_refused(prog, a.out, a.force):
        return 2
    result = compute(a)
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    if a.out:
        Path(a.out).write_text(text)
        print(f"wrote {a.out}" + (f": {summary(result)}" if summary else ""))
    else:
        sys.stdout.write(text)
    return 0
