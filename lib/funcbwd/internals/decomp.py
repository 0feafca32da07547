"""Private torch internals, part three: torch's decompositions (``torch._decomp``) and a re-trace
of a graph with some of its ops decomposed. Re-exported by :mod:`funcbwd.internals`.
[traced_backward: fallback-free graphs]
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import torch


@functools.lru_cache(maxsize=None)
def decomposition(op: torch._ops.OpOverload) -> Callable[..., Any] | None:
    """torch's decomposition of ``op``: its entry in ``torch._decomp.decomposition_table``
    (which holds the core ATen decompositions too), else its CompositeImplicitAutograd kernel
    (``op.decompose``); None if torch has neither."""
    from torch._decomp import decomposition_table

    fn = decomposition_table.get(op)
    if fn is not None:
        return fn
    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return op.decompose
    return None


def retrace_decomposed(gm: torch.fx.GraphModule, table: Mapping[Any, Callable[..., Any]],
                       args: list) -> torch.fx.GraphModule:
    """``gm`` traced again (make_fx in fake mode, functionalized: a decomposition may write in
    place) with the ops of ``table`` replaced by their decompositions, recursively (a
    decomposition's own ops go through the table too). ``args``: real tensors of the
    placeholders' shapes, strides and dtypes (made fake)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(torch.func.functionalize(gm), decomposition_table=dict(table),
                   tracing_mode="fake", _allow_non_fake_inputs=True)(*args)


def fallback_op_in(message: str) -> str | None:
    """The op named by vmap's error when its per-sample fallback is disabled
    (``aten::unfold_backward hit the vmap fallback which is currently disabled``), or None."""
    marker = " hit the vmap fallback which is currently disabled"
    if marker not in message:
        return None
    return message.split(marker)[0].split()[-1]
