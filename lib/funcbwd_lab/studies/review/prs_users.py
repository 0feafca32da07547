"""The RFC's last two sections beside the ten answers: the small PRs the evidence supports
today apart from the large change, and what the corpus of users' in-place code says for core
(functorch#1025), from ``data/yourcode-corpus.json`` summarized by
:func:`funcbwd_lab.studies.yourcode.run.summarize`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from funcbwd_lab.studies.review.answers import bullet, para
from funcbwd_lab.studies.yourcode.cost import mechanism_table

CORPUS_FILE = "yourcode-corpus.json"
COST_FILE = "yourcode-cost.json"
#: the corpus's mechanisms in the words of a core reader
LABELS = {
    "decorator": "`@funcbwd.functionalized` where a user puts it",
    "batched": "functorch#1025 option 1: factories batched under vmap",
    "lazy": "functorch#1025 option 2: lazy promotion on the first batched write",
    "mode": "shipped policy: plain first, then the mode's retry stages",
    "dropin": "`funcbwd.vmap` in place of the user's own vmap",
}

#: the same, where a table row has room for less
SHORT = {"decorator": "`@funcbwd.functionalized`", "batched": "option 1: batched factories",
         "lazy": "option 2: lazy promotion", "mode": "shipped policy (mode, retry stages)"}


def prs(inputs: Mapping[str, Any], retired: Mapping[str, Any]) -> list[str]:
    """The small PRs: each an artifact in docs/prs/ (a diff against a named commit, the same
    kernel built out of tree, the upstream entries it retires run on the installed torch)."""
    from funcbwd_lab.studies.prs.effects import describe

    sw, pu, eff = inputs["sweep"], inputs.get("prs_upstream"), inputs.get("prs_effects")
    out = ["## Small PRs the evidence supports today", ""]
    out += para("Apart from the large change, each an artifact in [docs/prs/](prs/README.md): a "
                "diff against a named pytorch commit, the same kernel built out of tree against "
                "the installed torch (lib/funcbwd_lab/studies/prs/), and what it changes, run on "
                "torch 2.13.0+cpu (CPU only):")

    def entries(pr: str) -> str:
        if pu is None:
            return "upstream entries: **not yet measured** (data/prs-upstream.json)"
        rows = [r for r in pu["rows"] if r["pr"] == pr]
        if not rows:
            return "it retires no entry of functorch's test_ops.py"
        tests = ", ".join(sorted({f"`{r['test'].removeprefix('test_')}`" for r in rows}))
        ops = ", ".join(f"`{r['op']}`" for r in rows)
        n = f"retires {sum(r['retired'] for r in rows)} of {len(rows)} upstream entries"
        if not all(r["retired"] for r in rows):
            return n
        return (f"{n} ({ops} of {tests}: expected failures without its kernels, unexpected "
                "successes with them)")

    dec = (eff or {}).get("decompositions", [])
    out.append(bullet(
        "[vmap decompositions](prs/batch-rule-decompositions.md) for `cummaxmin_backward`, "
        "`unfold_backward` and `squeeze_copy.dim` (functorch's decomposition list): "
        + (f"{sum(r['with'] == 'pass' for r in dec)} of {len(dec)} cases pass with vmap's "
           f"fallback disabled and equal the per-sample loop ({sum(r['without'] == 'pass' for r in dec)} "
           "without); " if dec else "") + entries("batch-rule-decompositions") + "."))
    bce = (eff or {}).get("bce", {})

    def passes(label: str) -> str:
        c = bce.get(label, {})
        return f"{c.get('pass', 0)} of {sum(c.values())}"
    mutation = passes("torch's guard, out of tree")
    out.append(bullet(
        "[binary_cross_entropy's double-backward guard](prs/bce-double-backward-guard.md): "
        "`grad_output` joins the `isTensorSubclassLike` check of `gI *= grad * grad_output`; "
        + (f"`vmap(vjp(vjp))` passes {passes('fixed guard')} in_dims choices with the fixed "
           f"guard, {passes('torch')} on torch, {mutation} "
           "with torch's guard rebuilt out of tree (the mutation); " if bce else "")
        + entries("bce-double-backward-guard") + "."))
    copy_cells = sum(n for k, (n, _) in (sw or {}).get("all_causes", {}).items()
                     if k.startswith("copy_has_no"))
    cr = (eff or {}).get("copy_rule", {})
    issue = {r["composition"]: r for r in (inputs.get("copy_repro") or {}).get("rows", [])}
    out.append(bullet(
        "[`aten::copy`'s batching rule, derivative and forward-AD formula](prs/copy-rules.md) "
        "(what functionalization emits for every `copy_`): "
        + (f"the rule matches the per-sample loop in {cr.get('pass', 0)} of {sum(cr.values())} "
           "layout cases (values and `as_strided` reads of dst's geometry); " if cr else "")
        + ("; ".join(f"{_code(k)}: {describe(v['neither'])} without, "
                     f"{describe(v['all three rules'])} with them" for k, v in issue.items())
           + "; " if issue else "")
        + f"the sweep's {copy_cells} copy_has_no_* regressions of `whole`/`hooks`; "
        + entries("copy-rules") + "."))
    if retired.get("measured"):
        out.append(bullet(
            "Remove the stale xfail entries, not the stale `skip()` ones (the tests section, "
            "above, lists both with upstream's reasons): a pass on CPU says nothing of why an "
            "entry is skipped (randomness, flakiness, a platform)."))
    if sw is not None and "complex_slice_scatter" in sw["all_causes"]:
        out.append(bullet(
            "torch bug: `slice_scatter` cannot be differentiated for complex outputs "
            f"({sw['all_causes']['complex_slice_scatter'][0]} regression cells: the backward of "
            "stft and the real/Hermitian FFTs, functionalized). Evidence: the sweep's causes."))
    out.append(bullet(
        "torch bug: functorch's `dynamicLayerStack.size() >= level` internal assert when dynamo "
        "compiles frames of a make_fx/functionalize trace running under a transform inside "
        "torch.compile (objection 3; tests/test_tool_compile.py reproduces it without the fix)."))
    return out + [""]


def _code(label: str) -> str:
    """``"f(x) (a note)"`` as ``"`f(x)` (a note)"``."""
    head, _, tail = label.partition(" (")
    return f"`{head}`" + (f" ({tail}" if tail else "")


def users(corpus: Mapping[str, Any] | None, cost: Mapping[str, Any] | None = None) -> list[str]:
    out = ["## Users' in-place code (functorch#1025, \"needs design\")", ""]
    if corpus is None:
        return out + para(f"**Unknown, because** data/{CORPUS_FILE} is not there.")
    from funcbwd_lab.studies.yourcode.run import summarize

    s = summarize(dict(corpus))
    m = s["mechanisms"]
    libraries = sorted({c["library"] for c in corpus["cases"].values()})
    out += para(
        f"The corpus (data/{CORPUS_FILE}; docs/your-code.md): {len(corpus['cases'])} cases of "
        f"in-place code from {len(libraries)} public libraries and issue trackers, each under "
        f"{len(corpus['transforms'])} transforms and checked against a per-sample loop: plain "
        f"torch.func fails or is wrong on {s['plain_failing']} cells and works on {s['plain_ok']}.")
    out += ["| mechanism | fixes | regressions | wrong |", "|---|---|---|---|"]
    for name, r in m.items():
        if name == "plain":
            continue
        label = LABELS.get(name, name)
        out.append(f"| {label} | {r['fixed']} of {r['applicable']} | "
                   f"{len(r['regressions'])} of {s['plain_ok']} | {len(r['wrong'])} |")
    out.append("")
    lazy, batched, deco, mode = m.get("lazy"), m.get("batched"), m.get("decorator"), m.get("mode")
    if lazy and batched and deco and mode:
        lazy_left = Counter(_error(corpus, "lazy", k) for k in lazy["still_failing"])
        out += para(
            f"Lazy promotion (option 2) fixes {lazy['fixed']} of {lazy['applicable']}, far more "
            f"than batched factories (option 1, {batched['fixed']}) and the decorator "
            f"({deco['fixed']}); its {len(lazy['regressions'])} regressions are cells that work "
            "plain (" + ", ".join(f"`{c}` {t}" for c, t in lazy["regressions"]) + "), where it "
            "should not run at all. The shipped policy (plain first; on an in-place error the "
            "mode, then the mode writing on copies, then functionalized, then a per-sample loop) "
            f"fixes {mode['fixed']} with {len(mode['regressions'])} regressions "
            f"and {len(mode['wrong'])} wrong answers.")
        out += para(
            "Recommendation for core: an opt-in lazy promotion in vmap's in-place error path: "
            "where vmap would raise \"inplace arithmetic ... is not possible\" on an unbatched "
            "tensor, promote that tensor to batched (a copy per sample) and retry the write, "
            "behind a flag, so code that works today never takes it. What it cannot fix, by the "
            "error the cells end with: " + ", ".join(f"{k} {v}" for k, v in lazy_left.most_common())
            + "; the value reads (`.item()`, a Python branch on a per-sample value) need the "
            "per-sample loop, which no batching can replace.")
    return out + _cost(cost)


def _cost(cost: Mapping[str, Any] | None) -> list[str]:
    """What each mechanism costs where it fixes (data/yourcode-cost.json)."""
    if cost is None:
        return para(f"Cost and memory per mechanism: **unknown, because** data/{COST_FILE} is not "
                    "there.")
    s = cost["summary"]
    basis = " and ".join(f"{t.replace('vmap_', 'vmap(')})" for t in s["target_basis"])
    out = para(
        f"What each costs where it fixes ({basis} at batch "
        + " and ".join(str(b) for b in sorted({r["batch"] for r in cost["rows"]}))
        + f"; medians over the cells each one fixes, against the hand rewrite; {cost['basis']}; "
        "peak memory is the most CPU bytes a call holds above what was held before it):")
    out += mechanism_table(s, SHORT)
    floor = s["floor"]
    out += [""] + para(
        f"A `TorchFunctionMode` that only calls each op already costs {floor['median']:.2f}x the "
        "rewrite on the same cells (median; worst " + f"{floor['worst']:.2f}x): any mechanism "
        "built as a Python mode pays per op, and so do options 1 and 2 prototyped that way; the "
        "recommended promotion inside vmap's in-place error path costs nothing until the error.")
    return out


def _error(corpus: Mapping[str, Any], mech: str, key: Any) -> str:
    for c in corpus["cells"]:
        if c["mechanism"] == mech and (c["case"], c["transform"]) == tuple(key):
            return c["error"] or c["verdict"]
    return "?"


