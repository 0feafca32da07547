"""funcbwd_lab.batching.as_strided_scatter: the scoped vmap rule for ``aten::as_strided_scatter``.

Every batched result is compared with torch's own unbatched op run sample by sample (the
contract in the module docstring); deliberately broken rules must fail the same comparison; and
the real target, vmap over the functionalized backward of the OpInfo samples of ``as_strided``,
``as_strided_copy`` and circular ``pad``, must match a per-sample loop with no slow fallback.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError
from torch.func import functionalize, vjp, vmap

from funcbwd import internals
from funcbwd_lab.batching.as_strided_scatter import (
    OP,
    as_strided_scatter_batch_rule,
    as_strided_scatter_rule_active,
    batched_as_strided_scatter_rule,
)

try:  # the copy rule is moving into funcbwd_lab.batching during the reorganization
    from funcbwd_lab.batching.copy import batched_copy_rule
except ImportError:  # pragma: no cover - before the move
    from funcbwd_lab.batching.copy import batched_copy_rule

B = 3
NO_RULE = "as_strided_scatter requires special handling"
FALLBACK = "There is a performance drop because we have not yet implemented the batching rule"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------ the contract
def _self_overlaps(t: torch.Tensor) -> bool:
    return any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))


def per_sample(self, self_bdim, src, src_bdim, size, stride, off) -> torch.Tensor:
    """torch's unbatched as_strided_scatter on each sample: sample i of a batched ``self`` is its
    physical slice with ``off`` shifted by i * batch stride (vmap's as_strided convention); an
    unbatched ``self`` is used as is; a self-overlapping sample is cloned by torch (no shift)."""
    outs = []
    for i in range(B):
        s_i = src if src_bdim is None else src.select(src_bdim, i)
        if self_bdim is None:
            outs.append(torch.as_strided_scatter(self, s_i, size, stride, off))
            continue
        x_i = self.select(self_bdim, i)
        shift = 0 if _self_overlaps(x_i) else i * self.stride(self_bdim)
        outs.append(torch.as_strided_scatter(x_i, s_i, size, stride,
                                             None if off is None else off + shift))
    return torch.stack(outs)


def batched(self, self_bdim, src, src_bdim, size, stride, off) -> torch.Tensor:
    return vmap(lambda a, b: torch.as_strided_scatter(a, b, size, stride, off),
                in_dims=(self_bdim, src_bdim))(self, src)


# self layouts for a (3, 4) sample: (tensor, bdim, storage offset the view offsets start from)
def _layouts() -> dict:
    g = _gen(0)
    return {
        "fresh": (torch.randn(B, 3, 4, generator=g), 0, 0),
        "batch_dim_1": (torch.randn(3, B, 4, generator=g), 1, 0),  # samples interleave
        "batch_dim_last": (torch.randn(3, 4, B, generator=g), 2, 0),
        "storage_offset_7": (torch.randn(7 + B * 12, generator=g)[7:].view(B, 3, 4), 0, 7),
        "transposed": (torch.randn(B, 4, 3, generator=g).transpose(1, 2), 0, 0),
        "self_overlapping": (torch.randn(B, 3, 1, generator=g).expand(B, 3, 4), 0, 0),
        "batch_broadcast": (torch.randn(3, 4, generator=g).expand(B, 3, 4), 0, 0),
        "unbatched": (torch.randn(3, 4, generator=g), None, 0),
        "unbatched_view_offset_5": (torch.randn(20, generator=g)[5:17].view(3, 4), None, 5),
    }


LAYOUTS = list(_layouts())
# (size, stride, offset relative to the layout's storage offset; None = self's own offset)
VIEWS = [
    ((2, 2), (1, 2), 1),
    ((2, 2), (4, 1), 5),
    ((2, 2), (4, 1), None),
    ((3,), (5,), 0),          # strided, not dense
    ((12,), (1,), 0),         # the whole sample
    ((2, 2), (1, 1), 0),      # overlaps itself: the per-sample loop path
    ((0, 2), (1, 1), 3),      # empty
    ((), (), 4),              # one element
]
SRC_MODES = ("bdim0", "bdim_last", "unbatched")


def _src(size, mode: str, seed: int):
    g = _gen(seed)
    if mode == "bdim0":
        return torch.randn((B, *size), generator=g), 0
    if mode == "bdim_last":
        return torch.randn((*size, B), generator=g), len(size)
    return torch.randn(tuple(size), generator=g), None


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _fallbacks(caught) -> list[str]:
    return [str(w.message) for w in caught if FALLBACK in str(w.message)]


def _cases():
    layouts = _layouts()
    for name in LAYOUTS:
        self, sb, base = layouts[name]
        for mode in SRC_MODES:
            if sb is None and mode == "unbatched":
                continue  # nothing to vmap over
            for k, (size, stride, rel) in enumerate(VIEWS):
                src, rb = _src(size, mode, 100 + k)
                off = None if rel is None else base + rel
                yield f"{name}/{mode}/{size}{stride}@{off}", (self, sb, src, rb, size, stride, off)


CASES = dict(_cases())


# ------------------------------------------------------------------------------ scope
def test_rule_is_scoped_nested_and_restored_on_error():
    s, src = torch.randn(B, 12, generator=_gen(1)), torch.randn(B, 2, generator=_gen(2))
    args = (s, 0, src, 0, (2,), (1,), 3)
    assert not as_strided_scatter_rule_active()
    with pytest.raises(RuntimeError, match=NO_RULE):  # torch 2.13 as is
        batched(*args)
    with batched_as_strided_scatter_rule():
        assert as_strided_scatter_rule_active()
        with batched_as_strided_scatter_rule():
            assert torch.equal(batched(*args), per_sample(*args))
        assert as_strided_scatter_rule_active()  # the inner exit keeps the outer registration
        assert torch.equal(batched(*args), per_sample(*args))
    assert not as_strided_scatter_rule_active()
    with pytest.raises(RuntimeError, match=NO_RULE):
        batched(*args)
    with pytest.raises(ValueError, match="body"):
        with batched_as_strided_scatter_rule():
            raise ValueError("body raised")
    assert not as_strided_scatter_rule_active()
    with pytest.raises(RuntimeError, match=NO_RULE):
        batched(*args)


# ------------------------------------------------------------------------------ the contract
@pytest.mark.parametrize("name", list(CASES))
def test_rule_matches_torch_per_sample(name):
    self, sb, src, rb, size, stride, off = args = CASES[name]
    expected = per_sample(*args)
    with batched_as_strided_scatter_rule(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = batched(*args)
    assert _fallbacks(caught) == []
    assert out.shape == expected.shape and torch.equal(out, expected), name
    assert _storage(out) not in (_storage(self), _storage(src)), "result aliases an input"
    before = self.clone()
    out.add_(1.0)  # writing the result leaves the inputs alone
    assert torch.equal(self, before)


def test_cases_have_distinct_batch_entries():
    # Otherwise "entry 0 for everyone" could not be told apart from the right answer.
    for name, (self, sb, src, rb, size, stride, off) in CASES.items():
        if rb is not None and src.numel():
            assert not torch.equal(src.select(rb, 0), src.select(rb, 1)), name
    self, sb, _ = _layouts()["fresh"]
    assert not torch.equal(self[0], self[1])


def test_result_keeps_the_sample_layout_for_later_as_strided_views():
    # Functionalization reads views back out of the result with the same (size, stride, offset)
    # through vmap's as_strided: that must address the same elements it wrote.
    self, sb, base = _layouts()["storage_offset_7"]
    src, rb = _src((2, 2), "bdim0", 5)

    def write_then_read(a, b):
        out = torch.as_strided_scatter(a, b, (2, 2), (4, 1), base + 5)
        return out.as_strided((2, 2), (4, 1), base + 5)

    with batched_as_strided_scatter_rule():
        read = vmap(write_then_read, in_dims=(sb, rb))(self, src)
    assert torch.equal(read, src)


# ------------------------------------------------------------------------------ mutation checks
def _forgets_offset(info, in_dims, self, src, size, stride, storage_offset=None):
    return as_strided_scatter_batch_rule(info, in_dims, self, src, size, stride, None)


def _src_entry_0(info, in_dims, self, src, size, stride, storage_offset=None):
    if in_dims[1] is not None:
        src, in_dims = src.select(in_dims[1], 0), (in_dims[0], None, *in_dims[2:])
    return as_strided_scatter_batch_rule(info, in_dims, self, src, size, stride, storage_offset)


def _self_entry_0(info, in_dims, self, src, size, stride, storage_offset=None):
    if in_dims[0] is not None:
        self, in_dims = self.select(in_dims[0], 0), (None, *in_dims[1:])
    return as_strided_scatter_batch_rule(info, in_dims, self, src, size, stride, storage_offset)


def _ignores_sample_layout(info, in_dims, self, src, size, stride, storage_offset=None):
    return as_strided_scatter_batch_rule(info, in_dims, self.contiguous(), src, size, stride,
                                         storage_offset)


@pytest.mark.parametrize("variant, case", [
    (_forgets_offset, "fresh/bdim0/(2, 2)(4, 1)@5"),
    (_src_entry_0, "fresh/bdim0/(2, 2)(1, 2)@1"),
    (_self_entry_0, "fresh/unbatched/(2, 2)(1, 2)@1"),
    (_ignores_sample_layout, "transposed/bdim0/(2, 2)(4, 1)@5"),
])
def test_broken_rules_fail_the_comparison(variant, case):
    args = CASES[case]
    expected = per_sample(*args)
    with internals.scoped_vmap_rule(OP, variant):
        broken = batched(*args)
    assert not torch.equal(broken, expected), f"{variant.__name__} passed {case}"
    with batched_as_strided_scatter_rule():
        assert torch.equal(batched(*args), expected)
    with pytest.raises(RuntimeError, match=NO_RULE):  # the variant was scoped too
        batched(*args)


# ------------------------------------------------------------------------------ bounds and errors
def test_views_leaving_a_batched_sample_raise_like_vmaps_as_strided():
    self, sb, base = _layouts()["storage_offset_7"]
    for size, stride, off in [((2,), (1,), base + 11),   # runs past the sample's last element
                              ((2,), (1,), base - 1)]:   # starts before its first
        src, rb = _src(size, "bdim0", 3)
        with batched_as_strided_scatter_rule():
            with pytest.raises(RuntimeError, match="outside one sample's own memory"):
                batched(self, sb, src, rb, size, stride, off)
        with pytest.raises(RuntimeError, match="can access memory outside of `tensor`"):
            vmap(lambda t: t.as_strided(size, stride, off), in_dims=sb)(self)


def test_unbatched_self_allows_what_torch_allows():
    self, sb, base = _layouts()["unbatched_view_offset_5"]
    src, rb = _src((3,), "bdim0", 4)
    # writes before self's first element (invisible in the result), as torch allows
    args = (self, sb, src, rb, (3,), (1,), 1)
    with batched_as_strided_scatter_rule():
        assert torch.equal(batched(*args), per_sample(*args))
        with pytest.raises(RuntimeError, match="outside self's storage"):
            batched(self, sb, src, rb, (3,), (1,), 18)
    with pytest.raises(RuntimeError, match="out of bounds for storage"):
        torch.as_strided_scatter(self, src[0], (3,), (1,), 18)


@pytest.mark.parametrize("size, stride, off, src_shape", [
    ((2, 2), (4, 1), 0, (3, 2)),   # src does not match the view
    ((2,), (0,), 0, (2,)),         # the view writes one element twice (a zero stride)
    ((2,), (-1,), 3, (2,)),        # negative stride
    ((2, 2), (1,), 0, (2, 2)),     # size/stride lengths differ
    ((2,), (1,), -1, (2,)),        # negative offset
])
def test_bad_arguments_raise_torchs_own_error(size, stride, off, src_shape):
    self = torch.randn(B, 12, generator=_gen(6))
    src = torch.randn(B, *src_shape, generator=_gen(7))
    with pytest.raises(RuntimeError) as unbatched:
        torch.as_strided_scatter(self[0].clone(), src[0], size, stride, off)
    with batched_as_strided_scatter_rule():
        with pytest.raises(RuntimeError) as under_vmap:
            batched(self, 0, src, 0, size, stride, off)
    assert str(unbatched.value).split("\n")[0] in str(under_vmap.value)


# ------------------------------------------------------------------------------ composition
def test_nested_vmap_matches_a_double_loop():
    s, src = torch.randn(2, B, 12, generator=_gen(8)), torch.randn(2, B, 2, 2, generator=_gen(9))
    f = lambda a, b: torch.as_strided_scatter(a, b, (2, 2), (4, 1), 5)  # noqa: E731
    with batched_as_strided_scatter_rule():
        out = vmap(vmap(f))(s, src)
    expected = torch.stack([torch.stack([f(s[i, j].clone(), src[i, j]) for j in range(B)])
                            for i in range(2)])
    assert torch.equal(out, expected)


def test_rule_is_differentiable_where_torchs_formula_is_not():
    # The rule is built from differentiable ops, so grad-of-vmap passes gradcheck. torch 2.13's
    # own as_strided_scatter formula for `self` keeps the overwritten positions and drops the
    # others (derivatives.yaml, as_strided_scatter_backward): gradcheck fails on it.
    g = _gen(10)
    s = torch.randn(B, 12, dtype=torch.float64, generator=g, requires_grad=True)
    src = torch.randn(B, 2, 2, dtype=torch.float64, generator=g, requires_grad=True)
    f = lambda a, b: torch.as_strided_scatter(a, b, (2, 2), (4, 1), 5)  # noqa: E731
    with batched_as_strided_scatter_rule():
        assert torch.autograd.gradcheck(lambda a, b: vmap(f)(a, b), (s, src))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        torch.autograd.gradcheck(f, (s[0].detach().clone().requires_grad_(),
                                     src[0].detach().clone().requires_grad_()))


# ------------------------------------------------------------------------------ the real target
TARGET_OPS = (("as_strided", ""), ("as_strided", "partial_views"), ("as_strided_copy", ""),
              ("nn.functional.pad", "circular"))


def _target_samples() -> dict:
    pytest.importorskip("expecttest")
    out = {}
    for op in internals.opinfo_database():
        if (op.name, op.variant_test_name) not in TARGET_OPS:
            continue
        op_id = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        for i, s in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=True)):
            out[f"{op_id}[{i}]"] = (op, s)
    return out


@pytest.fixture(scope="module")
def target_samples() -> dict:
    return _target_samples()


def _functionalized_vjp(op, sample, seed):
    """(vjp_fn of the sample w.r.t. its input, B distinct cotangents)."""
    x = sample.input.detach()
    out, vjp_fn = vjp(lambda t: op(t, *sample.args, **sample.kwargs), x)
    cts = torch.randn(B, *out.shape, generator=_gen(seed))
    return vjp_fn, cts


def _run_target(op, sample, seed, rules):
    """(result or exception, fallback ops) of vmap(functionalize(vjp_fn)) over cotangents."""
    vjp_fn, cts = _functionalized_vjp(op, sample, seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with rules():
                result = vmap(functionalize(vjp_fn))(cts)[0]
        except RuntimeError as e:
            result = e
    ops = sorted({m.split("for ")[1].split(".")[0] for m in _fallbacks(caught)})
    loop = torch.stack([vjp_fn(c)[0] for c in cts])
    return result, ops, loop


@contextlib.contextmanager
def _both_rules():
    with batched_as_strided_scatter_rule(), batched_copy_rule():
        yield


def test_target_samples_exist(target_samples):
    counts = {}
    for key in target_samples:
        counts[key.split("[")[0]] = counts.get(key.split("[")[0], 0) + 1
    assert set(counts) == {"as_strided", "as_strided.partial_views", "as_strided_copy",
                           "nn.functional.pad.circular"}, counts


def test_functionalized_vjp_of_targets_matches_the_loop_with_no_fallback(target_samples):
    """The acceptance check, every sample: both rules active -> equal to the per-sample loop
    and no slow-fallback warning; the as_strided_scatter rule alone -> equal, and the only
    fallback left is aten::copy; no rule -> torch's error (for the samples that need it)."""
    needed, passed = [], []
    for seed, (key, (op, sample)) in enumerate(target_samples.items()):
        result, fallbacks, loop = _run_target(op, sample, seed, _both_rules)
        assert not isinstance(result, Exception), f"{key}: {result}"
        assert fallbacks == [], f"{key}: {fallbacks}"
        torch.testing.assert_close(result, loop, msg=key)
        assert not torch.equal(loop[0], loop[1]) or loop.abs().sum() == 0, key  # distinct entries

        alone, fallbacks, _ = _run_target(op, sample, seed, batched_as_strided_scatter_rule)
        assert not isinstance(alone, Exception), f"{key}: {alone}"
        torch.testing.assert_close(alone, loop, msg=key)
        assert set(fallbacks) <= {"aten::copy"}, f"{key}: {fallbacks}"

        without, _, _ = _run_target(op, sample, seed, contextlib.nullcontext)
        if isinstance(without, Exception):
            assert NO_RULE in str(without), f"{key}: {without}"
            needed.append(key)
        passed.append(key)
    assert passed == list(target_samples)
    assert needed, "no sample needed the rule: the target no longer exercises it"
    print(f"\n{len(passed)} samples pass; {len(needed)} need the rule: {', '.join(needed)}")


# ------------------------------------------------------------------------------ batch-last operands
# Functionalization turns torch's CopySlices backward into new_empty_strided(base) -> aten::copy
# (the cotangent) -> as_strided / as_strided_scatter at the base's absolute geometry. Upstream
# `copy` (native/Copy.cpp) keeps dst's strides and storage offset; a copy rule that returns src's
# layout instead is right while everything is batched at dim 0 and silently wrong for a cotangent
# batched at its last dim (per-sample strides (..., B)): circular pad's vjp mismatched the loop.
from funcbwd_lab.strategies.traced_backward import TracedBackward  # noqa: E402

ATEN_COPY = torch.ops.aten.copy.default
OPERAND_DIMS = (0, -1, None)
# every (dst/self dim, src dim) pair with a batch-last operand
BATCH_LAST_PAIRS = [(a, b) for a in OPERAND_DIMS for b in OPERAND_DIMS
                    if -1 in (a, b) and (a, b) != (None, None)]
READ_VIEWS = [((2, 2), (4, 1), 5), ((3,), (5,), 0), ((12,), (1,), 0), ((2, 3), (1, 4), 1)]


def _operand(dim, seed: int, shape=(3, 4)) -> torch.Tensor:
    g = _gen(seed)
    if dim is None:
        return torch.randn(shape, generator=g)
    return torch.randn((B, *shape), generator=g).movedim(0, dim).contiguous()  # physically there


def _sample(t: torch.Tensor, dim, i: int) -> torch.Tensor:
    return t if dim is None else t.select(dim, i)


def _shift(t: torch.Tensor, dim, i: int) -> int:
    """vmap's as_strided frame of sample i: shifted by i * batch stride (none if unbatched)."""
    return 0 if dim is None else i * t.stride(dim)


def _old_copy_kernel(self, src, non_blocking=False):
    """The previous aten::copy rule: src's values in src's layout (dst's strides dropped)."""
    return src.to(dtype=self.dtype, device=self.device).expand(self.shape).clone()


def _copy_then_read(dst, dd, src, sd, size, stride, off):
    f = lambda d, s: ATEN_COPY(d, s).as_strided(size, stride, off)  # noqa: E731
    return vmap(f, in_dims=(dd, sd))(dst, src)


def _copy_then_read_loop(dst, dd, src, sd, size, stride, off):
    return torch.stack([ATEN_COPY(_sample(dst, dd, i), _sample(src, sd, i))
                        .as_strided(size, stride, off + _shift(dst, dd, i)) for i in range(B)])


@pytest.mark.parametrize("dd, sd", BATCH_LAST_PAIRS)
def test_copy_rule_keeps_dst_layout_for_batch_last_operands(dd, sd):
    """vmap(aten::copy) then as_strided at absolute geometry == upstream copy per sample, for
    each batch-last (dst, src) pair and each read-back view; the previous rule (src's layout)
    fails at least one view of every pair."""
    from funcbwd_lab.batching.copy import batched_copy_rule as rule
    dst, src = _operand(dd, 20), _operand(sd, 21)
    old_failed = []
    for size, stride, off in READ_VIEWS:
        expected = _copy_then_read_loop(dst, dd, src, sd, size, stride, off)
        with rule(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            values = vmap(ATEN_COPY, in_dims=(dd, sd))(dst, src)
            read = _copy_then_read(dst, dd, src, sd, size, stride, off)
        assert _fallbacks(caught) == []
        assert torch.equal(values, torch.stack([_sample(src, sd, i) for i in range(B)]))
        assert torch.equal(read, expected), (dd, sd, size, stride, off)
        with internals.scoped_aten_kernel("copy", _old_copy_kernel, "FuncTorchBatched"):
            old = _copy_then_read(dst, dd, src, sd, size, stride, off)
        if not torch.equal(old, expected):
            old_failed.append((size, stride, off))
    assert old_failed, f"the previous copy rule passed every view of {(dd, sd)}"


@pytest.mark.parametrize("sd", [-1, 0])
def test_copy_rule_keeps_a_transposed_dense_dst_layout(sd):
    """A dense dst whose samples are transposed (the rule's no-scatter path) keeps its strides."""
    from funcbwd_lab.batching.copy import batched_copy_rule as rule
    dst = torch.randn(B, 4, 3, generator=_gen(22)).transpose(1, 2)  # (B, 3, 4), strides (12, 1, 3)
    src = _operand(sd, 23)
    with rule():  # the values (a wrong stride order garbles them) and the storage order
        values = vmap(ATEN_COPY, in_dims=(0, sd))(dst, src)
    assert torch.equal(values, torch.stack([_sample(src, sd, i) for i in range(B)]))
    for size, stride, off in READ_VIEWS:
        expected = _copy_then_read_loop(dst, 0, src, sd, size, stride, off)
        with rule():
            assert torch.equal(_copy_then_read(dst, 0, src, sd, size, stride, off), expected)
    with internals.scoped_aten_kernel("copy", _old_copy_kernel, "FuncTorchBatched"):
        old = _copy_then_read(dst, 0, src, sd, (2, 2), (4, 1), 5)
    assert not torch.equal(old, _copy_then_read_loop(dst, 0, src, sd, (2, 2), (4, 1), 5))


@pytest.mark.parametrize("dd, sd", BATCH_LAST_PAIRS)
def test_copy_then_scatter_then_read_with_batch_last_operands(dd, sd):
    """The CopySlices chain, both rules: copy(dst, src) -> as_strided_scatter(.., v) -> as_strided
    at the same geometry, every batch-last combination of dst/src (and of the written value),
    against torch's unbatched ops per sample."""
    dst, src, val = _operand(dd, 30), _operand(sd, 31), _operand(sd, 32, (2, 2))
    size, stride, off = (2, 2), (4, 1), 5

    def chain(d, s, v):
        c = ATEN_COPY(d, s)
        return torch.as_strided_scatter(c, v, size, stride, off).as_strided((3, 4), (4, 1), 0)

    expected = torch.stack([
        torch.as_strided_scatter(ATEN_COPY(_sample(dst, dd, i), _sample(src, sd, i)),
                                 _sample(val, sd, i), size, stride, off + _shift(dst, dd, i))
        .as_strided((3, 4), (4, 1), _shift(dst, dd, i)) for i in range(B)])
    with _both_rules():
        out = vmap(chain, in_dims=(dd, sd, sd))(dst, src, val)
    assert torch.equal(out, expected), (dd, sd)


def test_copy_rule_broadcasts_casts_and_clones_an_overlapping_dst():
    dst = torch.randn(B, 3, 1, generator=_gen(40)).expand(B, 3, 4)  # overlaps itself
    src = torch.randn(4, B, dtype=torch.float64, generator=_gen(41))  # batch-last, broadcast
    from funcbwd_lab.batching.copy import batched_copy_rule as rule
    with rule():
        out = vmap(ATEN_COPY, in_dims=(0, -1))(dst, src)
        read = vmap(lambda d, s: ATEN_COPY(d, s).as_strided((2, 2), (4, 1), 5),
                    in_dims=(0, -1))(dst, src)
    per = [ATEN_COPY(dst[i], src[:, i]) for i in range(B)]
    assert out.dtype == torch.float32 and torch.equal(out, torch.stack(per))
    # upstream clones an overlapping dst contiguously (offset 0): no per-sample shift
    assert torch.equal(read, torch.stack([e.as_strided((2, 2), (4, 1), 5) for e in per]))
    with pytest.raises(RuntimeError, match="does not broadcast"):
        with rule():
            vmap(ATEN_COPY, in_dims=(0, 0))(torch.randn(B, 4), torch.randn(B, 2, 4))


def _batch_last_target(op, sample, seed, rules, copy_kernel=None):
    """(vmap over batch-last cotangents of the functionalized vjp, the per-sample loop)."""
    vjp_fn, cts = _functionalized_vjp(op, sample, seed)
    last = cts.movedim(0, -1).contiguous()
    with contextlib.ExitStack() as stack:
        stack.enter_context(rules())
        if copy_kernel is not None:
            stack.enter_context(internals.scoped_aten_kernel("copy", copy_kernel,
                                                             "FuncTorchBatched"))
        result = vmap(functionalize(vjp_fn), in_dims=-1)(last)[0]
    loop = torch.stack([vjp_fn(last[..., i])[0] for i in range(B)])
    return result, loop


def test_functionalized_vjp_of_targets_over_batch_last_cotangents(target_samples):
    """The real target at cotangent dim -1 (where the coverage sweep found circular pad wrong):
    every sample equals the per-sample loop; with the previous copy rule some pad samples don't."""
    old_wrong = []
    for seed, (key, (op, sample)) in enumerate(target_samples.items()):
        result, loop = _batch_last_target(op, sample, seed, _both_rules)
        torch.testing.assert_close(result, loop, msg=key)
        assert not torch.equal(loop[0], loop[1]) or loop.abs().sum() == 0, key
        old, _ = _batch_last_target(op, sample, seed, batched_as_strided_scatter_rule,
                                    _old_copy_kernel)
        if not torch.allclose(old, loop):
            old_wrong.append(key)
    assert any(k.startswith("nn.functional.pad.circular") for k in old_wrong), old_wrong
    print(f"\n{len(target_samples)} samples pass at cotangent dim -1; the previous copy rule "
          f"got {len(old_wrong)} wrong: {', '.join(old_wrong)}")


def test_traced_backward_over_batch_last_cotangents():
    """traced_backward traces on contiguous cotangents; as_strided_scatter's backward reads
    grad.contiguous() (a no-op when traced, so not in the graph) through absolute strides. A
    batch-last cotangent must reach the graph in the traced layout."""
    g = _gen(50)
    x, src = torch.randn(3, 3, generator=g), torch.randn(2, 2, generator=g)
    f = lambda a, b: (torch.as_strided_scatter(a, b, (2, 2), (1, 2), 0),)  # noqa: E731
    _, vjp_fn = TracedBackward(install="always").vjp(f, x, src)  # the graph is under test
    _, ref_fn = vjp(f, x, src)
    cts = torch.randn(3, 3, B, generator=g)
    loops = [torch.stack([ref_fn((cts[..., i],))[k] for i in range(B)]) for k in range(2)]
    with _both_rules():
        got = vmap(vjp_fn, in_dims=-1)((cts,))
    for k in range(2):
        assert torch.equal(got[k], loops[k]), k
    # the mutation: the graph run on the batch-last cotangent as is reads the wrong elements
    gm = _trace_graph(f, x, src)
    with _both_rules():
        raw = vmap(lambda c: tuple(gm(c)), in_dims=-1)(cts)
    assert not torch.equal(raw[1], loops[1])


def _trace_graph(f, *primals):
    from funcbwd_lab.strategies.traced_backward import trace_backward
    out, vjp_fn = vjp(f, *primals)
    gm, _ = trace_backward(vjp_fn, tuple(torch.zeros_like(o) for o in out))
    return gm
