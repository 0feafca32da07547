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


def test_vmap_roll_of_0d_samples_rolls_the_batch():
    x = torch.arange(3.0)
    batched = vmap(lambda t: torch.roll(t, 1))(x)
    looped = torch.stack([torch.roll(t, 1) for t in x])
    assert torch.equal(looped, x)  # rolling a 0-d tensor is the identity
    assert torch.equal(batched, torch.tensor([2.0, 0.0, 1.0]))  # the batch itself was rolled
    # samples of rank 1 are right
    xs = torch.arange(6.0).reshape(3, 2)
    torch.testing.assert_close(vmap(lambda t: torch.roll(t, 1))(xs), torch.stack([torch.roll(t, 1) for t in xs]))


def test_vmap_vjp_of_cdist_with_only_cotangents_batched_repeats_the_first_entry():
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g)
    _, fn = vjp(lambda a, b: torch.cdist(a, b, p=1.0), x1, x2)
    cts = torch.randn(3, 3, 5, generator=g)
    batched = vmap(fn)(cts)
    for i in range(2):
        looped = torch.stack([fn(c)[i] for c in cts])
        assert not torch.allclose(batched[i], looped)
        torch.testing.assert_close(batched[i], looped[0].expand_as(batched[i]))  # entry 0, everywhere
    # with x1 batched too, it is right
    xs = torch.randn(3, 3, 4, generator=g)
    per = lambda a, c: vjp(lambda a_: torch.cdist(a_, x2, p=1.0), a)[1](c)[0]  # noqa: E731
    torch.testing.assert_close(vmap(per)(xs, cts), torch.stack([per(a, c) for a, c in zip(xs, cts)]))
