"""``python -m funcbwd findings``: the torch bugs the workbench found, as self-checking reports."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

HELP = "torch bugs found here, as self-checking upstream bug reports"


def epilog() -> str:
    from funcbwd.measure.findings import FINDINGS

    return "findings:\n" + "\n".join(
        textwrap.fill(f.title, 100, initial_indent=f"  {f.key:26s} ", subsequent_indent=" " * 29)
        for f in FINDINGS)


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd.cli.Parser)
    p.add_argument("--only", default=None, help="comma-separated finding keys (default: all; see below)")
    p.add_argument("--format", choices=["markdown", "text", "json"], default="markdown")
    p.add_argument("--no-cases", action="store_true", help="only the repro, not the related cases")
    p.add_argument("--out", default=None, help="write to this file instead of stdout")


def main(args: argparse.Namespace) -> int:
    from funcbwd.errors import BadInputError
    from funcbwd.measure import findings

    keys = findings.finding_keys() if not args.only else [
        k.strip() for k in args.only.split(",") if k.strip()]
    if not keys:
        raise BadInputError("--only names no finding; valid findings: "
                            + ", ".join(findings.finding_keys()))
    reports = []
    for i, key in enumerate(keys):
        finding = findings.get_finding(key)
        print(f"[{i + 1}/{len(keys)}] checking {key}", file=sys.stderr, flush=True)
        reports.append(finding.check(with_cases=not args.no_cases))
    if args.format == "json":
        text = json.dumps([r.to_dict() for r in reports], indent=1)
    else:
        text = "\n\n".join(r.markdown() if args.format == "markdown" else r.text() for r in reports)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(text + "\n")
    return 0
