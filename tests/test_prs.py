"""The small PRs (docs/prs/): their kernels built out of tree against the installed torch, each
checked against the per-sample loop with vmap's slow fallback disabled and shown to be what makes
the difference (without it, or with torch's own guard rebuilt, the same call fails); the diffs are
well formed, their C++ is the out-of-tree source's text, their test_ops.py hunks remove exactly the
entries the saved upstream run retires. Skipped, in one line, where no C++ toolchain exists."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from torch.func import vjp, vmap

from funcbwd_lab.studies.prs import build, effects, upstream

ROOT = Path(__file__).resolve().parents[1]
PRS = ROOT / "docs" / "prs"
CPP = ROOT / "lib" / "funcbwd_lab" / "studies" / "prs" / "csrc" / "prs.cpp"


@pytest.fixture(scope="module")
def kernels():
    why = build.available()
    if why:
        pytest.skip(why)
    return build


def _vmap_vjp(f, x, cts):
    def h(ct):
        return vjp(f, x)[1](ct)[0]
    return (lambda: vmap(h)(cts)), (lambda: torch.stack([h(c) for c in cts]))


def test_decompositions_remove_the_fallback_and_match_the_loop(kernels):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g)
    call, loop = _vmap_vjp(lambda t: torch.cummax(t, 1).values, x, torch.randn(3, 4, 5, generator=g))
    with kernels.kernels([]), effects.no_fallback():
        assert "cummaxmin_backward" in effects.outcome(call, loop)  # the mutation: no kernel
    with kernels.kernels(["cummaxmin_backward"]), effects.no_fallback():
        assert effects.outcome(call, loop) == "pass"
    call, loop = _vmap_vjp(lambda t: t.unfold(0, 1, 1), torch.randn((), generator=g),
                           torch.randn(3, 1, generator=g))
    with kernels.kernels(["unfold_backward"]), effects.no_fallback():  # 0-dim needs squeeze_copy
        assert "squeeze_copy" in effects.outcome(call, loop)
        with kernels.kernels(["squeeze_copy.dim"]):
            assert effects.outcome(call, loop) == "pass"
    assert kernels.installed() == []


def test_the_bce_guard_is_what_matters(kernels):
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 4, generator=g, dtype=torch.float64).clamp(0.05, 0.95)
    t, w = (torch.rand(3, 4, generator=g, dtype=torch.float64) for _ in range(2))

    def h(x, ct, ct2):
        first = lambda x, ct: vjp(lambda x: F.binary_cross_entropy(x, t, w), x)[1](ct)[0]  # noqa: E731
        return vjp(first, x, ct)[1](ct2)

    cts = torch.rand(2, dtype=torch.float64)  # only the first backward's cotangent batched
    ct2 = torch.rand(3, 4, generator=g, dtype=torch.float64)
    call = lambda: vmap(h, in_dims=(None, 0, None))(x, cts, ct2)  # noqa: E731
    loop = lambda: tuple(torch.stack(p) for p in zip(*[h(x, c, ct2) for c in cts]))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert effects.describe(effects.outcome(call, loop)) == "vmap's in-place error"  # torch
        with kernels.kernels(["bce_double_backward_upstream_guard"]):  # torch's guard, rebuilt
            assert effects.describe(effects.outcome(call, loop)) == "vmap's in-place error"
        with kernels.kernels(["bce_double_backward"]):
            assert effects.outcome(call, loop) == "pass"
            assert all(torch.allclose(a, b) for a, b in zip(h(x, cts[0], ct2),
                                                            loop()[0][:1]))


def test_copy_rules_batch_differentiate_and_keep_dsts_layout(kernels):
    d = torch.randn(5, 4).t()  # dst laid out transposed: its geometry is read back below
    src = torch.randn(3, 5)

    def f(s):
        return torch.ops.aten.copy(d, s).as_strided(d.shape, d.stride(), d.storage_offset())
    call, loop = (lambda: vmap(f)(src)), (lambda: torch.stack([f(s) for s in src]))
    with effects.no_fallback():
        assert "copy" in effects.outcome(call, loop)  # the mutation: no rule, no batching
        with kernels.kernels(["copy_batch_rule"]):
            assert effects.outcome(call, loop) == "pass"
    a = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, requires_grad=True)
    fn = lambda a, b: torch.ops.aten.copy(a, b)  # noqa: E731
    with pytest.raises(RuntimeError, match="derivative for aten::copy is not implemented"):
        torch.autograd.gradcheck(fn, (a, b))
    with warnings.catch_warnings(), kernels.kernels(["copy_autograd"]):
        warnings.simplefilter("ignore")  # the dispatcher warns once that it overrides a kernel
        assert torch.autograd.gradcheck(fn, (a, b), check_forward_ad=True)


# ------------------------------------------------------------------------------ the diffs
def _files(diff: str) -> dict[str, list[str]]:
    out, cur = {}, None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            cur = line[4:].removeprefix("b/")
            out[cur] = []
        elif cur is not None and not line.startswith("--- "):
            out[cur].append(line)
    return out


def well_formed(diff: str) -> list[str]:
    """What is wrong with the unified diff's hunks (line counts against their headers)."""
    bad = []
    for path, lines in _files(diff).items():
        i = 0
        while i < len(lines):
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", lines[i])
            if not m:
                bad.append(f"{path}: not a hunk header: {lines[i][:40]}")
                break
            old, new = int(m.group(2) or 1), int(m.group(4) or 1)
            i += 1
            o = n = 0
            while i < len(lines) and not lines[i].startswith("@@"):
                tag = lines[i][:1]
                o += tag in (" ", "-")
                n += tag in (" ", "+")
                i += 1
            if (o, n) != (old, new):
                bad.append(f"{path}: hunk says -{old} +{new}, holds -{o} +{n}")
    return bad


def _function(source: str, name: str) -> str:
    """The text of C++ function ``name`` (its signature to its closing brace), whitespace folded."""
    start = source.index(f" {name}(")
    start = source.rindex("\n", 0, start) + 1
    depth, i = 0, source.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(source[i], 0)
        if depth == 0:
            return " ".join(source[start:i + 1].split())
        i += 1


def test_the_diffs_are_well_formed_and_hold_the_out_of_tree_code():
    cpp = CPP.read_text()
    diffs = {p.stem: p.read_text() for p in PRS.glob("*.diff")}
    assert set(diffs) == set(upstream.PRS)
    for name, text in diffs.items():
        assert not well_formed(text), (name, well_formed(text))
        assert (PRS / f"{name}.md").exists()
    added = {n: "\n".join(ln[1:] for ln in t.splitlines() if ln.startswith("+") and
                          not ln.startswith("+++")) for n, t in diffs.items()}
    for pr, names in (("batch-rule-decompositions", ["unfold_backward_decomposition"]),
                      ("copy-rules", ["may_overlap", "self_overlaps", "copy_batch_rule"])):
        for fn in names:
            assert _function(added[pr], fn) == _function(cpp, fn), (pr, fn)
    guard = next(ln for ln in added["bce-double-backward-guard"].splitlines() if "areAny" in ln)
    assert "{gI, grad, grad_output}" in guard and "{gI, grad, grad_output}" in cpp
    # mutation: the checks catch a changed line and a miscounted hunk
    changed = added["copy-rules"].replace("extent = base + length", "extent = base + length + 1")
    assert _function(changed, "copy_batch_rule") != _function(cpp, "copy_batch_rule")
    assert well_formed(diffs["copy-rules"].replace("@@ -0,0 +1,", "@@ -0,0 +1,9"))


def test_the_test_hunks_remove_exactly_the_retired_entries():
    from funcbwd_lab.studies.coverage import upstream as entries

    saved = upstream.load(ROOT / "data")
    assert saved is not None and saved["retired"] == sum(r["retired"] for r in saved["rows"]
                                                         if r["pr"] != "control")
    for pr, spec in upstream.PRS.items():
        text = (PRS / f"{pr}.diff").read_text()
        tests = "\n".join(_files(text).get("test/functorch/test_ops.py", []))
        removed = re.findall(r'^-\s+(?:xfail\()?"?([\w.]+)"?', tests, re.M)
        removed = [r for r in removed if r not in ("xfail",)]
        assert sorted(removed) == sorted(op for _, op, _ in spec["entries"]), pr
        rows = [r for r in saved["rows"] if r["pr"] == pr]
        assert all(r["retired"] for r in rows)
        for test, op, variant in spec["entries"]:  # the hunk's lines are upstream's entry lines
            e = next(e for e in entries.entries_for(test) if e.op == op and e.variant == variant
                     and e.kind == "xfail")
            starts = [int(m) + k for m, body in re.findall(r"@@ -(\d+),\d+ \+\d+,\d+ @@\n(.*?)(?=\n@@|\Z)",
                                                           tests, re.S)
                      for k, ln in enumerate(l for l in body.splitlines() if l[:1] in " -")
                      if ln.startswith("-") and "xfail(" in ln and op in body]
            assert e.line in starts, (pr, op, e.line, starts)
    controls = [r for r in saved["rows"] if r["pr"] == "control"]
    assert controls and not any(r["retired"] for r in controls)
    assert upstream.retired("expected failure", "unexpected success")
    assert not upstream.retired("expected failure", "expected failure")  # the rule can say no


def test_describe_names_the_error_in_a_few_words():
    assert effects.describe("RuntimeError: aten::_unique hit the vmap fallback which is "
                            "currently disabled") == "aten::_unique's slow fallback"
    assert effects.describe("RuntimeError: vmap: inplace arithmetic(self, ...)") == \
        "vmap's in-place error"
    assert effects.describe("pass") == "pass"


def test_without_a_toolchain_the_reason_is_one_line(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda tool: None)
    assert build.missing_tools() == "c++, ninja"
