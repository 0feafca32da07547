"""``python -m funcbwd doctor MODULE:FUNC --args "..."``: your function under torch.func."""

from __future__ import annotations

import argparse
import sys

HELP = "run your function under vmap/vjp/jacrev/jacfwd/hessian, plain and functionalized"


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = ("Runs FUNC (or a torch.autograd.Function subclass) under each transform as "
                "written, with funcbwd.vmap's in-place mode and wrapped in "
                "funcbwd.functionalized, checks each against a per-sample loop of the code as "
                "written, names the first in-place call that broke (file:line) and shows what "
                "functionalization made of the in-place calls.\n"
                "Exit 0 when every requested transform works with one of funcbwd's tools, 1 "
                "otherwise, 2 on bad input.")
    p.add_argument("target", metavar="MODULE:FUNC", help="e.g. mypkg.losses:loss or path/to/file.py:f")
    p.add_argument("--args", required=True,
                   help='the arguments, a Python expression with torch in scope, e.g. '
                        '"torch.randn(3, 5), 2" (floating tensors are batched, the first '
                        'differentiated)')
    p.add_argument("--batch", default=None, metavar="POSITIONS",
                   help="argument positions to batch, e.g. 0,2 (default: every floating tensor)")
    p.add_argument("--transforms", default="all",
                   help="comma-separated subset of vmap,vjp,jacrev,jacfwd,hessian (default all)")


def main(args: argparse.Namespace) -> int:
    from funcbwd.doctor import checks, report

    fn = checks.load_function(args.target)
    call_args = checks.parse_args(args.args)
    transforms = checks.parse_transforms(args.transforms)
    batch = checks.parse_batch(args.batch, call_args)
    diff = report.graph_diff(fn, call_args)
    rows = report.diagnose(fn, call_args, transforms, batch=batch,
                           progress=lambda t: print(f"doctor: {t} ...", file=sys.stderr, flush=True))
    sys.stdout.write(report.render(args.target, rows, diff) + "\n")
    return 0 if report.recommendation(rows)[1] else 1
