"""Issue 31, item 4: every funcbwd module, function or class a notebook's prose or code names
(``funcbwd_lab.ops.discussion.diag``, ``funcbwd_lab.legacy``) exists: the notebook sources
(``notebooks/*.py``, ``notebooks/templates/*``) are checked, and so are the stored .ipynb files."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bfuncbwd(?:\.[A-Za-z_]\w*)+")


def resolves(dotted: str) -> bool:
    """Does ``dotted`` name a module, or an attribute of one (a function, class, constant)?"""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                try:  # a submodule not imported by its package
                    obj = importlib.import_module(f"{obj.__name__}.{attr}")
                    continue
                except (ImportError, AttributeError):
                    return False
            obj = getattr(obj, attr)
        return True
    return False


def names_in(text: str) -> set[str]:
    return {m.group(0).rstrip(".") for m in NAME.finditer(text)}


SOURCES = sorted([*ROOT.glob("notebooks/*.py"), *ROOT.glob("notebooks/templates/*.py")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_funcbwd_name_in_a_notebook_source_exists(path):
    missing = sorted(n for n in names_in(path.read_text()) if not resolves(n))
    assert not missing, f"{path.name} names what does not exist: {missing}"


def test_the_stored_notebooks_cite_no_missing_module():
    text = "\n".join("".join(c["source"]) for p in ROOT.glob("notebooks/*.ipynb")
                     for c in json.loads(p.read_text())["cells"])
    assert "funcbwd_lab.ops.legacy_formulas" not in text


def test_the_check_can_fail():
    assert not resolves("funcbwd_lab.ops.legacy_formulas")
    assert resolves("funcbwd_lab.ops.discussion.diag") and resolves("funcbwd_lab.legacy")
