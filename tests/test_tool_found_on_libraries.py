"""Contract bugs found on installed libraries, each with a program of our own.

1. What the mode remembers is keyed by the function's identity: a bound method is its object's.

   Found on pyro: ``TransformedDistribution(...).log_prob`` of different distributions share one
   code object; keyed by code and closure alone, a distribution's call could be sent to what
   worked for another one's (a wrong answer that depended on which case ran before).
2. ``state_writes="discard"`` gives back running statistics the per-sample loop stage wrote
   (found on torchvision's mobilenet_v3_small).
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


# ------------------------------------------------------------------------------ discard, looped
class _Looped(torch.nn.Module):
    """A BatchNorm in training and a branch on a value: vmap cannot batch the branch, so the
    mode's last stage (the per-sample loop) runs the module once per entry."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3).train()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(x.unsqueeze(0))
        return y * 2 if y.sum().item() > 0 else y


def test_discard_gives_back_running_statistics_the_per_sample_loop_wrote():
    """Found on torchvision's mobilenet_v3_small (per-sample gradients, state_writes="discard"):
    the batch_norm kernel's writes into the running statistics were not saved in the loop stage,
    so "the state given back as it was" left them changed. Mutation: without the save in
    rules.batch_norm, running_mean and running_var stay changed."""
    import copy
    import warnings

    net = _Looped()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    xs = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(1))
    truth = copy.deepcopy(net)
    want = torch.stack([truth(x) for x in xs])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", funcbwd.PerSampleLoopWarning)
        got = funcbwd.vmap(net, state_writes="discard")(xs)
    torch.testing.assert_close(got, want)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k


# ------------------------------------------------------------------------------ computed attributes
class _Positive(torch.nn.Module):
    """gpytorch's pattern: a property computed from a raw parameter (a new tensor per read) whose
    setter writes the raw parameter in place."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = torch.nn.Parameter(torch.zeros(()))

    @property
    def value(self) -> torch.Tensor:
        return self.raw.exp()

    @value.setter
    def value(self, v: torch.Tensor) -> None:
        self.raw.data.copy_(v.log())


_positive = _Positive()


def _scaled_by_a_property(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    same = torch.equal(x, y)  # no batching rule: the per-sample loop answers
    out = torch.zeros(2)
    out[0] = (x * _positive.value).sum() + float(same)
    return out


def test_a_computed_attribute_is_not_put_back():
    """Found on gpytorch's kernels under vmap(vjp): the decorator (the mode's functionalized
    stage) put a module's computed ``lengthscale`` "back" through its setter, an in-place write the
    mode refused. Mutation: without guards._computed, the call is refused."""
    import warnings

    xs, y = torch.randn(3, 4), torch.randn(4)
    want = torch.stack([_scaled_by_a_property(x, y) for x in xs])
    decorated = funcbwd.functionalized(_scaled_by_a_property)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with funcbwd.allow_inplace():
            got = torch.func.vmap(decorated, in_dims=(0, None))(xs, y)
    torch.testing.assert_close(got, want)
    assert _positive.raw.item() == 0.0
