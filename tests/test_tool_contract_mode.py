"""The mode's contract on small programs of its own, one per class of bug the generated programs
found (lib/funcbwd_lab/studies/generated): each checked against the per-sample loop by
:func:`funcbwd.harness.check` (the answer, the gradients, the caller's state, the random state)."""

from __future__ import annotations

import pytest
import torch

from funcbwd import harness

B = 4


def _calls(seed: int = 0) -> list[harness.Call]:
    g = torch.Generator().manual_seed(seed)
    return [harness.Call((torch.randn(B, 4, generator=g),)),
            harness.Call((torch.randn(B, 4, generator=g),))]


def view_returned_after_its_base_is_promoted(x):
    buf = torch.zeros(4)
    whole = buf[:]  # taken before the batched write, returned without another use
    buf.add_(x * 2.0)
    return whole


@pytest.mark.parametrize("transform", ["vmap", "vmap_vjp", "vmap_vmap", "vmap_grad",
                                       "vmap_jacrev"])
@pytest.mark.parametrize("entry", ["vmap", "allow_inplace"])
def test_a_returned_view_of_a_promoted_tensor_has_the_write(transform, entry):
    if not harness.applies(transform, entry):
        pytest.skip("no vmap to replace")
    r = harness.check(view_returned_after_its_base_is_promoted, _calls(), transform, entry)
    assert r.ok, r
