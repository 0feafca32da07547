"""``python -m funcbwd_lab trace``: the dispatch-key trace of one op x strategy x scenario."""

from __future__ import annotations

import argparse
import sys

from funcbwd_lab import command as options

HELP = "dispatch-key trace of one op x strategy x scenario"


def epilog() -> str:
    from funcbwd_lab.run.scenarios import SCENARIO_NAMES

    return ("Records every torch call the backward formula makes (interpreter stack, dispatch "
            "TLS, wrapper chains, vmap handling) and highlights the failing call.\n"
            f"scenarios: {', '.join(SCENARIO_NAMES)}")


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd_lab.cli.Parser)
    p.add_argument("op", help="op name (python -m funcbwd_lab ops lists them)")
    p.add_argument("--strategy", default="plain", help="strategy (default plain)")
    p.add_argument("--scenario", default="vmap_cotangents", help="scenario (default vmap_cotangents)")
    p.add_argument("--sample", default=None, help="sample name (default: the op's first sample)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a self-contained HTML page")
    p.add_argument("--no-profile", action="store_true", help="skip the torch.profiler dispatcher view")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd.errors import check_name
    from funcbwd_lab.studies.trace.trace import trace
    from funcbwd_lab.ops import registry
    from funcbwd_lab.run.scenarios import SCENARIO_GROUPS
    from funcbwd_lab.strategies import get_strategy
    from funcbwd_lab.tables import fit

    registry.get_op(args.op).sample(args.sample), get_strategy(args.strategy)  # names first
    check_name("scenario", args.scenario, SCENARIO_GROUPS)
    with options.progress_of(args, "trace") as progress:
        progress(f"tracing {args.op} under {args.strategy} in {args.scenario}"
                 + ("" if args.no_profile else ", then the torch.profiler view"))
        tr = trace(args.op, args.strategy, args.scenario, args.sample, profile=not args.no_profile)
    sys.stdout.write(fit(tr.text(), options.width_of(args)) + "\n")
    if args.html:
        with open(args.html, "w") as f:
            f.write(tr.html())
        print(f"wrote {args.html}")
    return 0
