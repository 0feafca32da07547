"""The corpus of public in-place code (``data/yourcode-corpus.json``) as markdown: docs/your-code.md's ``corpus`` block.
Rendering only: every count comes from :func:`funcbwd_lab.studies.yourcode.run.summarize`."""

from __future__ import annotations

from collections import Counter

from funcbwd_lab.studies.yourcode.cost import mechanism_table
from funcbwd_lab.studies.yourcode.run import summarize
from funcbwd_lab.views.readme import wrap

#: the targets of the in-place mode (the shipped mechanism)
FIX_TARGET = 0.90
LABELS = {
    "decorator": "`@funcbwd.functionalized` where a user puts it",
    "batched": "functorch#1025 option 1: factories batched under vmap (prototype)",
    "lazy": "functorch#1025 option 2: lazy promotion on first batched write",
    "mode": "`with funcbwd.allow_inplace():` (plain first, then the retry stages)",
    "dropin": "`funcbwd.vmap` for the user's own vmap",
}


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}%" if b else "n/a"


def targets(data: dict) -> list[str]:
    s = summarize(data)
    mode = s["mechanisms"].get("mode")
    if mode is None:
        return ["the mode was not run: targets not measured"]
    share = mode["fixed"] / mode["applicable"] if mode["applicable"] else 0.0
    batched = mode["fixed"] - len(mode.get("looped", []))
    bshare = batched / mode["applicable"] if mode["applicable"] else 0.0
    return [
        f"the mode fixes >= {FIX_TARGET:.0%} of the cells where plain torch.func fails: "
        f"{'met' if share >= FIX_TARGET else 'MISSED'} ({mode['fixed']} of {mode['applicable']}, "
        f"{share:.1%}); batched, without the per-sample loop: "
        f"{'met' if bshare >= FIX_TARGET else 'MISSED'} ({batched}, {bshare:.1%})",
        f"the mode breaks no cell that works plain: "
        f"{'met' if not mode['regressions'] else 'MISSED'} ({len(mode['regressions'])} of "
        f"{s['plain_ok']} plain-working cells fail or are wrong under it)",
        f"no wrong answer (a value that differs from the per-sample loop): "
        f"{'met' if not mode['wrong'] else 'MISSED'} ({len(mode['wrong'])} wrong cells)",
    ]


def markdown(data: dict, source: str = "data/yourcode-corpus.json") -> str:
    s = summarize(data)
    cases = data["cases"]
    libraries = sorted({c["library"] for c in cases.values()})
    intro = (f"{len(cases)} cases from {len(libraries)} public libraries and issues "
             f"({', '.join(libraries)}), each under {len(data['transforms'])} transforms: "
             f"{s['plain_failing']} cells where plain `torch.func` fails or is wrong, "
             f"{s['plain_ok']} where it works"
             + (f", {len(s['unknown'])} unknown (the truth itself raised)" if s["unknown"] else "")
             + ". Every verdict is a value compared with a per-sample loop of torch's autograd on "
             "the case's out-of-place rewrite (tolerance 1e-4).")
    lines = wrap(intro) + ["", "| mechanism | fixes (of plain-failing cells) | of which per-sample loop "
             "| regressions (of plain-working) | wrong answers |", "|---|---|---|---|---|"]
    for m, r in s["mechanisms"].items():
        if m == "plain":
            continue
        lines.append(f"| {LABELS.get(m, m)} | {r['fixed']} of {r['applicable']} "
                     f"({_pct(r['fixed'], r['applicable'])}) | {len(r.get('looped', []))} "
                     f"| {len(r['regressions'])} of {s['plain_ok']} | {len(r['wrong'])} |")
    lines += ["", *wrap("`dropin` counts only the vmap transforms (jacfwd and hessian have no vmap "
                        "of the user's own to replace). \"Per-sample loop\": cells the mode fixed "
                        "only with its last stage, the function run once per batch entry (what "
                        "vmap computes, at a loop's cost, with a `PerSampleLoopWarning`): the "
                        "batched stages fix the rest."), "",
              *wrap("By kind of in-place code (fixed of plain-failing cells; a case counts under "
                    "each of its kinds):"), "",
              "| kind | " + " | ".join(m for m in s["mechanisms"] if m != "plain") + " |",
              "|---|" + "---|" * (len(s["mechanisms"]) - 1)]
    kinds = sorted({k for r in s["mechanisms"].values() for k in r["by_class"]})
    for k in kinds:
        row = []
        for m, r in s["mechanisms"].items():
            if m == "plain":
                continue
            fixed, total = r["by_class"].get(k, [0, 0])
            row.append(f"{fixed}/{total}")
        lines.append(f"| {k} | " + " | ".join(row) + " |")
    mode = s["mechanisms"].get("mode")
    if mode:
        details = {(c["case"], c["transform"]): c for c in data["cells"]
                   if c["mechanism"] == "mode"}
        why = Counter(details[k]["error"] or details[k]["verdict"] for k in mode["still_failing"])
        by_case = Counter(n for n, _ in mode["still_failing"])
        lines += ["", *wrap("Where the mode still fails, by the error it ends with: "
                            + ", ".join(f"{k} {v}" for k, v in why.most_common()) + "; by case: "
                            + ", ".join(f"`{n}` {v}" for n, v in sorted(by_case.items())) + ".")]
    lines += ["", "Targets:", ""]
    for t in targets(data):
        lines += wrap(t, "- ", "  ")
    lines += ["", *wrap(f"_Source: `{source}` (torch {data['torch']}); reproduce with "
                        "`python -m funcbwd_lab.studies.yourcode.run --out data/yourcode-corpus.json --fresh --force` "
                        "(about a minute on one core)._")]
    return "\n".join(lines)


def summary_markdown(data: dict, cost: dict | None = None) -> str:
    """The README's sentence on the corpus (and, given the saved cost run, what it costs), its
    numbers and their target status computed."""
    s = summarize(data)
    mode = s["mechanisms"]["mode"]
    libraries = {c["library"] for c in data["cases"].values()}
    share = mode["fixed"] / mode["applicable"] if mode["applicable"] else 0.0
    status = "met" if share >= FIX_TARGET else "missed"
    looped = len(mode.get("looped", []))
    refused = mode.get("refused", [])
    refused_text = (f"{len(refused)} cells are refused by the tool's contract (a write into the "
                    "caller's state that every batch entry shares: "
                    "[docs/contract.md](docs/contract.md)), never counted as fixed. "
                    if refused else "")
    return "\n".join(wrap(
        f"On {len(data['cases'])} cases of in-place code from {len(libraries)} public libraries "
        f"and issues, each under {len(data['transforms'])} transforms and checked against a "
        f"per-sample loop, it fixes {mode['fixed']} of the {mode['applicable']} cells where plain "
        f"torch.func fails (target {FIX_TARGET:.0%}: {status}, {share:.0%}; {looped} of them only "
        "by running the function once per batch entry, warned), breaks "
        f"{len(mode['regressions']) or 'none'} of the {s['plain_ok']} that work and gives "
        f"{len(mode['wrong']) or 'no'} wrong answer{'s' if len(mode['wrong']) != 1 else ''}"
        + ("; " if refused else ". ")
        + refused_text
        + (_cost_sentence(cost) if cost else "")
        + "Where it still fails and why: [docs/your-code.md](docs/your-code.md), with "
        "`@funcbwd.functionalized` (a traced graph of your function) and "
        "`python -m funcbwd doctor` (which in-place call breaks which transform)."))


def _status(stat: dict) -> str:
    return f"<= {stat['target']}x: {'met' if stat['median'] <= stat['target'] else 'MISSED'}"


def cost_markdown(data: dict, source: str = "data/yourcode-cost.json") -> str:
    """The saved cost run (:mod:`funcbwd_lab.studies.yourcode.cost`): the mode against the hand
    rewrite where plain fails, against plain where plain works, time and memory; each target met
    or missed."""
    s = data["summary"]
    basis = " + ".join(f"{t.replace('vmap_', 'vmap(')})" for t in s["target_basis"])

    def row(where: str, stat: dict, target: str = "") -> str:
        if not stat["n"]:
            return f"| {where} | 0 | not measured | | {target} |"
        return (f"| {where} | {stat['n']} | {stat['median']:.2f}x | {stat['worst']:.2f}x "
                f"| {target} |")

    lines = ["| where | cells | median | worst | target |", "|---|---|---|---|---|"]
    for group, stat in s["by_group"].items():
        lines.append(row(f"plain fails, {group}: time, `funcbwd.vmap` / hand rewrite", stat))
    lines += [
        row(f"plain fails, {basis}: time, `funcbwd.vmap` / hand rewrite", s["fix"],
            _status(s["fix"])),
        row("the same cells: time, the rewrite under a `TorchFunctionMode` that only calls "
            "each op / hand rewrite (a per-op Python mode's floor)", s["floor"]),
        row(f"plain fails, {basis}: peak memory, `funcbwd.vmap` / hand rewrite", s["memory"],
            _status(s["memory"])),
        row("plain works: time, `funcbwd.vmap` / `torch.func.vmap`", s["nofix"],
            _status(s["nofix"])),
        row("plain works: peak memory, `funcbwd.vmap` / `torch.func.vmap`", s["nofix_memory"]),
        row("plain works: peak memory, the code as written / hand rewrite", s["code_memory"])]
    lines += ["", *wrap(f"Each mechanism where it fixes ({basis}, against the hand rewrite; "
                        "medians over different cells, each mechanism's own):"),
              "", *mechanism_table(s, LABELS)]
    lines += ["", *wrap(
        f"Basis: {data['basis']}; the time and memory targets are medians over {basis} (the "
        f"issue's basis), vmap reported apart; {s['not_timed']} cells not timed (the mode fails "
        "there, or the rewrite does). Peak memory: the most CPU bytes one call holds above what "
        "was held before it (torch's profiler allocation events). Where plain fails, the mode "
        "sees every op of the function from Python (a `TorchFunctionMode`), which a hand rewrite "
        "does not: a mode that does nothing else already costs the floor row, and the code as "
        "written often runs more ops and holds more memory than its rewrite (last row), before "
        "any fix. Code that works plain never pays a failed attempt, only the drop-in's "
        "bookkeeping."),
        "", *wrap(f"_Source: `{source}` (torch {data['torch']}); reproduce with "
                  "`python -m funcbwd_lab.studies.yourcode.cost --out data/yourcode-cost.json --force` "
                  "(about 10 minutes)._")]
    return "\n".join(lines)


def _cost_sentence(cost: dict) -> str:
    s = cost["summary"]
    fix, nofix, memory = s["fix"], s["nofix"], s["memory"]

    def status(stat: dict) -> str:
        return "met" if stat["median"] <= stat["target"] else "missed"

    return (f"Where it fixes, it costs {fix['median']:.2f}x a hand rewrite in time (median over "
            f"{fix['n']} timed vmap(vjp) and vmap(jacrev) cells; target {fix['target']}x: "
            f"{status(fix)}) and {memory['median']:.2f}x in peak memory (target "
            f"{memory['target']}x: {status(memory)}); where nothing needs fixing, "
            f"{nofix['median']:.2f}x torch.func.vmap (target {nofix['target']}x: "
            f"{status(nofix)}). ")