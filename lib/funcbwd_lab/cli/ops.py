"""``python -m funcbwd_lab ops``: the op catalog, one block per registered op."""

from __future__ import annotations

import argparse

from funcbwd_lab import command as options

HELP = "list the op catalog (name, legacy source, fix, samples)"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", default=None,
                   help="only this group: test (the 8 ops of functorch#241), extended, "
                        "negative_control, live (today's core sites; opt-in: not listed by "
                        "default), or any group a plugin registers")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd.errors import check_name
    from funcbwd_lab.ops import registry
    from funcbwd_lab.tables import paragraph

    width = options.width_of(args)
    if args.group is not None:
        check_name("group", args.group, registry.groups())
    for spec in registry.all_ops(args.group):
        print(f"{spec.name}  [{spec.group}]")
        for label, text in (("legacy", spec.source), ("fixed by", spec.fixed_by),
                            ("samples", "; ".join(s.name for s in spec.samples()))):
            print(paragraph(f"{label}: {text}", width, "  ", "      "))
    return 0
