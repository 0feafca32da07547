"""The README's generated sections: the strategies table comes from a saved matrix run
(``data/matrix-test-ops.json``), never typed by hand; ``tests/test_readme.py`` checks both that
the README matches the file and that the file matches a fresh run."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from funcbwd.run import matrix
from funcbwd.ops.registry import TEST_OPS
from funcbwd.run.matrix import CellResult
from funcbwd.strategies import get_strategy

ROOT = Path(__file__).resolve().parents[3]
MATRIX_FILE = ROOT / "data" / "matrix-test-ops.json"
README = ROOT / "README.md"


def run_test_ops_matrix() -> list[CellResult]:
    return matrix.run_matrix(TEST_OPS, None, None)


def stable_records(results: Sequence[CellResult]) -> list[dict]:
    """Records without the volatile timing, for saving and comparing runs."""
    out = []
    for r in results:
        rec = r.record()
        rec.pop("seconds")
        out.append(rec)
    return out


def save(results: Sequence[CellResult], path: Path = MATRIX_FILE) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(stable_records(results), indent=1) + "\n")


def load(path: Path = MATRIX_FILE) -> list[CellResult]:
    return matrix.from_records(json.loads(path.read_text()))


def strategies_markdown(results: Sequence[CellResult]) -> str:
    """One row per strategy: what it is, cells passed (op x scenario, every sample), where it
    fails and why, and how many passing cells needed vmap's slow fallback."""
    summary = matrix.summarize(results)
    strategies = list(dict.fromkeys(r.strategy for r in results))
    lines = [
        "| strategy | what it is | cells passing (of applicable) | slow fallback in | fails (reason: cells) |",
        "|---|---|---|---|---|",
    ]
    for st in strategies:
        cells = {k: v for k, v in summary.items() if k[2] == st}
        applicable = [c for c in cells.values() if c["status"] != "not_applicable"]
        passing = [c for c in applicable if c["status"] == "pass"]
        fb = sum(1 for c in passing if c["fallback_ops"])
        reasons = Counter(c["reason"] or c["status"] for c in applicable if c["status"] != "pass")
        fails = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items())) or "none"
        lines.append(f"| `{st}` | {get_strategy(st).summary} | {len(passing)}/{len(applicable)} "
                     f"| {fb} | {fails} |")
    ops = sorted({r.op for r in results})
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    lines.append("")
    lines.append(f"_Generated from `data/matrix-test-ops.json`: {len(ops)} ops x {len(scenarios)} "
                 f"scenarios, {len(results)} sample runs, each compared with a per-sample loop. "
                 "Regenerate with `python tools/update_readme.py`._")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"README has no '{name}' block")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)


def block(text: str, name: str) -> str:
    m = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.S)
    if not m:
        raise ValueError(f"README has no '{name}' block")
    return m.group(1).rstrip("\n")


BENCH_FILE = ROOT / "data" / "bench-quick.json"


def bench_markdown(results: dict) -> str:
    """The headline ratios of a saved bench run, with the command that reproduces them."""
    from funcbwd.measure import bench

    h = bench.headline(results)
    sizes = results["config"]["sizes"]
    large = bench.headline(results, size="large")["per_op"] if "large" in sizes else {}
    env = results["environment"]
    lines = ["| op | best strategy (small inputs) | worst ratio vs builtin, batch >= 64 | speedup vs "
             "per-sample loop | best at large inputs: ratio vs builtin |",
             "|---|---|---|---|---|"]
    for op, row in h["per_op"].items():
        if not row.get("best"):
            continue
        big = large.get(op, {})
        big_text = f"`{big['best']}` {big['worst_ratio_vs_builtin']:.2f}x" if big.get("best") else "n/a"
        lines.append(f"| {op} | `{row['best']}` | {row['worst_ratio_vs_builtin']:.2f}x "
                     f"| {row['min_speedup_vs_loop']:.0f}x | {big_text} |")
    hooks = h.get("hooks_us_per_node_vs_noop_hook") or {}
    bodies = h.get("hook_bodies_us_per_node_vs_noop") or {}
    lines.append("")
    lines.append(f"_From `{BENCH_FILE.relative_to(ROOT)}` (torch {env['torch']}, "
                 f"{env['cpu_count']} cores, {env['torch_num_threads_used']} torch thread; ratios of "
                 "medians measured in one run). Reproduce: `python -m funcbwd bench --quick --out "
                 "data/bench-quick.json`; full run: `python -m funcbwd bench --out data/bench-full.json`._")
    if hooks or bodies:
        lines.append("")
        lines.append(f"`hooks` with vmap off: {_fmt_us(hooks)} per node over a no-op Python hook end to "
                     f"end; the hook bodies alone: {_fmt_us(bodies)} per node over no-op bodies.")
    return "\n".join(lines)


def _fmt_us(v) -> str:
    if isinstance(v, dict):
        noise = v.get("median_noise_us_per_node")
        v = v.get("median_over_ops")
        if v is not None and noise is not None:
            return f"{v:.1f} us (run noise {noise:.0f} us)"
    return "n/a" if v is None else f"{v:.2f} us"
