"""funcbwd_lab.studies.bench.profile: one cell's batched backward split into funcbwd Python, vmap dispatch,
vmap's fallback, aten kernels and the rest, on tiny configs (no timing is asserted)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from funcbwd_lab import cli
from funcbwd_lab.studies.bench.profile_cli import main_profile
from funcbwd.errors import NotApplicableError, UnknownNameError
from funcbwd_lab.studies.bench import profile as prof

TINY = {"batch": 2, "sample": "3x5 k=1", "rounds": 1, "target_s": 0.002}


@pytest.fixture(scope="module")
def traced_diag():
    return prof.profile("diag", "traced", **TINY)


@pytest.fixture(scope="module")
def per_formula_diag():
    return prof.profile("diag", "per_formula", **TINY)


def _check_parts(b: prof.Breakdown) -> None:
    assert list(b.parts) == list(prof.PARTS)
    assert all(v >= 0 for v in b.parts.values()), b.parts
    assert b.total_us > 0
    # "other" is the rest of the total, so the parts sum to it unless the two profilers' shares
    # overlap (overlap_us > 0): then the sum exceeds the total and this fails.
    assert sum(b.parts.values()) == pytest.approx(b.total_us, rel=0.05), (b.parts, b.overlap_us)


def test_parts_are_non_negative_and_sum_to_the_total(traced_diag, per_formula_diag):
    for b in (traced_diag, per_formula_diag):
        _check_parts(b)
        assert b.parts["funcbwd Python"] > 0 and b.python_frames
        assert b.kernels  # some aten op ran outside the fallback


def test_the_sum_check_catches_parts_that_exceed_the_total(traced_diag):
    # Mutation: a breakdown whose kernel part is counted twice must fail the check above.
    parts = dict(traced_diag.parts)
    parts["aten kernels"] += traced_diag.total_us * 0.5
    with pytest.raises(AssertionError):
        _check_parts(dataclasses.replace(traced_diag, parts=parts))


def test_fallback_time_is_attributed_to_the_op_without_a_batching_rule(traced_diag, per_formula_diag):
    assert per_formula_diag.fallback_ops == ["aten::copy"]
    assert per_formula_diag.parts["vmap fallback"] > 0
    assert traced_diag.fallback_ops == [] and traced_diag.parts["vmap fallback"] == 0
    # the strategy's own frames are found (the generated graph code counts as funcbwd's)
    assert any(k.startswith("traced:") for k in traced_diag.python_frames)
    assert any(k.startswith("per_formula:") for k in per_formula_diag.python_frames)


@dataclasses.dataclass
class _Ev:
    name: str
    self_cpu_time_total: float
    cpu_children: list
    cpu_time_total: float = 0.0

    def __post_init__(self):
        self.cpu_time_total = self.self_cpu_time_total + sum(c.cpu_time_total for c in self.cpu_children)


def test_split_events_counts_every_microsecond_once():
    leaf = lambda n, t: _Ev(n, t, [])  # noqa: E731
    fallback = _Ev("aten::copy", 2.0, [leaf("aten::select", 1.0), leaf("aten::copy_", 3.0)])
    scatter = _Ev("aten::diagonal_scatter", 4.0, [_Ev("aten::clone", 1.0, [leaf("aten::empty", 0.5)])])
    root = _Ev("Legacy_diagBackward", 10.0, [scatter, fallback, leaf("aten::zeros", 2.0)])
    sums, kernels = prof.split_events([root], {"aten::copy"})
    assert sums == {"aten kernels": 2.5, "vmap dispatch": 5.0, "vmap fallback": 6.0}
    assert kernels == {"aten::empty": [0.5, 1], "aten::zeros": [2.0, 1]}
    # everything attributed fits in the root's time (non-aten self time, 10 us, is "other")
    assert sum(sums.values()) == root.cpu_time_total - root.self_cpu_time_total


def test_format_table_and_figure(traced_diag):
    text = prof.format_table(traced_diag)
    assert text.startswith("diag [3x5 k=1] under traced, vmap over B=2 cotangents")
    for part in prof.PARTS:
        assert part in text
    fig = prof.figure(traced_diag)
    assert fig.layout.barmode == "stack" and len(fig.data) == len(prof.PARTS)
    assert "µs" in fig.layout.yaxis.title.text and fig.layout.xaxis.title.text


@pytest.mark.parametrize("kwargs,kind", [({"op": "nope"}, "op"), ({"strategy": "bogus"}, "strategy"),
                                         ({"sample": "no such sample"}, "sample")])
def test_bad_names_give_short_errors(kwargs, kind):
    args = {"op": "diag", "strategy": "traced", "batch": 2, "sample": None, **kwargs}
    with pytest.raises(UnknownNameError) as e:
        main_profile(argparse.Namespace(**args))
    msg = str(e.value)
    assert msg.startswith(f"unknown {kind}") and "valid" in msg.splitlines()[1]
    assert all(len(line) <= 100 for line in msg.splitlines())


def test_a_cell_that_cannot_run_says_why():
    with pytest.raises(NotApplicableError, match=r"cannot profile diag under plain: vmap\(vjp\) fails: "
                                                 r"RuntimeError: vmap: inplace arithmetic"):
        prof.profile("diag", "plain", **TINY)


def test_cli_routes_profile(capsys):
    assert cli.main(["profile", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m funcbwd_lab profile: error: unknown op 'nope'\nvalid ops, by group:")
