"""``python -m funcbwd_lab rfc [--out FILE] [--data DIR]``: the design review's pick as a generated
RFC (Markdown): what would change in core, which functorch expected failures it retires, which
hand-written branches it deletes, and what it costs (:mod:`funcbwd_lab.studies.review.rfc`). Read
from the saved data only (``--data``: default ``$FUNCBWD_DATA`` if set, else ``./data``); nothing
is measured. ``--cpp-cost`` prints the C++ cost estimates alone (text, ``--width`` columns)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from funcbwd_lab import command as options

HELP = "the pick as a generated RFC: core changes, retired xfails, deleted branches, cost"


def configure(p: argparse.ArgumentParser) -> None:
    options.add_out(p, "write the Markdown here instead of stdout (docs/rfc.md is committed: "
                       "--force)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="directory of saved results (review-evidence.json, bench-quick.json, "
                        "live-deletable.json, ...); default $FUNCBWD_DATA if set, else ./data")
    p.add_argument("--cpp-cost", action="store_true",
                   help="print only the C++ cost estimates, as text")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    data_dir = options.data_dir_of(args)
    options.check_args_out(args)
    if not getattr(args, "quiet", False):
        from funcbwd_lab.tables import WIDTH, fit

        print(fit(f"rfc: reading the saved data in {data_dir} ...", WIDTH), file=sys.stderr, flush=True)
    if args.cpp_cost:
        from funcbwd_lab.studies.review import cpp_cost

        inputs = cpp_cost.load_inputs(data_dir)
        sys.stdout.write(cpp_cost.text(cpp_cost.estimates(inputs), inputs, options.width_of(args)))
        return 0
    from funcbwd_lab.studies.review import rfc

    text = rfc.document(rfc.load(data_dir))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    else:
        sys.stdout.write(text)
    return 0
