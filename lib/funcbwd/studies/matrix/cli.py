"""``python -m funcbwd matrix``: run the op x scenario x strategy matrix and print or save it."""

from __future__ import annotations

import argparse
import sys

from funcbwd import command as options

HELP = "run the op x scenario x strategy matrix"


def _choices(kind: str, names: dict[str, str], note: str = "") -> str:
    from funcbwd.tables import table, terminal_width

    return f"{kind} (comma-separated, default all){note}:\n" + table(
        ["name", "what"], [[n, d] for n, d in names.items()], rule=False, indent="  ",
        width=terminal_width())


def epilog() -> str:
    """The valid ops (by group, with what fixed each), scenarios and strategies (imports the
    library)."""
    from funcbwd.ops import registry
    from funcbwd.run.scenarios import SCENARIOS
    from funcbwd.strategies import available, get_strategy

    groups = registry.op_groups(include_opt_in=True)
    return "\n\n".join([
        *(_choices("--ops", {s.name: s.fixed_by for s in registry.all_ops(g)},
                   f", group {g}" + (" (opt-in: --group live)" if g == "live" else ""))
          for g in groups),
        _choices("--scenarios", {n: s.description for n, s in SCENARIOS.items()}),
        _choices("--strategies", {n: get_strategy(n).summary for n in available()}),
        "status: pass | fail (classified reason) | mismatch (vs the per-sample loop) | "
        "not_applicable; the table's legend says what each mark means, and it ends with what each "
        "strategy fixes over plain (funcbwd.studies.matrix.summary.fixes_over_plain)",
    ])


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd.cli.Parser)
    p.add_argument("--ops", default=None, help="ops to run (see below; default: every op outside "
                   "the opt-in groups)")
    p.add_argument("--group", default=None, help="run this group's ops instead of --ops (e.g. live: "
                   "today's core sites, opt-in)")
    p.add_argument("--scenarios", default=None, help="scenarios to run (see below)")
    p.add_argument("--strategies", default=None, help="strategies to run (see below)")
    p.add_argument("--samples", choices=["all", "first"], default="all",
                   help="every sample of each op, or only the first")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    options.add_out(p, "write to this file instead of stdout")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd.studies.matrix import matrix
    from funcbwd.studies.matrix import records
    from funcbwd.studies.matrix import summary

    ops = args.ops
    if getattr(args, "group", None) is not None:
        from funcbwd.errors import BadInputError, check_name
        from funcbwd.ops import registry

        if ops is not None:
            raise BadInputError("give --ops or --group, not both")
        ops = registry.op_names(check_name("group", args.group, registry.groups()))
    options.check_args_out(args)
    width = options.width_of(args)
    with options.progress_of(args, "matrix") as progress:
        if getattr(args, "group", None) == "live":  # say how long before starting
            progress("the live group: about 8 min on 2 cores (495 s measured)")
        results = matrix.run_matrix(ops, args.scenarios, args.strategies, samples=args.samples,
                                    progress=progress)
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
