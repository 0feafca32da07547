"""Distinct batch entries (funcbwd_lab.run.entries): every entry of a batched arg is its own valid
value, so a strategy that used entry 0's index/mask/ordering for every entry cannot pass.

* Properties, on every sample of the 8 test ops: entry 0 is the sample's value; later entries keep
  shape, dtype, the multiset of values (floats up to the entry's scale), hence ties, zeros, repeats
  and mask counts; indices and masks differ between entries; the op's forward accepts them; prod's
  entries have different zero counts.
* Mutation: a per_formula variant that, under vmap, replaces the formula's integer/bool args
  (indices, masks) by batch entry 0 for every entry must fail vmap_all_args on index_select, topk,
  sort and mode (every sample) while per_formula passes; with repeated entries (the old method,
  rebuilt here) the same variant passes, which is why the entries must differ.
"""

from __future__ import annotations

import pytest
import torch

from funcbwd import internals
from funcbwd.errors import BadInputError
from funcbwd_lab.ops import registry
from funcbwd_lab.run import entries, runner, scenario
from funcbwd_lab.strategies.per_formula import PerFormula

BATCH = 3
CASES = [(op, s.name) for op in registry.TEST_OPS for s in registry.get_op(op).samples()]


def _entries(op: str, sample_name: str):
    spec = registry.get_op(op)
    s = spec.sample(sample_name)
    tpos = s.tensor_positions()
    return spec, s, tpos, entries.distinct_entries([s.args[p] for p in tpos], BATCH, 0, op=spec,
                                                   positions=tpos)


@pytest.mark.parametrize("op,sample", CASES)
def test_entries_are_distinct_valid_and_keep_the_sample_structure(op, sample):
    spec, s, tpos, ents = _entries(op, sample)
    for p, es in zip(tpos, ents):
        v = s.args[p]
        assert len(es) == BATCH and torch.equal(es[0], v), "entry 0 must be the sample's value"
        for b, e in enumerate(es[1:], start=1):
            assert e.shape == v.shape and e.dtype == v.dtype
            if v.is_floating_point():
                if spec.batch_entry is None:  # prod's hook changes zero counts on purpose
                    scaled = torch.sort((e / (1.0 + b / 4.0)).reshape(-1)).values
                    assert torch.allclose(scaled, torch.sort(v.reshape(-1)).values)
                assert not torch.equal(e, v)
            else:
                assert set(e.unique().tolist()) <= set(v.unique().tolist()), "index out of the valid set"
                assert sorted(e.unique(return_counts=True)[1].tolist()) == \
                    sorted(v.unique(return_counts=True)[1].tolist()), "repeat pattern / mask count lost"
                if v.unique().numel() > 1:
                    assert all(not torch.equal(e, prev) for prev in es[:b]), f"entry {b} repeats an earlier one"
    for b in range(BATCH):  # every entry is valid input for the op
        args = list(s.args)
        for p, es in zip(tpos, ents):
            args[p] = es[b]
        registry.validate_sample(spec, registry.Sample(f"entry {b}", tuple(args), s.diff))


@pytest.mark.parametrize("sample", [s.name for s in registry.get_op("prod").samples()])
def test_prod_entries_take_different_branches(sample):
    _, _, _, (es,) = _entries("prod", sample)
    assert sorted(int((e == 0).sum()) for e in es) == [0, 1, 2]


def test_ordering_ops_get_different_indices_per_entry():
    for op in ("topk", "sort", "mode"):
        spec, s, _, (es,) = _entries(op, registry.get_op(op).samples()[0].name)
        idx = [spec.torch_op(e, *s.args[1:])[1] for e in es]
        assert not torch.equal(idx[0], idx[1]) and not torch.equal(idx[0], idx[2]), op


def test_a_bad_batch_entry_hook_is_rejected_with_one_line():
    import dataclasses

    spec = dataclasses.replace(registry.get_op("prod"), batch_entry=lambda p, e, b: e[:1])
    with pytest.raises(BadInputError, match="prod.batch_entry must return a tensor shaped"):
        entries.distinct_entries([spec.sample().args[0]], BATCH, op=spec, positions=[0])


# ------------------------------------------------------------------------------ the mutation
class Entry0Indices(PerFormula):
    """Deliberately broken: under vmap, every integer/bool formula arg (index, mask) is replaced by
    its batch entry 0, so every entry is computed with entry 0's index."""

    name = "per_formula_entry0_indices"

    def run_formula(self, op, args: tuple):
        if internals.vmap_active():
            args = tuple(internals.first_batch_entry(a)
                         if isinstance(a, torch.Tensor) and not a.is_floating_point()
                         and internals.is_batched(a) else a for a in args)
        return super().run_formula(op, args)


INDEX_CASES = [(op, s.name) for op in ("index_select", "topk", "sort", "mode")
               for s in registry.get_op(op).samples()]


@pytest.mark.parametrize("op,sample", INDEX_CASES)
def test_entry0_mutant_fails_where_per_formula_passes(op, sample):
    assert runner.run(op, "vmap_all_args", "per_formula", sample).status == "pass"
    broken = runner.run(op, "vmap_all_args", Entry0Indices(), sample)
    assert broken.status == "mismatch", (broken.status, broken.message)


def test_masked_select_mask_batching_fails_before_any_formula():
    """masked_select cannot show the mutation: batching its mask fails in the forward (dynamic
    shape) for every strategy, before the formula runs."""
    for st in ("per_formula", Entry0Indices()):
        for s in registry.get_op("masked_select").samples():
            r = runner.run("masked_select", "vmap_all_args", st, s)
            assert (r.status, r.reason, r.mechanism_ran) == ("fail", "data_dependent", False)


def test_with_repeated_entries_the_mutant_would_pass(monkeypatch):
    """Why the entries must differ: the old method (floats scaled, indices repeated) lets it pass."""
    def repeated(values, batch, seed=0, *, op=None, positions=None):
        return [[v * (1.0 + b / 4.0) if v.is_floating_point() else v.clone() for b in range(batch)]
                for v in values]

    monkeypatch.setattr(scenario, "distinct_entries", repeated)
    for op in ("index_select", "topk"):
        assert runner.run(op, "vmap_all_args", Entry0Indices()).status == "pass"
