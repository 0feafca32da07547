"""An opt-in vmap rule for ``aten::as_strided_scatter``, active only inside
:func:`batched_as_strided_scatter_rule`.

Why: functionalizing a backward that writes through an ``as_strided`` view (``as_strided``'s own
backward writes the grad into a zeros "storage" through one; so does circular ``pad``'s) turns
the write into ``as_strided_scatter(base, src, size, stride, storage_offset)``. torch 2.13
registers a ``FuncTorchBatched`` kernel for it that only raises ("requires special handling, and
does not yet have a batching rule", functorch/BatchRulesScatterOps.cpp): the per-sample fallback
cannot run it because ``storage_offset`` is an *absolute* position in ``self``'s storage, and a
per-sample slice of a batched tensor shares one storage with every other sample.

What one sample means (the contract the tests check against torch's own unbatched op):
upstream ``as_strided_scatter`` (native/TensorShape.cpp) clones ``self`` *preserving* its strides
and storage offset (``clone_preserve_strides``: the whole storage is copied), writes ``src``
through ``out.as_strided(size, stride, storage_offset)`` (None = ``self``'s storage offset) and
returns ``out``. Under vmap, sample i reads offsets the way functorch's vmap ``as_strided`` does
(LegacyBatchingRegistrations.cpp): "as if each x[i] had storage offset x.offset()", i.e. sample i's
frame is the physical storage shifted by ``i * batch_stride``. So

* self batched:  ``out[i] == as_strided_scatter(x_i, src_i, size, stride, off + i * bs)`` with
  ``x_i = physical_self.select(bdim, i)`` and ``bs`` its batch stride (``off=None`` needs no
  shift). The written view must lie inside sample 0's own extent ``[x.offset(), last element]``,
  the same check vmap's ``as_strided`` makes; outside it another sample's memory would be hit,
  so the rule raises.
* self unbatched: ``out[i] == as_strided_scatter(self, src_i, size, stride, off)`` exactly
  (bounds: ``self``'s storage, as upstream).
* a sample that overlaps itself (a zero stride over a dimension of size > 1): upstream clones it
  contiguously (offset 0) and so does the rule; then no shift applies.

Keeping this frame matters beyond values: functionalization reads views back out of the result
with the *same* ``(size, stride, storage_offset)`` through vmap's ``as_strided``, so the result
keeps ``self``'s per-sample strides and storage offset (batch stride = one private frame per
sample).

How: each sample gets a private copy of its frame, up to the end of its extent or of the written
view, whichever is later (a ``(B, E)`` tensor, zeros where nothing of ``self`` lives); the write
is one ``index_copy`` along the frame axis at the view's element positions; the result is that
buffer seen through ``as_strided((B, *self.shape), (E, *strides), offset)``. Only ops that have
batching rules and autograd formulas are used, and nothing aliases the inputs.

The per-sample loop is used in one case only: when the written view may overlap itself (two
indices can address one element; found conservatively by sorting its dims by stride). Then the
values depend on the order ``copy_`` writes in, which a vectorized write does not promise to
reproduce, so each sample runs torch's unbatched ``copy_`` into its own frame, exactly as
upstream does. A zero stride over a dimension of size > 1 makes that ``copy_`` raise, as upstream
does.

The rule is registered for the ``with`` block only (process-wide while active: the dispatcher has
no per-thread registrations) and removed on exit, also on error; nested blocks share one
registration. Outside, vmap raises torch's error again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from funcbwd_lab.batching.scope import ScopedRule

OP = "aten::as_strided_scatter"



# ------------------------------------------------------------------------------ geometry
def view_end(size: Sequence[int], stride: Sequence[int], offset: int) -> int | None:
    """One past the last storage position a ``(size, stride, offset)`` view reaches; None if the
    view has no elements."""
    if any(s == 0 for s in size):
        return None
    return offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1


def may_overlap(size: Sequence[int], stride: Sequence[int]) -> bool:
    """True unless the view provably maps distinct indices to distinct positions: with its
    dims of size > 1 sorted by stride, each stride must exceed the span of all smaller ones."""
    dims = sorted((st, n) for n, st in zip(size, stride) if n > 1)
    span = 0
    for st, n in dims:
        if st <= span:
            return True
        span += (n - 1) * st
    return False


def self_overlaps(size: Sequence[int], stride: Sequence[int]) -> bool:
    """Upstream's ``has_internal_overlap(self) == Yes``: a zero stride over a dim of size > 1."""
    return any(st == 0 and n > 1 for n, st in zip(size, stride))


def _contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(size):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _storage_numel(t: torch.Tensor) -> int | None:
    """Elements in ``t``'s storage; None for a transform's wrapper (no storage to ask)."""
    try:
        return t.untyped_storage().nbytes() // t.element_size()
    except (NotImplementedError, RuntimeError):
        return None


@dataclasses.dataclass
class Frames:
    """``self`` as one private storage frame per sample.

    ``data`` is ``(B, L)``: sample i's storage positions ``[base, base + L)`` (its extent), or
    ``(L,)`` when every sample shares it (self unbatched). ``shape``/``strides``/``base`` are a
    sample's geometry inside its frame; a written view must lie in ``[lo, hi)``."""

    data: torch.Tensor
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    base: int
    lo: int
    hi: int
    what: str  # names the bounds in errors


def _frames(self: torch.Tensor, bdim: int | None) -> Frames:
    if bdim is None:
        x, lead = self, ()
    else:
        x, lead = self.movedim(bdim, 0), (self.shape[bdim],)
    k = len(lead)
    shape, strides = tuple(x.shape[k:]), tuple(x.stride()[k:])
    if self_overlaps(shape, strides):  # upstream: plain clone -> contiguous, offset 0
        x = x.contiguous()
        strides = tuple(x.stride()[k:])
    base = x.storage_offset()
    end = view_end(shape, strides, base)
    length = 0 if end is None else end - base
    data = x.as_strided((*lead, length), (*x.stride()[:k], 1), base)
    if bdim is None:
        numel = _storage_numel(x)
        if numel is not None:
            return Frames(data, shape, strides, base, 0, numel, f"self's storage (size {numel})")
    return Frames(data, shape, strides, base, base, base + length,
                  f"one sample's own memory, positions [{base}, {base + length})")


# ------------------------------------------------------------------------------ checks
def _check_args(src_shape: Sequence[int], size: Sequence[int], stride: Sequence[int],
                offset: int | None) -> None:
    """Upstream's argument errors (as_strided and as_strided_scatter wording)."""
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(st < 0 for st in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(stride)}")
    if offset is not None and offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    if tuple(src_shape) != tuple(size):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(src_shape)}, slice size = {list(size)}")


def _check_bounds(fr: Frames, size, stride, offset: int, end: int | None) -> None:
    if end is None:
        return
    if offset < fr.lo or end > fr.hi:
        raise RuntimeError(
            f"vmap as_strided_scatter: the view (size {list(size)}, stride {list(stride)}, "
            f"storage offset {offset}) reaches positions [{offset}, {end}) outside {fr.what}; "
            f"under vmap that memory belongs to other samples (vmap's as_strided refuses the "
            f"same view)")


# ------------------------------------------------------------------------------ the rule
def _flat_positions(size: Sequence[int], stride: Sequence[int], offset: int) -> torch.Tensor:
    """Storage positions of the view's elements in row-major order (int64)."""
    idx = torch.full((), offset, dtype=torch.long)
    for n, st in zip(size, stride):
        idx = idx.unsqueeze(-1) + torch.arange(n, dtype=torch.long) * st
    return idx.reshape(-1)


def as_strided_scatter_batch_rule(info: Any, in_dims: Sequence[int | None], self: torch.Tensor,
                                  src: torch.Tensor, size: Sequence[int], stride: Sequence[int],
                                  storage_offset: int | None = None) -> tuple[torch.Tensor, int]:
    """The vmap rule (``torch.library.register_vmap`` signature): physical ``self``/``src``
    with their batch dims ``in_dims[0]``/``in_dims[1]`` -> ``(out, 0)``, ``out`` of shape
    ``(B, *self_sample_shape)`` (see the module docstring for what each sample means)."""
    B = info.batch_size
    self_bdim, src_bdim = in_dims[0], in_dims[1]
    size, stride = [int(n) for n in size], [int(s) for s in stride]
    src_b = src.movedim(src_bdim, 0) if src_bdim is not None else src.expand(B, *src.shape)
    _check_args(src_b.shape[1:], size, stride, storage_offset)

    fr = _frames(self, self_bdim)
    offset = fr.base if storage_offset is None else int(storage_offset)
    return write_through_view(fr, src_b, size, stride, offset, B), 0


def write_through_view(fr: Frames, src_b: torch.Tensor, size: Sequence[int], stride: Sequence[int],
                       offset: int, B: int) -> torch.Tensor:
    """``(B, *fr.shape)``: each sample's private copy of its frame with ``src_b[i]`` written
    through the view ``(size, stride, offset)``, seen with the sample's own strides and storage
    offset (batch-major frames). Also the body of the ``aten::copy`` rule
    (:mod:`funcbwd_lab.batching.copy`), which writes through ``self``'s own geometry."""
    end = view_end(size, stride, offset)
    _check_bounds(fr, size, stride, offset, end)
    width = max(fr.base + fr.data.shape[-1], end or 0)
    frames = F.pad(fr.data, (fr.base, width - fr.base - fr.data.shape[-1]))
    frames = frames.expand(B, width) if frames.dim() == 1 else frames
    src_b = src_b.to(dtype=frames.dtype, device=frames.device)

    if end is not None and may_overlap(size, stride):
        # The one per-sample loop: an overlapping view's values depend on copy_'s write order.
        rows = []
        for i in range(B):
            row = frames[i].clone()
            row.as_strided(size, stride, offset).copy_(src_b[i])
            rows.append(row)
        written = torch.stack(rows)
    else:
        written = frames.index_copy(1, _flat_positions(size, stride, offset),
                                    src_b.reshape(B, -1)).contiguous()
    return written.as_strided((B, *fr.shape), (width, *fr.strides), fr.base)


def frames_of(self: torch.Tensor, bdim: int | None) -> Frames:
    """``self`` (physical, batch dim ``bdim`` or None) as one private frame per sample."""
    return _frames(self, bdim)


# ------------------------------------------------------------------------------ scope
_SCOPED = ScopedRule(OP, as_strided_scatter_batch_rule)

#: Give ``aten::as_strided_scatter`` a vmap rule for the block (re-entrant; removed when the outermost block exits, also on error).
batched_as_strided_scatter_rule = _SCOPED.scope
as_strided_scatter_rule_active = _SCOPED.active
