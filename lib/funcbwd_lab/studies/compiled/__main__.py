"""``python -m funcbwd_lab.studies.compiled [--out PATH] [--render PATH] [--quick] [--only cost]``: run
the study, save the JSON (``--out``), print the text render (or re-render a saved file with
``--render``; ``--only cost`` re-measures the cost section of the file ``--out`` names, about 4
min, and keeps the rest). Progress on stderr."""

from __future__ import annotations

import argparse
import logging
import sys

from funcbwd_lab import command
from funcbwd_lab.studies.compiled import report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.compiled", description=__doc__)
    command.add_out(p, "save the study's JSON here (data/compiled.json is committed: --force)")
    p.add_argument("--render", metavar="PATH", help="only render a saved JSON file")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: eager backend, diag and prod, two scenarios, two cost cases")
    p.add_argument("--only", choices=["cost"],
                   help="re-measure only this section of the saved file --out names, keep the rest")
    args = p.parse_args(argv)
    command.check_args_out(args)
    if args.only and not args.out:
        p.error("--only cost needs --out (the saved study it updates)")
    if args.render:
        sys.stdout.write(report.render(report.load(args.render)))
        return 0
    # dynamo logs a warning per graph break it takes; the study records them itself
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if args.only == "cost":
        say("re-measuring the cost section only (about 4 min on 2 cores)")
        data = report.recollect_cost(report.load(args.out), say=say)
    elif args.quick:
        data = report.collect(("eager",), ("diag", "prod"), ("vmap_cotangents", "jacrev"),
                              cost_cases=[("diag", "small"), ("diag", "large")], pairs=7,
                              row=False, say=say)
    else:
        data = report.collect(say=say)
    if args.out:
        report.save(data, args.out)
        say(f"saved {args.out}")
    sys.stdout.write(report.render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
