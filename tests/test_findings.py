"""The torch 2.13 bugs the README reports, reproduced directly (no funcbwd code involved): if a
torch upgrade fixes one, this fails and the README's "Findings" section needs updating."""

from __future__ import annotations

import pytest
import torch
from torch.func import vjp, vmap


def test_vmap_index_fill_with_batched_scalar_value_is_silently_wrong():
    idx = torch.tensor([0, 3])
    g = torch.tensor([1.0, 2.0, 3.0])
    batched = vmap(lambda v: torch.zeros(5).index_fill(0, idx, v))(g)
    looped = torch.stack([torch.zeros(5).index_fill(0, idx, v) for v in g])
    assert not torch.equal(batched, looped)
    assert torch.equal(batched[:, 0], torch.full((3,), 3.0))  # every entry got the last value


def test_builtin_masked_select_with_implicitly_broadcast_input_breaks_under_vmap_vjp():
    x = torch.randn(4)
    mask = torch.tensor([[True, False, True, True], [False, True, False, False], [True, True, False, True]])
    out, fn = vjp(lambda t: torch.masked_select(t, mask), x)
    cts = torch.randn(2, *out.shape)
    with pytest.raises(RuntimeError, match="must match the size"):
        vmap(fn)(cts)
    # batch 3 == mask rows: no error, wrong values
    cts = torch.randn(3, *out.shape)
    (batched,) = vmap(fn)(cts)
    looped = torch.stack([fn(c.clone())[0] for c in cts])
    assert not torch.allclose(batched, looped)
    # explicit broadcast works
    out, fn = vjp(lambda t: torch.masked_select(t.expand(3, 4), mask), x)
    (batched,) = vmap(fn)(cts)
    torch.testing.assert_close(batched, torch.stack([fn(c.clone())[0] for c in cts]))
