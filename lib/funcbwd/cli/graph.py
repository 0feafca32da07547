"""``python -m funcbwd graph``: a formula's FX graph in two forms, diffed, with copy counts."""

from __future__ import annotations

import argparse
import sys

HELP = "FX graph of a formula and a diff between two forms"


def epilog() -> str:
    from funcbwd.observe.graphs import FORMS
    from funcbwd.ops import registry

    return ("forms:\n" + "\n".join(f"  {f}" for f in FORMS)
            + "\n\nops: " + ", ".join(registry.op_names()))


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd.cli.Parser)
    p.add_argument("op", help="op name (see `python -m funcbwd ops`)")
    p.add_argument("--from", dest="a", default="plain", help="form to diff from (default plain)")
    p.add_argument("--to", dest="b", default="traced", help="form to diff to (default traced)")
    p.add_argument("--vmap", action="store_true",
                   help="capture make_fx(vmap(form)) over a batch of cotangents")
    p.add_argument("--sample", default=None, help="sample name (default: the op's first)")
    p.add_argument("--batch", type=int, default=4, help="batch size under --vmap (default 4)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a side-by-side HTML diff")
    p.add_argument("--copies", action="store_true",
                   help="print the copy table for all test ops instead")


def main(args: argparse.Namespace) -> int:
    from funcbwd.observe import graphs
    from funcbwd.ops import registry

    if args.copies:
        sys.stdout.write(graphs.format_copy_table(graphs.copy_table(vmap=args.vmap, batch=args.batch))
                         + "\n")
        return 0
    spec = registry.get_op(args.op)
    graphs.check_form(args.a), graphs.check_form(args.b)
    d = graphs.diff(spec, args.a, args.b, args.vmap, spec.sample(args.sample), args.batch)
    print(d.unified() or f"(no difference between {d.a.title} and {d.b.title})")
    print()
    for cap in (d.a, d.b):
        print(graphs.stats_line(graphs.stats_of(cap)))
    if args.html:
        with open(args.html, "w") as f:
            f.write("<!doctype html><meta charset='utf-8'><title>funcbwd graph diff</title>"
                    + d.html() + "\n")
        print(f"wrote {args.html}")
    return 0
