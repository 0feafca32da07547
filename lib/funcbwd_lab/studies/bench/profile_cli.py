"""``python -m funcbwd_lab profile``: where one cell's batched backward spends its time."""

from __future__ import annotations

import argparse
import sys

from funcbwd_lab import command as options

HELP = "where one batched backward's time goes: funcbwd Python, vmap, aten kernels"


def epilog() -> str:
    from funcbwd.errors import listing
    from funcbwd_lab.ops import registry
    from funcbwd_lab.strategies import available

    return ("Times vmap(vjp_fn)(cotangents) for one op under one strategy, then splits the time "
            "with cProfile (funcbwd's own Python) and torch.profiler (kernels, vmap dispatch, "
            "vmap's per-sample fallback); see funcbwd_lab.studies.bench.profile for the method and its "
            f"limits.\nstrategies: {', '.join(available())}\n"
            + listing("ops", registry.op_groups(include_opt_in=True)))


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd_lab.cli.Parser)
    p.add_argument("op", help="op name (python -m funcbwd_lab ops lists them)")
    p.add_argument("--strategy", default="traced", help="strategy (default traced)")
    p.add_argument("--batch", type=int, default=64, help="vmap batch size (default 64)")
    p.add_argument("--sample", default=None, help="sample name (default: the op's first sample)")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd_lab.studies.bench.profile import format_table, profile
    from funcbwd_lab.ops import registry
    from funcbwd_lab.strategies import get_strategy
    from funcbwd_lab.tables import fit

    registry.get_op(args.op).sample(args.sample), get_strategy(args.strategy)  # names first
    with options.progress_of(args, "profile") as progress:
        progress(f"timing and profiling {args.op} under {args.strategy}, batch {args.batch}")
        b = profile(args.op, args.strategy, batch=args.batch, sample=args.sample)
    sys.stdout.write(fit(format_table(b), options.width_of(args)) + "\n")
    return 0


# the names the brief for this command asked for
configure_profile = configure
main_profile = main
