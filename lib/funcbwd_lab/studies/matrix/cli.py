"""``python -m funcbwd_lab matrix``: run the op x scenario x strategy matrix and print or save it."""

from __future__ import annotations

import argparse
import sys

from funcbwd_lab import command as options

HELP = "run the op x scenario x strategy matrix"


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each option's help on its own line beside it (100 columns: 30 + 70)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30, width=100)


def epilog() -> str:
    """The valid names, short (imports the library): ops by group (the first of a long group and
    how many more; `python -m funcbwd_lab ops` lists them all with their fixes), scenarios by group,
    strategies, and what a cell's status means."""
    from funcbwd.errors import listing
    from funcbwd_lab.ops import registry
    from funcbwd_lab.run.scenarios import SCENARIO_GROUPS
    from funcbwd_lab.strategies import available

    groups = {(f"{g}, opt-in" if g == "live" else g): registry.op_names(g)
              for g in registry.op_groups(include_opt_in=True)}
    return "\n".join([
        listing("--ops (comma-separated; `python -m funcbwd_lab ops` shows each op's fix)", groups),
        listing("--scenarios (comma-separated, default all)", dict(SCENARIO_GROUPS)),
        listing("--strategies (comma-separated, default all)", {"": list(available())}),
        "status: pass | fail (classified reason) | mismatch (vs the per-sample loop) | "
        "not_applicable;\n  the table's legend says what each mark means, then what each "
        "strategy fixes over plain",
    ])


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd_lab.cli.Parser)
    p.formatter_class = _Help
    p.usage = ("python -m funcbwd_lab matrix [--ops NAMES | --group G] [--scenarios NAMES]\n"
               "                                [--strategies NAMES] [options]")
    run = p.add_argument_group("what to run")
    run.add_argument("--ops", default=None, metavar="NAMES",
                     help="ops to run (default: every op outside the opt-in groups)")
    run.add_argument("--group", default=None, metavar="G",
                     help="this group's ops instead of --ops (live: today's core sites)")
    run.add_argument("--scenarios", default=None, metavar="NAMES", help="scenarios to run")
    run.add_argument("--strategies", default=None, metavar="NAMES", help="strategies to run")
    run.add_argument("--samples", choices=["all", "first"], default="all",
                     help="every sample of each op, or only the first")
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=["table", "json", "csv"], default="table",
                     help="default table")
    options.add_out(out, "write to this file instead of stdout")
    options.add_common(out)


def check_applicable(results) -> None:
    """A run whose every cell is not applicable answered nothing (a table of n/a and fixes of 0):
    an error naming the scenarios that do run these ops' formulas."""
    from funcbwd.errors import FuncbwdError, listing
    from funcbwd_lab.ops import registry
    from funcbwd_lab.run.scenarios import names_for

    if results and all(r.status == "not_applicable" for r in results):
        ops = list(dict.fromkeys(r.op for r in results))
        scenarios = list(dict.fromkeys(r.scenario for r in results))
        kinds = {registry.get_op(op).kind for op in ops}
        raise FuncbwdError(f"nothing applicable: no cell of {', '.join(ops)} x {', '.join(scenarios)} "
                           "can run\n" + listing("scenarios for these ops' formulas",
                                                  {"": names_for(kinds)}))


def main(args: argparse.Namespace) -> int:
    from funcbwd_lab.studies.matrix import matrix
    from funcbwd_lab.studies.matrix import records
    from funcbwd_lab.studies.matrix import summary

    ops = args.ops
    if getattr(args, "group", None) is not None:
        from funcbwd.errors import BadInputError, check_name
        from funcbwd_lab.ops import registry

        if ops is not None:
            raise BadInputError("give --ops or --group, not both")
        ops = registry.op_names(check_name("group", args.group, registry.groups()))
    options.check_args_out(args)
    width = options.width_of(args)
    with options.progress_of(args, "matrix") as progress:
        if getattr(args, "group", None) == "live":  # say how long before starting
            progress("the live group: up to about 8 min on 2 cores (495 s with every strategy)")
        results = matrix.run_matrix(ops, args.scenarios, args.strategies, samples=args.samples,
                                    progress=progress)
    check_applicable(results)
    render = {"table": lambda rs: (matrix.format_table(rs, width) + "\n\n"
                                   + summary.format_fixes(rs, width)),
              "json": records.to_json, "csv": records.to_csv}[args.format]
    text = render(results)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0
