"""Known torch bugs: upstream's own, reported there, that make a peer of ours wrong on this torch.

Not findings of the workbench (those are :data:`funcbwd_lab.studies.findings.findings.FINDINGS`, with
a batching rule at fault and its emulation): each :class:`KnownBug` cites the upstream issue and
the PR that fixes it, carries a torch-only program in the findings' contract (``looped``: the
per-sample loop, then ``batched``: the call that goes wrong; run by
:func:`funcbwd_lab.studies.findings.check.run`), and names which of our measurements it touches
(:meth:`KnownBug.explains`: a compiled-study row of that backend and op).
``tests/test_findings_known.py`` asserts the wrong values on this torch and fails the day torch
fixes the bug, saying what to update.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from funcbwd.errors import BadInputError
from funcbwd_lab.studies.findings.check import Outcome, run


@dataclasses.dataclass(frozen=True)
class KnownBug:
    key: str
    title: str
    torch_seen: str  # the torch this workbench saw it on
    issue: str  # the upstream issue ("pytorch#N")
    fixed_by: str  # the upstream PR that fixes it
    fixed_after: str  # the last torch release that still has it
    summary: str
    repro: str  # imports only torch; defines ``looped`` then ``batched``
    backend: str  # the torch.compile backend that goes wrong
    ops: tuple[str, ...]  # the test ops whose torch-formula backward hits it (compiled study)

    def check(self) -> Outcome:
        """Run the repro now, in a fresh compiler state (nothing cached from earlier calls)."""
        import sys
        import types

        from funcbwd.internals import dynamo

        # dynamo reads a traced function's globals through the module they name: the repro runs
        # in a module's namespace, registered while it runs
        module = types.ModuleType("__repro__")
        saved = sys.modules.get("__repro__")
        sys.modules["__repro__"] = module
        try:
            with dynamo.fresh_compiler():
                return run(self.repro, self.key, module.__dict__)
        finally:
            if saved is None:
                sys.modules.pop("__repro__", None)
            else:
                sys.modules["__repro__"] = saved

    def explains(self, row: Mapping[str, Any]) -> bool:
        """Whether a compiled-study row (``backend``, ``op``) is one this bug makes wrong."""
        return row.get("backend") == self.backend and row.get("op") in self.ops

    def cite(self) -> str:
        return f"{self.issue}, fixed by {self.fixed_by} after torch {self.fixed_after}"


INDEX_ADD_EXPANDED_REPRO = '''\
import torch
from torch.func import vmap

idx = torch.tensor([0, 2, 2, 1, 0])
c = torch.randn(6, 5, 3, generator=torch.Generator().manual_seed(0))  # a batch of 6
f = lambda c: torch.zeros(4, 3).index_add(0, idx, c)
looped = torch.stack([f(ci) for ci in c])  # per-sample loop: the reference
eager = vmap(f)(c)  # right: equals the loop
batched = torch.compile(vmap(f), backend="inductor")(c)  # wrong values, no error
print("eager == loop:", torch.allclose(eager, looped))
print("compiled max abs error:", (batched - looped).abs().max().item())
'''

INDEX_ADD_EXPANDED = KnownBug(
    key="inductor_index_add_expanded",
    title="torch.compile (inductor) of vmap over index_add into an unbatched tensor returns wrong values",
    torch_seen="2.13.0",
    issue="pytorch#183986",
    fixed_by="pytorch#184488",
    fixed_after="2.13",
    summary=("`torch.compile(vmap(lambda c: torch.zeros(4, 3).index_add(0, idx, c)))` with inductor on "
             "the CPU returns wrong values where eager `vmap` is right: vmap expands the unbatched "
             "`zeros` across the batch, and inductor's lowering of index ops on expanded tensors "
             "(pytorch#183986) accumulates into memory the batch entries share. torch's own "
             "`index_select` backward is that `index_add`, so a compiled `vmap(vjp)` of "
             "`index_select` is wrong too (the compiled study's cost cases)."),
    repro=INDEX_ADD_EXPANDED_REPRO,
    backend="inductor",
    ops=("index_select",),
)

KNOWN_BUGS: tuple[KnownBug, ...] = (INDEX_ADD_EXPANDED,)


def known_bug_for(row: Mapping[str, Any]) -> KnownBug | None:
    """The known bug that makes this compiled-study row wrong, if any."""
    return next((b for b in KNOWN_BUGS if b.explains(row)), None)


def get_known_bug(key: str) -> KnownBug:
    for b in KNOWN_BUGS:
        if b.key == key:
            return b
    raise BadInputError(f"unknown known bug {key!r}; valid: {', '.join(b.key for b in KNOWN_BUGS)}")
