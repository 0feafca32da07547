"""Rendering a checked finding: :class:`Report` as a PyTorch bug report, plain text or JSON.

:meth:`Report.markdown` renders the shape of a PyTorch bug report (``## 🐛 Describe the bug``,
repro block, observed, expected, cause, other cases, versions); :meth:`Report.text` the same as
plain text; :meth:`Report.to_dict` the same as data. Nothing in a report is typed in by hand: it
is built by :meth:`funcbwd_lab.studies.findings.check.Finding.check` from the results it computed
(:class:`~funcbwd_lab.studies.findings.check.CaseResult`; that module imports this one, so the types
here are ``Any``). ``python -m funcbwd_lab findings`` (:mod:`funcbwd_lab.studies.findings.cli`) prints them.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any



@dataclasses.dataclass(frozen=True)
class Report:
    finding: Any  # a funcbwd_lab.studies.findings.check.Finding
    main: Any  # its CaseResult for the repro
    cases: tuple[Any, ...]  # and for each related case
    registered_at: str | None  # where this torch build registered the rule
    env: dict[str, str]

    @property
    def reproduces(self) -> bool:
        return self.main.outcome.bug

    def _cause(self) -> str:
        r = self.finding.rule
        where = (f" (this build registers it at `{self.registered_at}`)" if self.registered_at
                 else " (this build has no FuncTorchBatched kernel for it)")
        read = f" Read at: {r.read_at}." if r.read_at else ""
        return (f"The batching rule at fault is `{r.function}` in `{r.file}`, the FuncTorchBatched "
                f"kernel of `{r.op}`{where}, added in {r.introduced_by}.{read} {r.flaw}\n\n"
                f"Suggested fix: {r.fix}")

    def _explained_line(self) -> str:
        rows = [c for c in (self.main,) + self.cases if c.explained is not None]
        return (f"A Python emulation of the rule as written reproduces vmap's result in "
                f"{sum(c.explained for c in rows)} of {len(rows)} cases; with the suggested fix it "
                f"matches the per-sample loop in {sum(c.fix_works for c in rows)} of {len(rows)}.")

    def markdown(self) -> str:
        f, o = self.finding, self.main.outcome
        parts = [f"# {f.title}", "", "## 🐛 Describe the bug", "", f.summary, "",
                 "```python", f.repro.rstrip(), "```", "",
                 f"Observed (torch {self.env['torch']}): **{o.status}**", "", "```", o.observed, "```", "",
                 "Expected (the same calls in a per-sample Python loop):", "", "```", o.expected, "```", "",
                 "### Cause", "", self._cause(), "", f"Affected: {f.claim_text}", ""]
        if self.cases:
            parts += ["### Other cases checked", "", self._explained_line(), "",
                      "| case | vmap vs per-sample loop | emulated rule explains it | fix works |",
                      "|---|---|---|---|"]
            for c in self.cases:
                status = c.outcome.status + (f" ({_clip(c.outcome.observed)})" if c.outcome.status == "raises" else "")
                parts.append(f"| {c.case.label} | {status} | {_yn(c.explained)} | {_yn(c.fix_works)} |")
            parts.append("")
        parts += ["### Versions", "", "```"] + [f"{k}: {v}" for k, v in self.env.items()] + ["```", ""]
        if not self.reproduces:
            parts.insert(2, f"> **No longer reproduces on torch {self.env['torch']}** (first seen on "
                            f"{f.torch_seen}).\n")
        return "\n".join(parts)

    def text(self) -> str:
        f, o = self.finding, self.main.outcome
        wrap = lambda s: textwrap.fill(s, 100, break_long_words=False, break_on_hyphens=False)  # noqa: E731
        ind = lambda s: textwrap.indent(s.rstrip(), "    ")  # noqa: E731
        title = textwrap.wrap(f.title, 100)
        lines = [*title, "=" * max(map(len, title)),
                 f"first seen on torch {f.torch_seen}; this run: torch {self.env['torch']}, "
                 + ("REPRODUCES" if self.reproduces else "NO LONGER REPRODUCES"), "",
                 wrap(f.summary), "", "Repro:", ind(f.repro), "",
                 f"Observed: {o.status}", ind(o.observed), "", "Expected (per-sample loop):", ind(o.expected),
                 "", wrap(self._cause().replace("`", "")), "", wrap("Affected: " + f.claim_text)]
        if self.cases:
            lines += ["", wrap(self._explained_line()), ""]
            width = min(max(len(c.case.label) for c in self.cases), 100 - 2 - 41)  # 41: the columns
            for c in self.cases:
                label = textwrap.wrap(c.case.label, width) or [""]
                lines.append(f"  {label[0]:<{width}}  {c.outcome.status:<12}  explained: "
                             f"{_yn(c.explained):<3}  fix: {_yn(c.fix_works)}")
                lines += [f"    {more}" for more in label[1:]]
        lines += ["", textwrap.fill("Versions: " + ", ".join(f"{k} {v}" for k, v in self.env.items()), 100)]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        row = lambda c: {"label": c.case.label, "status": c.outcome.status, "observed": c.outcome.observed,  # noqa: E731
                         "expected": c.outcome.expected, "claimed_bug": c.claimed_bug,
                         "explained": c.explained, "fix_works": c.fix_works}
        return {"key": self.finding.key, "title": self.finding.title, "torch_seen": self.finding.torch_seen,
                "reproduces": self.reproduces, "repro": self.finding.repro,
                "rule": dataclasses.asdict(self.finding.rule), "registered_at": self.registered_at,
                "main": row(self.main), "cases": [row(c) for c in self.cases], "versions": self.env}


def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _clip(s: str, n: int = 70) -> str:
    s = s.replace("|", "\\|")
    return s if len(s) <= n else s[: n - 3] + "..."
