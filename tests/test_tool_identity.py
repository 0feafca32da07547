"""What the mode remembers is keyed by the function's identity: a bound method is its object's.

Found on installed libraries: pyro's ``TransformedDistribution(...).log_prob`` of different
distributions share one code object; keyed by code and closure alone, a distribution's call could
be sent to what worked for another one's (a wrong answer that depended on which case ran before).
"""

from __future__ import annotations

import torch

import funcbwd
from funcbwd import ladder


class Scaled:
    def __init__(self, k: float) -> None:
        self.k = torch.tensor(k)

    def f(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(3)
        y[0] = x.sum() * self.k
        return y


def test_a_bound_method_is_its_objects():
    a, b = Scaled(2.0), Scaled(5.0)
    assert ladder.identity(a.f) == ladder.identity(a.f)  # a fresh method object per access
    assert ladder.identity(a.f) != ladder.identity(b.f)  # mutation: key by code only -> equal
    assert hash(ladder.identity(a.f)) == hash(ladder.identity(a.f))


def test_two_objects_methods_each_get_their_own_answer():
    xs = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    a, b = Scaled(2.0), Scaled(5.0)
    for _ in range(3):
        funcbwd.vmap(a.f)(xs)
    torch.testing.assert_close(funcbwd.vmap(b.f)(xs)[:, 0], xs.sum(1) * 5)
