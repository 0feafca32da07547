"""The ``ops`` and ``matrix`` subcommands."""

from __future__ import annotations

import argparse
import sys

from funcbwd.ops import registry
from funcbwd.run import matrix
from funcbwd.run.scenarios import SCENARIOS
from funcbwd.strategies import available, get_strategy


def _choices_help(kind: str, names: dict[str, str]) -> str:
    return f"{kind} (comma-separated, default all):\n" + "\n".join(
        f"  {n:18s} {d}" for n, d in names.items())


def configure_ops(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", choices=["test", "extended", "negative_control"], default=None)


def main_ops(args: argparse.Namespace) -> int:
    for spec in registry.all_ops(args.group):
        print(f"{spec.name}  [{spec.group}]")
        print(f"  legacy: {spec.source}")
        print(f"  fixed by: {spec.fixed_by}")
        print(f"  samples: {'; '.join(s.name for s in spec.samples())}")
    return 0


def configure_matrix(p: argparse.ArgumentParser) -> None:
    p.epilog = "\n\n".join([
        _choices_help("--ops", {s.name: f"[{s.group}] {s.fixed_by}" for s in registry.all_ops()}),
        _choices_help("--scenarios", {n: s.description for n, s in SCENARIOS.items()}),
        _choices_help("--strategies", {n: get_strategy(n).summary for n in available()}),
        "status: pass | fail (classified reason) | mismatch (vs the per-sample loop) | not_applicable",
    ])
    p.add_argument("--ops", default=None, help="ops to run (see below)")
    p.add_argument("--scenarios", default=None, help="scenarios to run (see below)")
    p.add_argument("--strategies", default=None, help="strategies to run (see below)")
    p.add_argument("--samples", choices=["all", "first"], default="all",
                   help="every sample of each op, or only the first")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p.add_argument("--out", default=None, help="write to this file instead of stdout")


def main_matrix(args: argparse.Namespace) -> int:
    results = matrix.run_matrix(args.ops, args.scenarios, args.strategies, samples=args.samples)
    text = {"table": matrix.format_table, "json": matrix.to_json, "csv": matrix.to_csv}[args.format](results)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0
