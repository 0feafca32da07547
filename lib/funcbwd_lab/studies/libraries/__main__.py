"""``python -m funcbwd_lab.studies.libraries COMMAND``: the installed-library study.

    install   pip install the lock into build/libraries (about 30 s)
    run       compute every case on Dask (about 25 min on 2 cores; resumable)
    bench     time the mode where it fixes and where plain works (about 5 min)
    render    write docs/libraries.md from the saved data (seconds)
    all       install (if needed), run, bench, render

``--out`` names the data file (default out/libraries.json; data/libraries.json, the committed
one, needs ``--force``); ``--docs`` the page (default out/libraries.md; docs/libraries.md needs
``--force``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from funcbwd.errors import BadInputError
from funcbwd_lab import command


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.libraries",
                                description="The installed-library study (issue 38).")
    p.add_argument("command", choices=("install", "run", "bench", "render", "all"))
    p.add_argument("--cases", nargs="*", default=None, help="case names (default: all)")
    p.add_argument("--out", type=Path, default=Path("out/libraries.json"))
    p.add_argument("--docs", type=Path, default=Path("out/libraries.md"))
    p.add_argument("--workers", type=int, default=2, help="Dask worker processes (0: serial)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    p.add_argument("--fresh", action="store_true", help="ignore cases already in --out")
    command.add_force(p)
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    ns = p.parse_args(argv)
    say = command.say_of(ns, "libraries")
    from funcbwd_lab.studies.libraries import env

    if ns.command in ("install", "all") and (ns.command == "install" or not env.installed()):
        rc = env.install(say)
        if rc or ns.command == "install":
            return rc
    try:
        if ns.command in ("run", "all", "bench"):
            command.check_out(ns.out, ns.force)
        if ns.command in ("render", "all"):
            command.check_out(ns.docs, ns.force)
    except BadInputError as e:
        print(f"python -m funcbwd_lab.studies.libraries: error: {e}", file=sys.stderr)
        return 2
    if ns.command in ("run", "all"):
        if not env.installed():
            print("the libraries are not installed at the lock's versions: run "
                  "python -m funcbwd_lab.studies.libraries install", file=sys.stderr)
            return 2
        from funcbwd_lab.studies.libraries.cases import CASES
        from funcbwd_lab.studies.libraries.run import compute

        names = ns.cases or list(CASES)
        bad = [n for n in names if n not in CASES]
        if bad:
            print(f"unknown case(s): {', '.join(bad)}", file=sys.stderr)
            return 2
        say(f"{len(names)} cases on {ns.workers} Dask workers (about 25 min for all on 2 "
            f"cores); saved to {ns.out} as each case finishes")
        compute(names, ns.out, ns.workers, ns.timeout, ns.fresh,
                progress=command.progress_of(ns, "libraries"))
    if ns.command in ("bench", "all"):
        from funcbwd_lab.studies.libraries.bench import bench

        say("timing the mode against plain and a per-sample loop at B=64 (about 5 min)")
        bench(ns.out, progress=command.progress_of(ns, "bench"))
    if ns.command in ("render", "all"):
        from funcbwd_lab.studies.libraries.render import write_page

        write_page(ns.out, ns.docs)
        say(f"wrote {ns.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
