"""``python -m funcbwd_lab graph``: a formula's FX graph in two forms, diffed, with copy counts."""

from __future__ import annotations

import argparse
import sys

from funcbwd_lab import command as options

HELP = "FX graph of a formula and a diff between two forms"


def epilog() -> str:
    from funcbwd_lab.studies.graphs.graphs import FORMS
    from funcbwd_lab.ops import registry

    from funcbwd.errors import listing

    return ("forms:\n" + "\n".join(f"  {f}" for f in FORMS) + "\n\n"
            + listing("ops", registry.op_groups(include_opt_in=True)))


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd_lab.cli.Parser)
    p.add_argument("op", nargs="?", help="op name (see `python -m funcbwd_lab ops`; not with --copies)")
    p.add_argument("--from", dest="a", default="plain", help="form to diff from (default plain)")
    p.add_argument("--to", dest="b", default="traced", help="form to diff to (default traced)")
    p.add_argument("--vmap", action="store_true",
                   help="capture make_fx(vmap(form)) over a batch of cotangents")
    p.add_argument("--sample", default=None, help="sample name (default: the op's first)")
    p.add_argument("--batch", type=int, default=4, help="batch size under --vmap (default 4)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a side-by-side HTML diff")
    p.add_argument("--copies", action="store_true",
                   help="print the copy table instead (the test ops, or the op given)")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd.errors import BadInputError
    from funcbwd_lab.studies.graphs import graphs
    from funcbwd_lab.ops import registry
    from funcbwd_lab.tables import fit

    width = options.width_of(args)
    if args.copies:
        ops = [args.op] if args.op else registry.op_names("test")
        rows = []
        with options.progress_of(args, "graph --copies") as progress:
            for op in progress.track(ops):
                rows += graphs.copy_table([op], vmap=args.vmap, batch=args.batch)
        sys.stdout.write(graphs.format_copy_table(rows, width) + "\n")
        return 0
    if not args.op:
        raise BadInputError("name an op (python -m funcbwd_lab ops lists them), or give --copies")
    spec = registry.get_op(args.op)
    graphs.check_form(args.a), graphs.check_form(args.b)
    with options.progress_of(args, "graph") as progress:
        progress(f"capturing {args.op} as {args.a} and {args.b}"
                 + (f" under vmap (batch {args.batch})" if args.vmap else ""))
        d = graphs.diff(spec, args.a, args.b, args.vmap, spec.sample(args.sample), args.batch)
    text = d.unified() or f"(no difference between {d.a.title} and {d.b.title})"
    text += "\n\n" + "\n".join(graphs.stats_line(graphs.stats_of(cap)) for cap in (d.a, d.b))
    print(fit(text, width))
    if args.html:
        with open(args.html, "w") as f:
            f.write("<!doctype html><meta charset='utf-8'><title>funcbwd graph diff</title>"
                    + d.html() + "\n")
        print(f"wrote {args.html}")
    return 0
