"""``python -m funcbwd_lab deletable``: which of today's hand-written branches in PyTorch's
backward/JVP formulas would generic functionalization make unnecessary (the live sites,
:mod:`funcbwd_lab.studies.deletable.deletable`, by its ``CRITERION``)? Prints the criterion, the table and per
strategy the headline and the sites it does not clear (:func:`funcbwd_lab.studies.deletable.render.text`, 100
columns); ``--out`` also writes the JSON (e.g. ``data/live-deletable.json``). Progress per site on
stderr."""

from __future__ import annotations

import argparse
import json
import sys

from funcbwd_lab import command as options

HELP = "the deletable-branches table: today's hand-written branches under traced/per_formula"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategies", default="traced,per_formula",
                   help="candidate strategies, comma-separated (default: traced,per_formula)")
    p.add_argument("--ops", default=None,
                   help="only these live ops (comma-separated, e.g. live_take_backward_1); default all")
    p.add_argument("--samples", choices=["all", "first"], default="all",
                   help="every sample of each site's op, or only the first")
    p.add_argument("--no-timing", action="store_true", help="skip the cost measurement")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    options.add_out(p, "also write the JSON result to this file (data/live-deletable.json is the "
                       "committed one: --force; about 10 min with timing)")
    options.add_common(p)


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def check_selection(strategies: list[str] | None, ops: list[str] | None) -> None:
    """An empty selection is an error listing what would match: no strategy, or ``--ops`` that
    names no live site (``0 of 0 branches`` would read as an answer)."""
    from funcbwd.errors import FuncbwdError, listing
    from funcbwd_lab.ops.registry import get_op
    from funcbwd_lab.studies.deletable import deletable

    if not strategies:
        raise FuncbwdError("no strategy given\n" + listing("candidate strategies",
                                                            {"": list(deletable.CANDIDATES)}))
    if ops is not None:
        for o in ops:
            get_op(o)  # an unknown name raises, listing the valid ones
        live = sorted({s.op_name for s in deletable.live_sites()})
        if not set(ops) & set(live):
            raise FuncbwdError(f"no live site matched --ops {','.join(ops)}\n"
                               + listing("ops with a live site", {"": live}))


def main(args: argparse.Namespace) -> int:
    from funcbwd.errors import BadInputError
    from funcbwd_lab.studies.deletable import deletable
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.deletable import render as live

    if args.rounds < 1:
        raise BadInputError(f"--rounds must be a positive int, got {args.rounds}")
    options.check_args_out(args)
    strategies, ops = _names(args.strategies), _names(args.ops)
    check_selection(strategies, ops)

    with options.progress_of(args, "deletable") as progress:
        if ops is None and not args.no_timing:  # say how long before starting
            progress("all live sites: about 9 min with timing (the saved run took 510 s)")
        result = deletable.run_table(strategies, ops=ops, samples=args.samples,
                                     time_it=not args.no_timing, rounds=args.rounds,
                                     progress=progress)
    text = json.dumps(bench_results.strict_json(result), indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    sys.stdout.write((text if args.format == "json"
                      else live.text(result)) + "\n")
    return 0


# the names the routing convention of the brief asked for
configure_deletable = configure
main_deletable = main
