"""``python -m funcbwd_lab findings``: the torch bugs the workbench found, as self-checking reports."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from funcbwd_lab import command as options

HELP = "torch bugs found here, as self-checking upstream bug reports"


def epilog() -> str:
    from funcbwd_lab.studies.findings.findings import FINDINGS

    return "findings:\n" + "\n".join(
        textwrap.fill(f.title, 100, initial_indent=f"  {f.key:26s} ", subsequent_indent=" " * 29)
        for f in FINDINGS)


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd_lab.cli.Parser)
    p.add_argument("--only", default=None, help="comma-separated finding keys (default: all; see below)")
    p.add_argument("--format", choices=["markdown", "text", "json"], default="markdown")
    p.add_argument("--no-cases", action="store_true", help="only the repro, not the related cases")
    options.add_out(p, "write to this file instead of stdout")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd.errors import parse_names
    from funcbwd_lab.studies.findings import findings
    from funcbwd_lab.tables import fit

    keys = parse_names("finding", args.only, findings.finding_keys())
    options.check_args_out(args)
    with options.progress_of(args, "findings") as progress:
        reports = [findings.get_finding(k).check(with_cases=not args.no_cases)
                   for k in progress.track(keys)]
    if args.format == "json":
        text = json.dumps([r.to_dict() for r in reports], indent=1)
    elif args.format == "markdown":  # a document to paste upstream: its lines are left whole
        text = "\n\n".join(r.markdown() for r in reports)
    else:
        text = fit("\n\n".join(r.text() for r in reports), options.width_of(args))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(text + "\n")
    return 0
