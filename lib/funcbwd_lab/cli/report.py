"""``python -m funcbwd_lab report``: the workbench's views in one self-contained HTML file.

Saved results (bench, coverage) are read from ``--data DIR``: default ``$FUNCBWD_DATA`` if set,
else ``./data`` of the current directory (in a checkout, its ``data/``). The installed library
never looks for a checkout.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from funcbwd_lab import command as options

HELP = "one self-contained HTML report (no Jupyter, no network)"
def configure(p: argparse.ArgumentParser) -> None:
    options.add_out(p, "HTML file to write (default report.html, untracked)", default="report.html")
    p.add_argument("--ops", default=None,
                   help="comma-separated ops (default: the 8 test ops; see `python -m funcbwd_lab ops`)")
    p.add_argument("--scenarios", default=None, help="comma-separated scenarios (default all)")
    p.add_argument("--strategies", default=None, help="comma-separated strategies (default all)")
    p.add_argument("--quick", action="store_true", help="only the first sample of each op")
    p.add_argument("--recompute", action="store_true",
                   help="run the matrix here instead of reading the saved run in --data (minutes; "
                        "the command says how many before it starts)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help=f"directory of saved results (bench-quick.json, coverage.json.gz, ...); "
                        f"default ${options.DATA_ENV} if set, else ./data")
    options.add_common(p)


def main(args: argparse.Namespace) -> int:
    from funcbwd_lab.tables import fit
    from funcbwd_lab.views.report import build_report

    data_dir = options.data_dir_of(args)
    options.check_args_out(args)
    with options.progress_of(args, "report") as progress:
        page, sections = build_report(args.ops, quick=args.quick, scenarios=args.scenarios,
                                      strategies=args.strategies, data_dir=data_dir,
                                      progress=progress, recompute=args.recompute)
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True)
    out.write_text(page, encoding="utf-8")
    missing = [s.id for s in sections if s.status == "missing"]
    errors = [s.id for s in sections if s.status == "error"]
    width = options.width_of(args)
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)")  # a path is not wrapped
    if missing:
        print(fit(f"sections without data or module: {', '.join(missing)}", width))
    if errors:
        print(fit(f"FAILED sections: {', '.join(errors)}", width))
    return 1 if errors else 0
