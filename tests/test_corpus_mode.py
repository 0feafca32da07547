"""The corpus of public in-place code (studies/yourcode/cases/) and what the in-place mode does on
it: every case faithful to its rewrite, the saved verdicts equal to a fresh run, the docs' blocks
rendered from the saved run, and the mode's failures as data with a reason each (functorch's
test_ops style: a new failure or a new pass both fail the test)."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from funcbwd_lab.studies.yourcode import check
from funcbwd_lab.studies.yourcode import run as corpus_run
from funcbwd_lab.studies.yourcode.case import TRANSFORMS
from funcbwd_lab.studies.yourcode.cases import CASES
from funcbwd_lab.views import corpus, readme

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "yourcode-corpus.json"

#: case -> (transforms where the mode fails, why): the mode's expected failures
MODE_FAILS: dict[str, tuple[tuple[str, ...], str]] = {
    "vector_quantize:VectorQuantize": (
        ("vmap", "vmap_vmap"),
        "the codebook's moving average is written into module buffers (through `.data`) once per "
        "sample: refused by default (the contract); under the grad transforms it lands as eager's"),
    "vqvae2:Quantize.forward": (
        ("vmap", "vmap_vmap"), "the codebook is written into module buffers, as vector_quantize"),
    "e3nn:BatchNorm": (
        ("vmap", "vmap_vjp", "vmap_jacrev", "vmap_vmap"),
        "running statistics written once per sample: refused by default (the contract)"),
    "llama:Attention.forward-kv_cache": (
        ("vmap", "vmap_vjp", "vmap_jacrev", "vmap_vmap"),
        "each sample's keys and values written into the caller's cache: refused by default"),
}


@pytest.fixture(scope="module")
def saved() -> dict:
    return json.loads(DATA.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_is_faithful_to_its_rewrite(name):
    assert check.faithful(CASES[name]) == []


def test_every_case_cites_its_source_and_says_what_it_is():
    for name, case in CASES.items():
        assert case.source and case.library and case.what and case.classes, name
    assert len({c.library for c in CASES.values()}) >= 14


def test_saved_run_covers_every_case_and_mechanism(saved):
    assert set(saved["cases"]) == set(CASES)
    from funcbwd_lab.studies.yourcode.mechanisms import MECHANISMS
    assert saved["mechanisms"] == list(MECHANISMS)
    assert len(saved["cells"]) == len(CASES) * len(TRANSFORMS) * len(MECHANISMS)


def test_saved_plain_and_mode_verdicts_equal_a_fresh_run(saved):
    fresh = corpus_run.run(sorted(CASES), ["plain", "mode"])
    got = {corpus_run._key(c): c["verdict"] for c in fresh}
    want = {corpus_run._key(c): c["verdict"] for c in saved["cells"]
            if c["mechanism"] in ("plain", "mode")}
    assert got == want


def test_the_modes_failures_are_the_expected_ones(saved):
    s = corpus_run.summarize(saved)
    failing: dict[str, set] = {}
    for n, t in s["mechanisms"]["mode"]["still_failing"]:
        failing.setdefault(n, set()).add(t)
    plain = {(c["case"], c["transform"]): c["verdict"] for c in saved["cells"]
             if c["mechanism"] == "plain"}
    expected = {n: {t for t in ts if plain[(n, t)] in ("fail", "wrong")}
                for n, (ts, _) in MODE_FAILS.items()}
    assert failing == expected


def test_the_mode_breaks_nothing_and_is_never_wrong(saved):
    mode = corpus_run.summarize(saved)["mechanisms"]["mode"]
    assert mode["regressions"] == [] and mode["wrong"] == []


def test_the_summary_counts_a_regression_and_a_wrong_answer(saved):
    # Mutation: one plain-working cell marked failing and one cell wrong under the mode.
    cells = [dict(c) for c in saved["cells"]]
    ok = next(c for c in cells if c["mechanism"] == "plain" and c["verdict"] == "ok")
    for c in cells:
        if c["mechanism"] == "mode" and (c["case"], c["transform"]) == (ok["case"], ok["transform"]):
            c["verdict"] = "fail"
    fixed = next(c for c in cells if c["mechanism"] == "mode" and c["verdict"] == "ok"
                 and c["case"] != ok["case"])
    fixed["verdict"] = "wrong"
    broken = dict(saved, cells=cells)
    mode = corpus_run.summarize(broken)["mechanisms"]["mode"]
    assert len(mode["regressions"]) == 1 and len(mode["wrong"]) == 1
    lines = corpus.targets(broken)
    assert "MISSED (1 of" in lines[1] and "MISSED (1 wrong" in lines[2]


@pytest.mark.parametrize("name", ["corpus", "corpus-summary", "corpus-cost"])
def test_docs_blocks_are_rendered_from_the_saved_run(name, saved):
    home = readme.HOMES[name]
    text = (ROOT / home).read_text()
    cost = json.loads((ROOT / "data" / "yourcode-cost.json").read_text())
    if name == "corpus-cost":
        want = corpus.cost_markdown(cost)
    elif name == "corpus-summary":
        want = corpus.summary_markdown(saved, cost)
    else:
        want = corpus.markdown(saved)
    assert readme.block(text, name, where=home) == want


def test_the_cost_targets_say_missed_when_missed():
    data = json.loads((ROOT / "data" / "yourcode-cost.json").read_text())
    slow = json.loads(json.dumps(data))
    slow["summary"]["nofix"]["median"] = 1.5  # mutation: a drop-in slower than its target
    assert "<= 1.1x: MISSED" in corpus.cost_markdown(slow)
    fast = json.loads(json.dumps(data))
    fast["summary"]["fix"]["median"] = 1.0
    assert "<= 1.2x: met" in corpus.cost_markdown(fast)


def test_the_memory_target_says_missed_when_missed():
    data = json.loads((ROOT / "data" / "yourcode-cost.json").read_text())
    for median, word in ((1.5, "MISSED"), (1.0, "met")):
        d = json.loads(json.dumps(data))
        d["summary"]["memory"]["median"] = median  # mutation: the saved memory ratio moved
        row = next(line for line in corpus.cost_markdown(d).splitlines() if "peak memory" in line
                   and "<= 1.1x" in line)
        assert row.endswith(f"<= 1.1x: {word} |")


def test_peak_memory_sees_what_a_call_holds_at_once():
    import torch

    from funcbwd import internals

    def one():
        a = torch.zeros(250_000)
        return (a + 1).sum()  # a and a + 1: two at once

    def two_more():
        a, b = torch.zeros(250_000), torch.zeros(250_000)
        return (a + b + 1).sum()  # a, b, a + b, then + 1: four at once

    assert internals.peak_cpu_bytes(one) >= 2 * 1_000_000
    assert internals.peak_cpu_bytes(two_more) >= internals.peak_cpu_bytes(one) + 1_000_000


def test_the_runner_refuses_an_empty_or_unknown_selection(capsys, tmp_path):
    assert corpus_run.main(["--cases", "no-such-case", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "no-such-case" in err and "\n" == err[-1] and err.count("\n") == 1
    assert not (tmp_path / "x.json").exists()


def test_the_runner_resumes_and_writes_where_told(tmp_path):
    out = tmp_path / "c.json"
    assert corpus_run.main(["--cases", "pytorch#103329", "--mechanisms", "plain", "--out",
                            str(out), "--quiet"]) == 0
    first = json.loads(out.read_text())
    assert {c["mechanism"] for c in first["cells"]} == {"plain"}
    assert corpus_run.main(["--cases", "pytorch#103329", "--mechanisms", "plain", "mode",
                            "--out", str(out), "--quiet"]) == 0
    second = json.loads(out.read_text())
    assert {c["mechanism"] for c in second["cells"]} == {"plain", "mode"}
    kept = [c for c in second["cells"] if c["mechanism"] == "plain"]
    assert kept == first["cells"]  # the plain cells were kept, not re-run
    assert corpus_run.DEFAULT_OUT.parts[0] == "out"  # the default never touches data/



def test_first_call_block_is_rendered_from_the_saved_run_and_says_missed_when_missed():
    from funcbwd_lab.studies.yourcode import first_call

    data = json.loads((ROOT / "data" / "decorator-first-call.json").read_text())
    assert readme.block((ROOT / readme.HOMES["first-call"]).read_text(), "first-call",
                        where=readme.HOMES["first-call"]) == first_call.markdown(data)
    slow = json.loads(json.dumps(data))  # mutation: the large first call 3x the small one
    slow.update(met=False, ratio={"cpu": 3.0, "wall": 3.0})
    assert "**missed**" in first_call.markdown(slow) and "**3.00x**" in first_call.markdown(slow)


def test_a_tangent_keeps_its_primals_dtype():
    """vector_quantize under jacfwd and hessian: torch 2.13's jvp of ``F.mse_loss(c, x)`` in
    ``x`` (the target) returns a float64 tangent of a float32 output, so the mode's Jacobian was
    float64 where the loop's is float32 (a wrong answer). Mutation: without
    funcbwd.transforms._tangents_as_primals, both cells are wrong."""
    cells = corpus_run.run(["vector_quantize:VectorQuantize"], ["mode"])
    got = {c["transform"]: c["verdict"] for c in cells if c["transform"] in ("jacfwd", "hessian")}
    assert got == {"jacfwd": "ok", "hessian": "ok"}, got
