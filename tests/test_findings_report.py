"""The upstream-ready bug reports of ``funcbwd_lab.studies.findings.findings``.

Each finding's repro must still show the bug on this torch (a fix upstream fails the test and says
what to remove), every related case must behave as the finding's prose claim says, the Python
emulation of the cited batching rule must explain every case and its suggested fix must match the
per-sample loop, and the rendered report must be standalone (its code block runs with nothing but
torch). The runner and the emulation check are themselves shown to fail on wrong input.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import subprocess
import sys

import pytest
import torch

import funcbwd
from funcbwd_lab.studies.findings import findings as F
from funcbwd_lab.studies.findings import cli as cli_findings

KEYS = F.finding_keys()


@pytest.fixture(scope="module")
def reports() -> dict[str, F.Report]:
    return {f.key: f.check() for f in F.FINDINGS}


# ------------------------------------------------------------------------------ the bugs are still there
@pytest.mark.parametrize("key", KEYS)
def test_repro_still_shows_the_bug(reports, key):
    report = reports[key]
    assert report.reproduces, (
        f"torch fixed {key} ({report.finding.title}) on torch {torch.__version__}: remove it from "
        f"findings and the README. The repro now gives {report.main.outcome.observed}")


@pytest.mark.parametrize("key", KEYS)
def test_every_case_behaves_as_the_claim_says(reports, key):
    report = reports[key]
    wrong = [(c.case.label, c.outcome.status, "claimed bug" if c.claimed_bug else "claimed ok")
             for c in (report.main,) + report.cases if c.claimed_bug != c.outcome.bug]
    assert not wrong, f"{key}: cases that contradict the claim {report.finding.claim_text!r}: {wrong}"
    # the family draws the boundary: some affected cases, and some close neighbours that are right
    statuses = {c.outcome.status for c in report.cases}
    assert "ok" in statuses and statuses - {"ok"}, statuses


@pytest.mark.parametrize("key", KEYS)
def test_the_cited_rule_explains_every_case_and_its_fix_matches_the_loop(reports, key):
    report = reports[key]
    rows = [c for c in (report.main,) + report.cases if c.explained is not None]
    assert len(rows) >= 10, f"{key}: only {len(rows)} emulated cases"
    unexplained = [(c.case.label, c.outcome.status) for c in rows if not c.explained]
    assert not unexplained, f"{key}: the emulated batching rule does not reproduce vmap in {unexplained}"
    unfixed = [c.case.label for c in rows if not c.fix_works]
    assert not unfixed, f"{key}: the suggested fix does not match the per-sample loop in {unfixed}"


@pytest.mark.parametrize("key", KEYS)
def test_this_torch_registers_the_cited_rule_in_the_cited_file(reports, key):
    report = reports[key]
    assert report.registered_at, f"{report.finding.rule.op} has no FuncTorchBatched kernel any more"
    assert report.registered_at.split(":")[0] == report.finding.rule.file, (
        f"{key}: the rule moved to {report.registered_at}; update Rule.file and re-check the function")


# ------------------------------------------------------------------------------ the sweep that found them
def _sweep_mismatches(op: str, scenario: str) -> tuple[set[str], int]:
    import gzip
    from pathlib import Path

    saved = json.load(gzip.open(Path(__file__).resolve().parents[1] / "data" / "coverage-all.json.gz"))
    rows = [r for r in saved["records"] if r["op"] == op and r["strategy"] == "builtin" and r["scenario"] == scenario]
    return {r["sample"] for r in rows if r["status"] == "mismatch"}, saved["meta"]["batch"]


def _opinfo_samples(name: str) -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(o for o in op_db if o.name == name and not o.variant_test_name)
    return list(op.sample_inputs("cpu", torch.float32, requires_grad=True))


def test_the_claims_predict_the_opinfo_sweeps_mismatches_exactly():
    """roll and cdist were found by the OpInfo sweep (data/coverage-all.json.gz, cotangents-only
    batching): each finding's claim, applied to every OpInfo sample, names exactly the samples the
    sweep saw mismatch (a claim that over- or under-reaches fails here)."""
    mismatched, batch = _sweep_mismatches("cdist", "vmap_cotangents")
    predicted = set()
    for i, s in enumerate(_opinfo_samples("cdist")):
        x1, (x2, p, mode) = s.input, s.args
        params = {"kind": "vjp", "p": p, "batch": batch, "mode": mode, "rows": (x1.shape[-2], x2.shape[-2])}
        if x1.numel() and x2.numel() and F.CDIST.claim(params):
            predicted.add(str(i))
    assert len(mismatched) == 130 and predicted == mismatched, (sorted(predicted ^ mismatched), len(mismatched))

    mismatched, batch = _sweep_mismatches("roll", "vmap_cotangents")
    predicted = set()
    for i, s in enumerate(_opinfo_samples("roll")):
        shifts, dims = (s.args + ((),))[:2]
        first = shifts[0] if isinstance(shifts, (tuple, list)) else shifts
        params = {"kind": "vjp", "rank": s.input.dim(), "batch": batch, "dims": bool(dims), "shift": -first}
        if F.ROLL.claim(params):
            predicted.add(str(i))
    assert predicted == mismatched == {"16"}, (predicted, mismatched)


# ------------------------------------------------------------------------------ the report is standalone
def _code_block(markdown: str) -> str:
    blocks = re.findall(r"```python\n(.*?)\n```", markdown, flags=re.S)
    assert len(blocks) == 1, f"expected one python code block, found {len(blocks)}"
    return blocks[0]


@pytest.mark.parametrize("key", KEYS)
def test_markdown_is_an_upstream_bug_report(reports, key):
    report = reports[key]
    md = report.markdown()
    for heading in ("## 🐛 Describe the bug", "### Cause", "### Other cases checked", "### Versions"):
        assert heading in md, heading
    assert _code_block(md) == report.finding.repro.rstrip()
    assert report.main.outcome.observed in md and report.main.outcome.expected in md
    assert report.finding.rule.file in md and report.finding.rule.function in md
    assert f"torch: {torch.__version__}" in md
    assert all(c.case.label.replace("|", "\\|") in md for c in report.cases)
    text = report.text()
    assert report.finding.title in " ".join(text.split()) and "REPRODUCES" in text  # wrapped at 100
    assert all(line.strip() in text for line in report.finding.repro.splitlines() if line.strip())


@pytest.mark.parametrize("key", KEYS)
def test_the_code_block_runs_with_only_torch(reports, key, tmp_path):
    code = _code_block(reports[key].markdown())
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(code))
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module)])}
    assert imported == {"torch"}, imported
    # a fresh interpreter, isolated (-I), in an empty directory, with funcbwd made unimportable
    runner = ("import sys; sys.modules['funcbwd'] = None; "
              "exec(compile(sys.stdin.read(), 'repro', 'exec'), {'__name__': '__main__'})")
    done = subprocess.run([sys.executable, "-I", "-c", runner], input=code, capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "vmap:" in done.stdout and "per-sample loop:" in done.stdout


# ------------------------------------------------------------------------------ the checks can fail
def test_runner_tells_right_from_wrong():
    head = "import torch\nlooped = torch.arange(4.0)\n"
    assert F.run(head + "batched = torch.arange(4.0)\n").status == "ok"
    assert F.run(head + "batched = torch.arange(4.0) + 1\n").status == "wrong values"
    assert F.run(head + "batched = torch.arange(4.0)[None]\n").status == "wrong shape"
    raised = F.run(head + "raise RuntimeError('boom')\n")
    assert raised.status == "raises" and raised.observed == "RuntimeError: boom" and raised.bug
    with pytest.raises(funcbwd.BadInputError, match="must define `looped`"):
        F.run("import torch\nbatched = torch.ones(2)\n")
    with pytest.raises(funcbwd.BadInputError, match="must define `batched`"):
        F.run("import torch\nlooped = torch.ones(2)\n")


def test_a_wrong_emulation_or_claim_is_caught():
    """An 'emulation' that just returns the right answer cannot explain a bug; a claim that
    nothing is affected contradicts the repro."""
    finding = F.get_finding("index_fill_batched_value")
    fake = dataclasses.replace(finding, emulate=lambda ns, fixed: ns["looped"], claim=lambda p: False)
    row = F.CaseResult.of(fake, fake.main_case())
    assert row.outcome.bug and row.explained is False and row.fix_works is True
    assert row.claimed_bug != row.outcome.bug


def test_each_part_of_a_suggested_fix_is_needed():
    """Mutation of the fixes: roll's rule with the batch dim on the wrong side of a 0-d sample, and
    cdist's fix without giving ``cdist`` its batch dim, must no longer match the loop."""
    from funcbwd_lab.studies.findings import cdist as findings_cdist
    from funcbwd_lab.studies.findings import roll as findings_roll

    # roll: the rule as written (unsqueeze(0)) used as the "fix" cannot match the loop
    roll = dataclasses.replace(F.ROLL, emulate=lambda ns, fixed: findings_roll.emulate_roll(ns, False))
    assert not F.CaseResult.of(roll, roll.main_case()).fix_works
    # cdist: x1 batched but cdist not: right for p=1 (the kernel does not read cdist there), wrong for p=2
    half = dataclasses.replace(F.CDIST, emulate=lambda ns, fixed: findings_cdist.emulate_cdist(
        ns, fixed, fix_cdist=False))
    by_p = {c.params["p"]: c for c in F.CDIST.cases() if c.params["kind"] == "vjp" and c.emulable
            and c.params["batch"] == 3}
    assert F.CaseResult.of(half, by_p[1.0]).fix_works
    assert not F.CaseResult.of(half, half.main_case()).fix_works  # p=2
    assert not F.CaseResult.of(half, by_p[3.0]).fix_works


@pytest.mark.parametrize("key", KEYS)
def test_the_text_report_fits_100_columns(reports, key):
    long = [line for line in reports[key].text().splitlines() if len(line) > 100]
    assert not long, long


def test_unknown_finding_names_the_valid_ones():
    with pytest.raises(funcbwd.BadInputError, match="valid findings: masked_select_broadcast"):
        F.get_finding("nope")


# ------------------------------------------------------------------------------ CLI
def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli_findings.configure(p)
    return p.parse_args(list(argv))


def test_cli_json_and_markdown(capsys, tmp_path):
    assert cli_findings.main(_args("--format", "json", "--no-cases")) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["key"] for d in data] == KEYS and all(d["reproduces"] for d in data)
    assert all(d["cases"] == [] for d in data)
    out = tmp_path / "findings.md"
    assert cli_findings.main(_args("--only", "index_fill_batched_value", "--out", str(out), "--no-cases")) == 0
    md = out.read_text()
    assert md.count("## 🐛 Describe the bug") == 1 and F.INDEX_FILL.repro.rstrip() in md
    with pytest.raises(funcbwd.FuncbwdError, match="unknown finding 'nope'"):
        cli_findings.main(_args("--only", "nope"))
