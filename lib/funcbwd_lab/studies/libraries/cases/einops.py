"""einops 0.8.2: the control group's core (rearrange, reduce, repeat, einsum, layers)."""

from __future__ import annotations

from funcbwd_lab.studies.libraries.case import randn
from funcbwd_lab.studies.libraries.cases import fn, lib, module_fn

L = "einops"
TESTS = "arogozhnikov/einops: einops/tests/test_ops.py"


def E():
    return lib("einops")


def x(g):
    return (randn(g, 2, 3, 4),)


CASES = [
    fn("einops.rearrange", L, "rearrange(x, 'a b c -> c (a b)')", TESTS,
       lambda: lambda t: E().rearrange(t, "a b c -> c (a b)"), x, group="control"),
    fn("einops.reduce", L, "reduce(x, 'a b c -> a c', 'mean')", TESTS,
       lambda: lambda t: E().reduce(t, "a b c -> a c", "mean"), x, group="control"),
    fn("einops.reduce(max)", L, "reduce(x, 'a b c -> b', 'max')", TESTS,
       lambda: lambda t: E().reduce(t, "a b c -> b", "max"), x, group="control"),
    fn("einops.repeat", L, "repeat(x, 'a b c -> a b c r', r=2)", TESTS,
       lambda: lambda t: E().repeat(t, "a b c -> a b c r", r=2), x, group="control"),
    fn("einops.einsum", L, "einsum(x, y, 'a b c, c d -> a d')",
       "arogozhnikov/einops: einops/tests/test_einsum.py",
       lambda: lambda t, u: E().einsum(t, u, "a b c, c d -> a d"),
       lambda g: (randn(g, 2, 3, 4), randn(g, 4, 2)), batched=(0, 1), group="control"),
    module_fn("einops.layers.torch.Rearrange", L, "Rearrange('a b c -> (a b) c')(x)",
              "arogozhnikov/einops: einops/tests/test_layers.py",
              lambda: lib("einops.layers.torch").Rearrange("a b c -> (a b) c"), x,
              group="control"),
    module_fn("einops.layers.torch.EinMix", L,
              "EinMix('a b c -> a b d', weight_shape='c d', c=4, d=5)(x)",
              "arogozhnikov/einops: einops/tests/test_layers.py",
              lambda: lib("einops.layers.torch").EinMix("a b c -> a b d", weight_shape="c d",
                                                        c=4, d=5), x, group="control"),
]
