"""The corpus: every module of this package holds ``CASES``, a list of
:class:`funcbwd_lab.studies.yourcode.case.Case` from one public library or issue tracker.

:data:`CASES` maps each case's name to it, in module order (alphabetical) then list order; a
duplicate name is an error.
"""

from __future__ import annotations

import importlib
import pkgutil

from funcbwd_lab.studies.yourcode.case import Case


def _collect() -> dict[str, Case]:
    out: dict[str, Case] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for case in getattr(module, "CASES", []):
            if case.name in out:
                raise ValueError(f"duplicate corpus case name {case.name!r} ({info.name})")
            out[case.name] = case
    return out


CASES: dict[str, Case] = _collect()
