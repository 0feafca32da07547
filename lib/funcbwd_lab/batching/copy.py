"""An opt-in vmap rule for ``aten::copy``, active only inside :func:`batched_copy_rule`.

Functionalization rewrites ``dst.copy_(src)`` into the out-of-place ``aten::copy(dst, src)``,
which has no ``FuncTorchBatched`` kernel in torch 2.13: under vmap it runs the slow per-sample
fallback (one Python-visible warning, B kernel calls). ``per_formula`` pays that on every formula
with ``copy_`` (diag).

What one sample means: upstream ``copy`` (native/Copy.cpp) is ``clone_preserve_strides(dst)``
then ``copy_(src)``: the result has ``dst``'s values *and layout* (strides and storage offset;
a ``dst`` that overlaps itself is cloned contiguously first), with ``src`` broadcast over it. The
layout is part of the contract, not a detail: functionalized backward formulas read views back
out of the result with absolute ``(size, stride, storage_offset)`` through ``as_strided`` (torch's
``CopySlices``: ``new_empty_strided(base) -> copy(grad) -> as_strided(view geometry)``). A result
laid out like ``src`` instead (e.g. a cotangent batched at its last dim, whose per-sample strides
are then ``(…, B)``) makes those views read the wrong elements: wrong numbers, no error.

How: the rule works on the physical tensors (``torch.library.register_vmap`` signature) and is
the ``aten::as_strided_scatter`` rule's write with ``dst``'s own geometry: each sample gets a
private frame laid out like ``dst``'s sample (batch-major, the sample's strides and storage
offset kept, see :mod:`funcbwd_lab.batching.as_strided_scatter`) and ``src`` is written through
``dst``'s ``(size, stride, storage_offset)``. When ``dst``'s sample is dense with offset 0 (the
usual ``new_empty_strided`` dst) ``src`` overwrites the whole frame, so it is only laid out in
``dst``'s stride order (one clone, no scatter).

The rule is registered for the ``with`` block and removed on exit (a process-wide change by
default would also alter every other vmap user's ``aten::copy``). Nested blocks share one
registration. ``traced`` removes the same fallback differently: its FX pass elides the copy.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from funcbwd_lab.batching.scope import ScopedRule
from funcbwd_lab.batching import as_strided_scatter as ass

OP = "aten::copy"



def copy_batch_rule(info: Any, in_dims: Sequence[int | None], self: torch.Tensor,
                    src: torch.Tensor, non_blocking: bool = False) -> tuple[torch.Tensor, int]:
    """The vmap rule: physical ``self``/``src`` with batch dims ``in_dims[0]``/``in_dims[1]`` ->
    ``(out, 0)``; sample i of ``out`` is ``src_i`` broadcast to ``self``'s sample shape, cast to
    ``self``'s dtype and device, laid out like ``self``'s sample (upstream ``copy``)."""
    B = info.batch_size
    self_bdim, src_bdim = in_dims[0], in_dims[1]
    fr = ass.frames_of(self, self_bdim)
    src_b = src.movedim(src_bdim, 0) if src_bdim is not None else src.unsqueeze(0)
    extra = len(fr.shape) - (src_b.dim() - 1)
    if extra < 0:
        raise RuntimeError(f"vmap copy: src's sample shape {list(src_b.shape[1:])} does not "
                           f"broadcast to self's sample shape {list(fr.shape)}")
    src_b = src_b.reshape(src_b.shape[0], *([1] * extra), *src_b.shape[1:])
    src_b = src_b.to(dtype=self.dtype, device=self.device).expand(B, *fr.shape)
    numel = math.prod(fr.shape)
    if fr.base == 0 and fr.data.shape[-1] == numel and not ass.may_overlap(fr.shape, fr.strides):
        # dst's sample is dense (the usual new_empty_strided dst): src overwrites its whole
        # frame, so lay src out in dst's stride order; nothing of dst's frame survives to copy.
        order = sorted(range(len(fr.shape)), key=lambda d: (-fr.strides[d], d))
        dense = src_b.permute(0, *(d + 1 for d in order)).contiguous().reshape(B, numel)
        return dense.as_strided((B, *fr.shape), (numel, *fr.strides), 0), 0
    return ass.write_through_view(fr, src_b, fr.shape, fr.strides, fr.base, B), 0


_SCOPED = ScopedRule(OP, copy_batch_rule)

#: Give ``aten::copy`` a vmap rule for the block (re-entrant; removed when the outermost block exits, also on error).
batched_copy_rule = _SCOPED.scope
copy_rule_active = _SCOPED.active
