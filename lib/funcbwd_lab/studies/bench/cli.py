"""``python -m funcbwd_lab bench``: run the benchmark from a terminal (:mod:`funcbwd_lab.studies.bench.bench`).

Prints the ratio table, the headline, where handfixed is not the floor, the targets and the hooks
claim; ``--out`` writes the JSON result (raw samples included, plus the profile section of
:mod:`funcbwd_lab.studies.bench.profile_section`) that the README, the report and the notebooks read. Importing
this module imports no torch (the library is imported inside the functions).
"""

from __future__ import annotations

import argparse

from funcbwd_lab import command as options

HELP = "overhead and copies: batched backward timings as ratios (vs handfixed and builtin)"


def epilog() -> str:
    from funcbwd_lab.studies.bench.config import SIZES, strategy_labels

    return ("Strategies (default: every available one, plus per_formula+copy_rule; the references "
            "handfixed and builtin are always timed): " + ", ".join(strategy_labels())
            + "\nSizes: " + ", ".join(f"{k} (x{v})" for k, v in SIZES.items()))


def configure(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog  # computed only if help is printed (funcbwd_lab.cli.Parser)
    p.add_argument("--quick", action="store_true",
                   help="the quick config (the 8 test ops, loops up to B=64; default: the full config)")
    p.add_argument("--ops", default=None, help="comma-separated ops (default: all; --quick: the test ops)")
    p.add_argument("--strategies", default=None, help="comma-separated strategy labels")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8,64,256)")
    p.add_argument("--sizes", default=None, help="comma-separated sizes (default small,large)")
    p.add_argument("--repeats", type=int, default=None, help="interleaved rounds")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads while timing")
    p.add_argument("--clock", default=None,
                   help="clock for medians and ratios: thread_cpu (default) or wall (both are recorded)")
    options.add_out(p, "write the JSON result here (data/bench-*.json are committed: --force)")
    p.add_argument("--no-profile", action="store_true",
                   help="skip the profile section (diag, B=64: handfixed, per_formula, traced)")
    options.add_common(p)


def _int_list(text: str, what: str) -> tuple[int, ...]:
    from funcbwd.errors import BadInputError

    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadInputError(f"{what} must be comma-separated integers, got {text!r}") from None


def config_from_args(args: argparse.Namespace):
    """The :class:`funcbwd_lab.studies.bench.config.BenchConfig` the options ask for, validated."""
    from funcbwd.errors import parse_names
    from funcbwd_lab.studies.bench.config import SIZES, BenchConfig, strategy_labels
    from funcbwd_lab.ops import registry

    cfg = BenchConfig.quick() if args.quick else BenchConfig.full()
    if args.ops:
        cfg.ops = tuple(parse_names("op", args.ops, registry.op_groups()))
    if args.strategies:
        cfg.strategies = tuple(parse_names("strategy", args.strategies, strategy_labels()))
    if args.batches:
        cfg.batch_sizes = _int_list(args.batches, "--batches")
    if args.sizes:
        cfg.sizes = tuple(parse_names("size", args.sizes, SIZES))
    if args.repeats is not None:
        cfg.repeats = args.repeats
    if args.threads is not None:
        cfg.num_threads = args.threads
    if args.clock is not None:
        cfg.clock = args.clock
    return cfg.validate()


def main(args: argparse.Namespace) -> int:
    from funcbwd_lab.studies.bench import bench
    from funcbwd_lab.studies.bench import profile_section as bench_profile
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import text as bench_text

    cfg = config_from_args(args)
    options.check_args_out(args)
    # torch's C++ fallback warnings (270 columns each) become one line of ours at the end
    with options.summarized_torch_warnings(options.say_of(args, "bench"), width=93), \
            options.progress_of(args, "bench") as progress:
        if not args.ops:  # say how long before starting (the saved runs' elapsed_s)
            progress("about " + ("3 min (bench-quick.json took 155 s)" if args.quick
                                 else "14 min (bench-full.json took 815 s)"))
        results = bench.run_bench(cfg, progress)
        if not args.no_profile:  # where one cell's time goes, saved so notebooks need not time live
            results["profile"] = bench_profile.profile_section(progress=progress)
    width = options.width_of(args)
    print(bench_text.format_ratios(results, width=width))
    print(bench_text.format_summary(results, width))
    if args.out:
        bench_results.save(results, args.out)
        print(f"wrote {args.out}")
    return 0


configure_bench, main_bench = configure, main
