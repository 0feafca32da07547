"""Regressions the OpInfo sweep found (data/coverage.json.gz: cells where ``builtin`` passes and a
functionalizing strategy fails or mismatches), each reduced to the smallest case that shows it.

* ``traced_backward``'s graph recorded ``view`` where the code it traced said ``reshape`` (make_fx
  picks the view on the trace's unbatched strides). Under vmap an intermediate's per-sample
  strides follow the batched physical tensor, the view is impossible and the graph raised "view
  size is not compatible" where eager copies (stft, float32 sample 8 and complex64 sample 0,
  vmapvjp, in_dims -1). Fixed by :func:`funcbwd_lab.strategies.traced_backward.reshape_views`.
* ``traced_backward``'s graph bypasses the autograd engine, which sums every node's grad to its
  input's shape. torch 2.13's vmap rule for ``_cdist_backward`` returns an empty cdist's grad
  with a leading 1 (``(1, 3, 5)`` for ``x1`` of ``(3, 5)``; unbatched: ``(3, 5)``): eager's engine
  hides it, the graph returned it (cdist, 32 float32 vmapvjp samples with an empty input).
  Worked around by :func:`funcbwd_lab.strategies.traced_backward.reduced_to`.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import vjp, vmap

from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.traced_backward import TracedBackward

B = 3


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _vmapvjp(st, fn, primals, cotangent, in_dims):
    """vmap over ``st.vjp(fn, *primals)[1](cotangent)`` and torch's own vjp per sample."""
    def per(*args):
        _, vjp_fn = st.vjp(fn, *args[:-1])
        return vjp_fn(args[-1])

    got = vmap(per, in_dims=in_dims)(*primals, cotangent)
    args = (*primals, cotangent)
    rows = []
    for b in range(B):
        sample = [a.select(d, b) for a, d in zip(args, in_dims)]
        rows.append(vjp(fn, *sample[:-1])[1](sample[-1]))
    want = tuple(torch.stack(parts) for parts in zip(*rows))
    return got, want


def _graph_ran(st, fn, primals, cotangent, in_dims):
    with provenance.collecting() as events:
        got, want = _vmapvjp(st, fn, primals, cotangent, in_dims)
    assert any(e.strategy == st.name and e.ran for e in events), events
    return got, want


def test_traced_backward_view_of_a_batched_intermediate_runs_as_reshape():
    # backward: ct * w (keeps ct's batch dim in the middle, physically) then reshape(12), which
    # the trace recorded as a view on its contiguous fake intermediate
    w = torch.randn(3, 4, generator=_gen(0))
    fn = lambda x: x.reshape(3, 4) * w  # noqa: E731
    x = torch.randn(B, 12, generator=_gen(1))
    ct = torch.randn(3, B, 4, generator=_gen(2))
    st = TracedBackward(install="always")  # the graph itself is under test
    got, want = _graph_ran(st, fn, (x,), ct, (0, 1))
    torch.testing.assert_close(got, want)
    (graph,) = [h.graph for h in st.cached()]
    targets = {n.target for n in graph.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.view.default not in targets
    assert torch.ops.aten.reshape.default in targets


def test_traced_backward_stft_batched_at_the_last_dim():
    # the sweep's cell: stft complex64 sample 0 (complex input: two-sided), in_dims (-1, -1)
    fn = lambda x: torch.stft(x, n_fft=10, window=torch.ones(10), return_complex=True)  # noqa: E731
    x = torch.randn(100, B, dtype=torch.complex64, generator=_gen(3))
    ct = torch.randn(10, 51, B, dtype=torch.complex64, generator=_gen(4))
    got, want = _graph_ran(TracedBackward(install="always"), fn, (x,), ct, (-1, -1))
    torch.testing.assert_close(got, want)


def test_traced_backward_cdist_with_an_empty_input_keeps_the_primal_shapes():
    # the sweep's cell: cdist float32 sample 9 (x1 empty, x2 broadcast over its batch dims)
    fn = lambda a, b: torch.cdist(a, b)  # noqa: E731
    x1 = torch.randn(B, 0, 4, 5, generator=_gen(5))
    x2 = torch.randn(B, 3, 5, generator=_gen(6))
    ct = torch.randn(B, 0, 4, 3, generator=_gen(7))
    got, want = _graph_ran(TracedBackward(install="always"), fn, (x1, x2), ct, (0, 0, 0))
    assert [g.shape for g in got] == [(B, 0, 4, 5), (B, 3, 5)]
    torch.testing.assert_close(got, want)


def test_the_cdist_batch_rule_still_differs_from_its_unbatched_op():
    """The torch 2.13 behaviour :func:`reduced_to` works around; when this fails torch fixed its
    ``_cdist_backward`` vmap rule and the workaround may go."""
    x1, x2 = torch.randn(B, 3, 5), torch.randn(B, 0, 4, 5)
    cd = torch.ops.aten._cdist_forward(x1[0], x2[0], 2.0, None)
    unbatched = torch.ops.aten._cdist_backward(torch.zeros_like(cd), x1[0], x2[0], 2.0, cd)
    batched = vmap(torch.ops.aten._cdist_backward, in_dims=(None, 0, 0, None, None))(
        torch.zeros_like(cd), x1, x2, 2.0, cd)
    assert unbatched.shape == (3, 5)
    assert batched.shape[1:] == (1, 3, 5)


def _functionalized_backward(f, x, ct):
    from torch.func import functionalize, vjp

    return functionalize(vjp(f, x)[1])(ct)[0]


def test_functionalized_copy_has_no_derivative_in_torch():
    """The torch limitations behind the sweep's remaining regressions of whole and hooks
    (funcbwd_lab.studies.coverage.causes): torch-only, nothing of funcbwd. Fails the day torch gives
    aten::copy (and complex slice_scatter) derivatives: then the causes table is out of date."""
    from torch.func import jvp, vjp

    f = lambda x: x.as_strided((2,), (1,), 0)  # noqa: E731
    x, ct = torch.randn(3), torch.randn(2)
    with pytest.raises(RuntimeError, match="derivative for aten::copy is not implemented"):
        vjp(lambda c: _functionalized_backward(f, x, c), ct)[1](torch.randn(3))
    with pytest.raises(RuntimeError, match="forward AD with aten::copy"):
        jvp(lambda c: _functionalized_backward(f, x, c), (ct,), (torch.randn(2),))
    # eager (no functionalization) differentiates the same backward fine
    vjp(lambda c: vjp(f, x)[1](c)[0], ct)[1](torch.randn(3))
    g = lambda x: torch.stft(x, n_fft=10, return_complex=True)  # noqa: E731
    x, ct = torch.randn(100), torch.randn(6, 51, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match="slice_scatter does not support automatic differentiation"):
        vjp(lambda c: _functionalized_backward(g, x, c), ct)[1](torch.randn(100))


def test_every_cause_names_a_test_that_exists_and_matching_is_strict():
    from funcbwd_lab.studies.coverage import causes

    here = open(__file__).read()
    for c in causes.CAUSES:
        path, name = c.shown_by.split("::")
        assert path == "tests/test_sweep_regressions.py" and f"def {name}(" in here, c.key
    reg = {"cell": ("as_strided", "0", "float32", "vmapvjpvjp"), "strategy": "whole",
           "message": "RuntimeError: the derivative for aten::copy is not implemented."}
    assert causes.cause_of(reg).key == "copy_has_no_derivative"
    # mutation: the same message from another op, or another strategy, is not explained
    assert causes.cause_of({**reg, "cell": ("diag", "0", "float32", "vmapvjpvjp")}) is None
    assert causes.cause_of({**reg, "strategy": "traced_backward"}) is None
    assert list(causes.explain([{**reg, "strategy": "traced_backward"}])) == ["unexplained"]
    # a fixed bug of ours that came back is a regression nobody explained
    back = {"cell": ("cdist", "9", "float32", "vmapvjp"), "strategy": "traced_backward",
            "message": "vs torch's own gradient: output 1: shape (3, 1, 3, 5) != (3, 3, 5)"}
    assert causes.cause_of(back) is None
