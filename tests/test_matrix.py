"""The scenario matrix for the reference strategies, through the CLI's stable JSON form."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from funcbwd_lab.run import outcomes
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.studies.matrix import records as cell_records
from funcbwd_lab.ops.registry import TEST_OPS

INPLACE_OPS = ["diag", "index_select", "topk", "sort", "mode", "masked_select"]


@pytest.fixture(scope="module")
def records():
    out = subprocess.run(
        [sys.executable, "-m", "funcbwd_lab", "matrix", "--ops", ",".join(TEST_OPS),
         "--strategies", "plain,builtin", "--format", "json"],
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout
    return json.loads(out)


def _cells(records, **match):
    return [r for r in records if all(r[k] == v for k, v in match.items())]


def test_json_records_have_the_stable_keys(records):
    for key in ("op", "sample", "scenario", "strategy", "status", "reason", "message",
                "fallback_ops", "seconds", "mechanism", "mechanism_ran"):
        assert all(key in r for r in records), key
    assert {r["status"] for r in records} <= set(outcomes.STATUSES)


@pytest.mark.parametrize("op", INPLACE_OPS)
def test_plain_fails_vmap_cotangents_with_the_inplace_error(records, op):
    failing = [r for r in _cells(records, op=op, strategy="plain", scenario="vmap_cotangents")
               if r["status"] == "fail"]
    assert failing, f"plain {op} should fail vmap_cotangents"
    assert {r["reason"] for r in failing} == {"vmap_inplace"}


def test_plain_diag_fails_only_on_non_square_matrices(records):
    cells = _cells(records, op="diag", strategy="plain", scenario="vmap_cotangents")
    failing = {r["sample"] for r in cells if r["status"] == "fail"}
    assert failing == {"3x5 k=0", "3x5 k=1", "5x3 k=-1"}


def test_prod_fails_primal_batching_for_the_data_dependent_reason(records):
    cells = _cells(records, op="prod", strategy="plain", scenario="vmap_all_args")
    assert cells and all(r["status"] == "fail" and r["reason"] == "data_dependent" for r in cells)
    # and it is not an in-place problem: cotangent batching passes (full prod with two zeros has
    # a zero gradient: uninformative)
    cot = _cells(records, op="prod", strategy="plain", scenario="vmap_cotangents")
    assert all(r["status"] in ("pass", "uninformative") for r in cot)
    assert [r["sample"] for r in cot if r["status"] == "uninformative"] == ["full, two zeros"]


def test_clamp_fails_only_under_mixed_batching(records):
    cells = _cells(records, op="clamp", strategy="plain", scenario="vmap_all_args")
    bad = [r for r in cells if r["status"] == "fail"]
    assert [r["sample"] for r in bad] == ["Tensor min/max (max broadcast)"]
    assert bad[0]["reason"] == "vmap_inplace" and "None" in bad[0]["detail"]
    assert all(r["status"] == "pass" for r in _cells(records, op="clamp", strategy="plain",
                                                      scenario="vmap_cotangents"))


def test_builtin_passes_every_cell_but_masked_select(records):
    """Modern torch passes everything except masked_select: vmapping over its mask is impossible
    (dynamic shape), and - a torch 2.13 bug this workbench found - an *implicitly broadcast input*
    gives a wrong result / shape error under vmap over cotangents."""
    not_passing = {(r["op"], r["sample"], r["scenario"]): r for r in _cells(records, strategy="builtin")
                   if r["status"] not in ("pass", "uninformative")}
    assert {op for op, _, _ in not_passing} == {"masked_select"}
    assert all(r["reason"] == "data_dependent" for (op, s, sc), r in not_passing.items()
               if sc == "vmap_all_args")
    others = {(s, sc) for (op, s, sc) in not_passing if sc != "vmap_all_args"}
    assert {s for s, _ in others} == {"input (4,) broadcast to mask 3x4"}


def test_cli_rejects_unknown_names_with_the_valid_ones():
    p = subprocess.run([sys.executable, "-m", "funcbwd_lab", "matrix", "--strategies", "plain,nope"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "unknown strategy 'nope'" in p.stderr and "valid strategies:" in p.stderr
    assert "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "funcbwd_lab", "matrix", "--ops", "dig"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "unknown op 'dig'" in p.stderr and "diag" in p.stderr


def test_table_and_csv_forms_render(records):
    results = cell_records.from_records(records)
    table = matrix.format_table(results)
    assert "plain" in table.splitlines()[1] and "F:inpl" in table and "failed: vmap in-place" in table
    assert cell_records.to_csv(results).splitlines()[0].startswith("op,sample,scenario,strategy,dtype,status")
