"""An opt-in vmap rule for ``aten::copy``, active only inside :func:`batched_copy_rule`.

Functionalization rewrites ``dst.copy_(src)`` into the out-of-place ``aten::copy(dst, src)``,
which has no ``FuncTorchBatched`` kernel in torch 2.13: under vmap it runs the slow per-sample
fallback (one Python-visible warning, B kernel calls). ``per_formula`` pays that on every formula
with ``copy_`` (diag). ``copy(dst, src)`` only reads ``dst``'s dtype, device and shape, so the
batched rule is ``src.to(dst.dtype).expand(dst.shape).clone()`` built from ops that batch.

The rule is registered for the ``with`` block and removed on exit (a process-wide change by
default would also alter every other vmap user's ``aten::copy``). Nested blocks share one
registration. ``traced`` removes the same fallback differently: its FX pass elides the copy.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

from funcbwd import internals

_LOCK = threading.Lock()
_DEPTH = 0
_STACK: contextlib.ExitStack | None = None


def batched_copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``aten::copy`` for BatchedTensors: a fresh tensor with ``self``'s dtype, device and
    (logical) shape holding ``src`` broadcast, made only of ops with batching rules."""
    return src.to(dtype=self.dtype, device=self.device).expand(self.shape).clone()


@contextlib.contextmanager
def batched_copy_rule() -> Iterator[None]:
    """Give ``aten::copy`` a vmap rule for the block (re-entrant; removed when the outermost
    block exits, also on error)."""
    global _DEPTH, _STACK
    with _LOCK:
        if _DEPTH == 0:
            stack = contextlib.ExitStack()
            stack.enter_context(internals.scoped_aten_kernel("copy", batched_copy, "FuncTorchBatched"))
            _STACK = stack
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _STACK is not None:
                stack, _STACK = _STACK, None
                stack.close()


def copy_rule_active() -> bool:
    return _DEPTH > 0
