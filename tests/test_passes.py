"""The decorator's graph passes (funcbwd.fx.passes): each rewrites what it claims, keeps the values
under transforms, and a broken one is caught by its check (mutations)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.func import jacrev, vjp, vmap

import funcbwd
from funcbwd.fx import cse, fresh, fresh_scatter, gather, passes
from funcbwd.fx.elide import count_targets
from funcbwd.fx.formula_graphs import ElisionCheck, build, trace_formula
# the corpus's own re-creations of public code (pytorch3d so3.hat: six element writes into a
# fresh zeros, two dims deep; kornia pinhole_matrix: writes into a repeated eye)
from funcbwd_lab.studies.yourcode.cases.kornia import pinhole_matrix as pinhole
from funcbwd_lab.studies.yourcode.cases.kornia import pinhole_matrix_rewrite as pinhole_rewrite
from funcbwd_lab.studies.yourcode.cases.pytorch3d import hat, hat_rewrite

aten = torch.ops.aten


def features(w, x):  # functorch#105: w @ x twice, strided writes into a fresh zeros
    h = torch.zeros(6)
    h[::2] = (w @ x)[:3]
    h[1::2] = (w @ x)[3:].tanh()
    return (h ** 2).sum(-1, keepdim=True)


def features_rewrite(w, x):
    z = w @ x
    return (torch.stack([z[:3], z[3:].tanh()], dim=1).reshape(6) ** 2).sum(-1, keepdim=True)


def item_write(x):  # pytorch#103329: a read of the fresh zeros, an item write
    mat = torch.zeros(x.shape)
    mat[0, 0] = mat[0, 1] + x[0, 0]
    return mat


def item_write_rewrite(x):
    first = torch.cat([x[0, :1], torch.zeros_like(x[0, 1:])])
    return torch.cat([first[None], torch.zeros_like(x[1:])])


def pieces(x):  # step-1 writes with a gap, into a fresh ones
    y = torch.ones(7)
    y[0] = x[0]
    y[4:] = x[1:4] * 2
    return y


def pieces_rewrite(x):
    return torch.cat([x[:1], torch.ones(3), x[1:4] * 2])


def rows(x):  # every row of a fresh zeros written: a stack
    y = torch.zeros(3, 4)
    y[1] = x.cos()
    y[0] = x.sin()
    y[2] = x
    return y


def rows_rewrite(x):
    return torch.stack([x.sin(), x.cos(), x])


def diagonal(x):
    y = torch.zeros(4, 4)
    y.diagonal().copy_(x)
    return y


def columns(x):
    y = torch.zeros(3, 5)
    y[:, 1:3] = x
    return y


def columns_rewrite(x):
    return torch.cat([torch.zeros(3, 1), x, torch.zeros(3, 2)], dim=1)


def recurrence(x):  # a state written row by row and read back (a filter's loop)
    y = torch.zeros(5, 3)
    y[0] = x[0]
    for i in range(1, 5):
        y[i] = y[i - 1] * 0.5 + x[i]
    return y


def recurrence_rewrite(x):
    ys = [x[0]]
    for i in range(1, 5):
        ys.append(ys[-1] * 0.5 + x[i])
    return torch.stack(ys)


CASES = [  # (function, rewrite, one sample's args, the ops the passes must leave)
    (features, features_rewrite, (torch.randn(6, 6), torch.randn(6)), {aten.stack.default: 1,
                                                                       aten.mv.default: 1}),
    (item_write, item_write_rewrite, (torch.randn(5, 6),), {aten.select_backward.default: 2,
                                                            aten.zeros.default: 0}),
    (pieces, pieces_rewrite, (torch.randn(4),), {aten.cat.default: 1}),
    (rows, rows_rewrite, (torch.randn(4),), {aten.stack.default: 1, aten.cat.default: 0}),
    (diagonal, torch.diag_embed, (torch.randn(4),), {aten.diagonal_backward.default: 1}),
    (columns, columns_rewrite, (torch.randn(3, 2),), {aten.slice_backward.default: 1}),
    # gather: one index_select from the written pieces, or the pieces in order (a cat)
    (hat, hat_rewrite, (torch.randn(4, 3),), {aten.index_select.default: 1,
                                              aten.zeros.default: 0}),
    (pinhole, pinhole_rewrite, (torch.randn(3, 12),), {aten.index_select.default: 1,
                                                       aten.repeat.default: 0}),
    (recurrence, recurrence_rewrite, (torch.randn(5, 3),), {aten.index_select.default: 0,
                                                            aten.cat.default: 1}),
]
SCATTERS = (aten.slice_scatter.default, aten.select_scatter.default, aten.diagonal_scatter.default)


@pytest.mark.parametrize("fn,rewrite,args,left", CASES, ids=[c[0].__name__ for c in CASES])
def test_passes_rewrite_the_graph_and_keep_values(fn, rewrite, args, left):
    entry = build(fn, args, optimize=True)
    assert entry.check.ok and not entry.pass_report.refused, entry.pass_report
    assert count_targets(entry.graph, SCATTERS) == 0
    for op, n in left.items():
        assert count_targets(entry.graph, (op,)) == n, (op, entry.graph.graph)
    wrapped = funcbwd.functionalized(fn)
    batch = tuple(torch.stack([a, a * 2 + 1, -a]) for a in args)
    torch.testing.assert_close(vmap(wrapped)(*batch), vmap(rewrite)(*batch))
    torch.testing.assert_close(vmap(jacrev(wrapped))(*batch), vmap(jacrev(rewrite))(*batch))
    hess = vmap(jacrev(jacrev(lambda *a: wrapped(*a).sum())))(*batch)
    torch.testing.assert_close(hess, vmap(jacrev(jacrev(lambda *a: rewrite(*a).sum())))(*batch))


def test_the_passes_cut_the_aten_calls_of_a_vjp():
    # functorch#105: the graph's vjp calls as many ops as the rewrite's (47 before the passes)
    calls = {}
    w, x = torch.randn(6, 6), torch.randn(8, 6)
    for name, f in (("graph", funcbwd.functionalized(features)), ("rewrite", features_rewrite)):
        def one(xi, f=f):
            out, back = vjp(lambda v: f(w, v), xi)
            return back(out)[0]
        vmap(one)(x)
        with torch.profiler.profile() as prof:
            vmap(one)(x)
        calls[name] = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    assert calls["graph"] <= calls["rewrite"], calls


def test_cse_keeps_two_outputs_distinct_and_random_ops_apart():
    def two(x):
        return torch.zeros(3) + 0 * x.sum(), torch.zeros(3) + 0 * x.sum()

    def noise(x):
        return x + torch.rand(3), x + torch.rand(3)

    entry = build(two, (torch.randn(3),), optimize=True)
    a, b = entry.run((torch.randn(3),))
    assert a.data_ptr() != b.data_ptr()
    entry = build(noise, (torch.randn(3),), optimize=True)
    assert count_targets(entry.graph, (aten.rand.default,)) == 2


def test_fresh_reads_fold_only_fresh_values():
    def read(x):
        y = torch.full((3, 3), 2.5)
        return x * y[1, 2]

    entry = build(read, (torch.randn(3),), optimize=True)
    assert entry.pass_report.applied.get("fresh_reads") == 1
    assert count_targets(entry.graph, (aten.select.int,)) == 0
    assert fresh.fill_of(next(n for n in entry.graph.graph.nodes
                              if n.target is aten.full.default)) == 2.5


# ------------------------------------------------------------------------------ mutations
_UNCHECKED = ElisionCheck(True, "not checked")


def _broken_cse(gm):
    """Merges calls of one op whatever their constant arguments (x * 2 and x * 3)."""
    saved = cse._key
    cse._key = lambda a: ("node", a) if isinstance(a, torch.fx.Node) else ("any",)
    try:
        return cse.merge_common_subexpressions(gm)
    finally:
        cse._key = saved


def _reversed_pieces(rewrite):
    """The real ``rewrite`` pass, then each cat/stack it left with its pieces in the wrong order."""
    def broken(gm):
        n = rewrite(gm)
        for node in gm.graph.nodes:
            if node.target in (aten.cat.default, aten.stack.default):
                node.args = (list(reversed(node.args[0])), *node.args[1:])
        gm.recompile()
        return n
    return broken


_reversed_cat = _reversed_pieces(fresh_scatter.rewrite_fresh_scatters)


def _wrong_fill(gm):
    """Reads of a fresh factory folded to the wrong value."""
    saved = fresh.fill_of
    fresh.fill_of = lambda node: None if saved(node) is None else 1
    try:
        return fresh.fold_fresh_reads(gm)
    finally:
        fresh.fill_of = saved


def interleaved(a, b):
    h = torch.zeros(6)
    h[::2] = a
    h[1::2] = b
    return h


def scaled(x):
    return x * 2 + x * 3


def read_zero(x):
    y = torch.zeros(3, 3)
    return x + y[1]


def _shifted_gather(gm):
    """The real gather, then each index it reads shifted by one (the neighbour element)."""
    n = gather.gather_moves(gm)
    for name, index in list(gm.named_buffers()):
        if name.startswith("_gather_index"):
            index.copy_(torch.roll(index, 1))
    return n


def _misread_run(gm):
    """The real gather with each run of one leaf read from the leaf's first element on."""
    saved = gather._run

    def shifted(flat, leaves):
        hit = saved(flat, leaves)
        return None if hit is None else (0, hit[1])
    gather._run = shifted
    try:
        return gather.gather_moves(gm)
    finally:
        gather._run = saved


_misordered = _reversed_pieces(gather.gather_moves)  # the gather's pieces in the wrong order


def readback(x):  # a row read back: the second half of one written piece
    y = torch.zeros(4, 3)
    y[1:3] = x[1:3].exp()
    y[0] = x[0]
    y[3] = y[2] * 3
    return y * 2


MUTATIONS = [("cse", _broken_cse, scaled, (torch.randn(3),)),
             ("gather", _shifted_gather, hat, (torch.randn(4, 3),)),
             ("gather", _misread_run, readback, (torch.randn(4, 3),)),
             ("gather", _misordered, recurrence, (torch.randn(5, 3),)),
             ("fresh_scatters", _reversed_cat, interleaved, (torch.randn(3), torch.randn(3))),
             ("fresh_scatters", _reversed_cat, rows, (torch.randn(4),)),
             ("fresh_reads", _wrong_fill, read_zero, (torch.randn(3),))]


@pytest.mark.parametrize("name,broken,fn,args", MUTATIONS, ids=[m[0] + "-" + m[2].__name__
                                                                 for m in MUTATIONS])
def test_a_broken_pass_is_refused_by_its_check(monkeypatch, name, broken, fn, args):
    monkeypatch.setattr(passes, "PASSES", ((name, broken),))
    entry = build(fn, args, optimize=True)
    assert name in entry.pass_report.refused and "values differ" in entry.pass_report.refused[name]
    torch.testing.assert_close(entry.run(args), fn(*args))  # the graph before the pass runs
    # the mutation is live: unchecked, the broken pass's graph gives other values
    graph, report = passes.apply_checked(trace_formula(fn, args, elide_copies=True),
                                         lambda gm: _UNCHECKED, ((name, broken),))
    assert report.applied and not torch.allclose(graph(*args), fn(*args))


class _Wrapped(torch.Tensor):
    """Stands for a functorch TensorWrapper constant: it cannot be deep-copied."""

    def __deepcopy__(self, memo):
        raise NotImplementedError("Cannot access storage of TensorWrapper")


def test_passes_copy_a_graph_whose_constant_cannot_be_deep_copied():
    # KalmanNet: object state from an earlier transformed call becomes a graph constant wrapped
    # by functorch; the passes copy the graph over the same constants (a deepcopy raised, the
    # build failed and the signature fell back to the slow path)
    def f(y):
        z = torch.zeros(2, 3)
        z[0] = y * const
        return z

    const = torch.randn(3).as_subclass(_Wrapped)
    gm = trace_formula(f, (torch.randn(3),), elide_copies=True)
    with pytest.raises(NotImplementedError):
        copy.deepcopy(gm)
    graph, report = passes.apply_checked(gm, lambda gm: _UNCHECKED)
    assert report.applied.get("fresh_scatters")
    assert all(graph.get_buffer(name) is t for name, t in gm.named_buffers() if name in graph.code)
