"""funcbwd_lab.studies.coverage.upstream: functorch's expected failures, as reviewed data.

Well-formed entries; a reason wherever upstream has a comment next to the entry; every op name in
torch's op_db (or autograd_function_db) unless listed as gone, with why; no duplicate per (test,
op, variant, kind); sets of other tests not attributed. Spot checks pin rows read by hand against
upstream's text (line, kind, reason).
"""

from __future__ import annotations

import dataclasses
import functools
import re

import pytest

from funcbwd import internals
from funcbwd.errors import UnknownNameError
from funcbwd_lab.studies.coverage import upstream as U
from funcbwd_lab.studies.coverage.upstream_sets import SECTIONS, SET_LINES, SETS

KINDS = {"xfail", "skip", "decorator"}


@functools.lru_cache(maxsize=None)
def _db_names() -> set[tuple[str, str]]:
    from torch.testing._internal.autograd_function_db import autograd_function_db

    return {(o.name, o.variant_test_name) for o in internals.opinfo_database() + autograd_function_db}


def test_source_names_a_commit():
    assert re.fullmatch(r"[0-9a-f]{40}", U.SOURCE["commit"])
    assert U.SOURCE["repo"] == "pytorch/pytorch" and U.SOURCE["path"] == "test/functorch/test_ops.py"
    assert "2.13" in U.SOURCE["note"]


def test_entries_are_well_formed():
    assert set(e.test for e in U.ENTRIES) == set(U.TESTS)
    for e in U.ENTRIES:
        assert e.kind in KINDS, e
        assert e.op and isinstance(e.variant, str), e
        assert e.reason_where in ("inline", "above", ""), e
        assert (e.reason == "") == (e.reason_where == ""), e  # a reason exactly where a comment is
        assert e.reason == e.reason.strip() and "\n" not in e.reason, e
        assert e.device_type in (None, "cpu", "cuda"), e
        assert (e.kind == "decorator") == (e.decorator is not None), e
        assert e.line == e.lines[0] and len(e.lines) == len(e.sets), e
        for line, s in zip(e.lines, e.sets):
            a, b = SET_LINES[s]
            assert a <= line <= b, f"{e}: line {line} outside set {s} ({a}-{b})"
            assert s in U.USES[e.test], f"{e}: set {s} is not one {e.test} uses"
        assert not (e.group and e.reason), e  # a group comment only for an uncommented entry
        assert e.on_linux_cpu() in ("xfail", "skip", "none")


def test_rows_are_well_formed():
    for s, rows in SETS.items():
        lines = [r[0] for r in rows]
        assert lines == sorted(lines) and len(set(lines)) == len(lines), s
        for r in rows:
            assert len(r) in (6, 7), r
            assert r[1] in KINDS and (r[4] == "") == (r[5] == ""), r
            if len(r) == 7:
                assert r[6] and set(r[6]) <= {"device_type", "dtypes", "decorator", "group"}, r
    for s, a, b, title in SECTIONS:
        assert SET_LINES[s][0] <= a <= b <= SET_LINES[s][1] and title


def test_no_duplicates_per_test_op_variant_kind():
    keys = [e.key for e in U.ENTRIES]
    assert len(keys) == len(set(keys))


def test_every_op_is_in_torchs_op_db():
    names = _db_names()
    missing = {(e.op, e.variant) for e in U.ENTRIES if (e.op, e.variant) not in names}
    missing |= {(t.op, t.variant) for t in U.TOLERANCES if t.op != "*" and (t.op, t.variant) not in names}
    assert missing == set(U.NOT_IN_TORCH_2_13), missing
    for k in U.NOT_IN_TORCH_2_13:  # the exemption list holds only names really gone
        assert k not in names
    assert all((op, "") in names for op in U.AUTOGRAD_FUNCTION_OPS)


def test_a_typo_in_an_op_name_is_caught():
    # Mutation: misspell one entry's op; the op_db check must see it.
    bad = dataclasses.replace(U.ENTRIES[0], op=U.ENTRIES[0].op + "_typo")
    assert (bad.op, bad.variant) not in _db_names()


def test_only_these_tests_and_their_sets():
    assert set(U.TESTS) == {"test_vmapvjp", "test_vmapvjpvjp", "test_vmapjvpvjp", "test_vmapjvpall",
                            "test_vjpvmap", "test_vmapvjp_has_batch_rule"}
    # vjp_fail is shared by test_grad, test_vjp, ... and by four of these; vmapjvpall_fail by
    # test_vmapjvpall_has_batch_rule too, which is not covered: no test named here that is not ours
    assert all(s in SETS for sets in U.USES.values() for s in sets)
    assert "vjp_fail" not in U.USES["test_vmapjvpall"]
    assert not any("vmapjvpall_has_batch_rule" in s for s in SETS)


# ------------------------------------------------------------------------------ read by hand
#: (test, op, variant, kind, first line, reason) transcribed by reading test_ops.py at SOURCE
BY_HAND = [
    ("test_vmapvjpvjp", "native_layer_norm", "", "xfail", 944, "vmap: inplace into a regular tensor"),
    ("test_vmapvjpvjp", "nn.functional.layer_norm", "", "xfail", 975,
     "vmap: inplace into a regular tensor"),
    ("test_vmapvjpvjp", "nn.functional.binary_cross_entropy", "", "xfail", 948,
     "vmap: inplace into a regular tensor"),
    ("test_vmapjvpvjp", "nn.functional.hinge_embedding_loss", "", "xfail", 1960,
     "vmap: inplace into a regular tensor"),
    ("test_vmapjvpvjp", "mvlgamma", "mvlgamma_p_3", "xfail", 1920, "vmap: inplace into a regular tensor"),
    ("test_vmapjvpvjp", "native_layer_norm", "", "skip", 1887, ""),
    ("test_vmapvjp", "masked_select", "", "xfail", 1095, "Not possible due to dynamic shapes"),
    ("test_vmapvjp", "tensor_split", "", "xfail", 351, "data_ptr composite compliance"),
    ("test_vmapjvpall", "nn.functional.embedding", "", "skip", 1242,
     "Not actually a problem: embedding with max_norm mutates the weight and causes different runs "
     "to produce different results. skip because this is flaky depending on what the max_norm is!"),
    ("test_vjpvmap", "__getitem__", "", "xfail", 1611,
     "fallback path doesn't work All of the following are bugs and need to be fixed"),
    ("test_vmapvjp_has_batch_rule", "index_fill", "", "xfail", 1533,
     "aten::_unique hit the vmap fallback which is currently disabled"),
]


@pytest.mark.parametrize("test,op,variant,kind,line,reason", BY_HAND)
def test_rows_read_by_hand(test, op, variant, kind, line, reason):
    (e,) = [e for e in U.entries_for(test) if (e.op, e.variant, e.kind) == (op, variant, kind)]
    assert (e.line, e.reason) == (line, reason)


def test_groups_and_sections_read_by_hand():
    e = {(x.test, x.op, x.variant, x.kind): x for x in U.ENTRIES}
    assert e["test_vmapjvpvjp", "native_layer_norm", "", "skip"].group == \
        "Following operators take too long, hence skipped"
    assert e["test_vmapvjp", "double", "", "xfail"].group == \
        "required rank 4 tensor to use channels_last format"
    # a comment that only explains the entry right under it does not reach the next ones
    assert e["test_vjpvmap", "native_batch_norm", "", "xfail"].group == ""
    assert e["test_vmapvjp", "masked_select", "", "xfail"].section.startswith("ALLOWED FAILURES")
    assert e["test_vmapvjp", "narrow", "", "xfail"].section.startswith("BUGS")


def test_merged_occurrences():
    (narrow,) = [x for x in U.entries_for("test_vmapvjp_has_batch_rule") if x.op == "narrow"]
    assert narrow.lines == (1137, 1450) and narrow.sets == ("vmapvjp_fail", "test_vmapvjp_has_batch_rule")
    assert narrow.reason == ".item() call | Batching rule not implemented for `narrow.Tensor` (and view op)"
    (nq,) = [x for x in U.entries_for("test_vmapvjp_has_batch_rule") if x.op == "nanquantile"]
    assert nq.device_type is None  # cpu-only in vmapvjp_fail, every device in the test's own set
    (nq_vjp,) = [x for x in U.entries_for("test_vmapvjp") if x.op == "nanquantile"]
    assert nq_vjp.device_type == "cpu"


def test_expectation_on_linux_cpu():
    assert U.expectation("test_vmapvjpvjp", "native_layer_norm").kind == "xfail"
    assert U.expectation("test_vmapvjpvjp", "sin") is None
    # runOnRocm skips everywhere but ROCm; skipIfRocm does nothing here; cuda-only does nothing
    assert U.expectation("test_vmapvjpvjp", "linalg.householder_product").on_linux_cpu() == "skip"
    assert U.expectation("test_vmapvjp", "nn.functional.batch_norm") is None
    assert U.expectation("test_vmapvjp", "nn.functional.ctc_loss") is None
    with pytest.raises(UnknownNameError):
        U.entries_for("test_nope")


def test_tolerances():
    assert U.tolerance("test_vmapjvpvjp", "linalg.svd") == (5e-04, 5e-04)
    assert U.tolerance("test_vmapvjp", "linalg.svd") == (1e-04, 1e-04)  # its own is cuda-only
    assert U.tolerance("test_vmapjvpvjp", "linalg.pinv", "hermitian") == (5e-04, 5e-04)
    assert U.tolerance("test_vjpvmap", "sin") is None  # no override in test_vjpvmap
    assert {t.test for t in U.TOLERANCES} == set(U.TESTS) - {"test_vjpvmap"}
    for t in U.TOLERANCES:
        assert 0 < t.atol < 1 and 0 < t.rtol < 1
