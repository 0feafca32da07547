"""What the decorator's first call costs as the inputs grow (issue 37's target: n=768 within 2x n=64).

``python -m funcbwd_lab.studies.yourcode.first_call [--rounds 7] [--out PATH]``

A benchmark, not a test. The function is a two-matmul step with the in-place write torch refuses
under vmap (a per-sample value copied into a fresh ``zeros`` buffer)::

    y = torch.zeros(w.shape[0]); y.copy_(w @ x); return w @ y.relu_()

decorated with :func:`funcbwd.functionalized` and called under ``vmap`` over a batch of 8 ``x``
(``w`` shared, ``n x n``). A *first call* is the first call of a freshly compiled copy of that
source (a new code object, so nothing the tool cached applies): it traces the function (on fake
tensors) and runs the graph. A *second call* is the same copy's next call (the graph only). Each
round times, in a rotating order, a first and a second call at every size; medians over the
rounds, thread CPU time and wall time both (one torch thread). The tool's one-time imports (fake
tensors, FX) are paid before the first round. The ratio the target reads is the median first
call at n=768 over the median first call at n=64, in this one run. Output: ``out/first-call.json``
(``data/decorator-first-call.json`` is the committed copy, ``--force``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

SIZES = (64, 768)
BATCH = 8
TARGET = 2.0
SOURCE = '''
def step(x, w):
    y = torch.zeros(w.shape[0])
    y.copy_(w @ x)
    return w @ y.relu_()
'''


def fresh(k: int):
    """A new decorated copy of the step (its own code object: file name ``<first-call-k>``)."""
    import torch

    import funcbwd

    space: dict[str, Any] = {"torch": torch}
    exec(compile(SOURCE, f"<first-call-{k}>", "exec"), space)  # noqa: S102 - our own source
    return funcbwd.functionalized(space["step"], warn=False)


def _clocks(call) -> tuple[float, float, Any]:
    w0, c0 = time.perf_counter(), time.thread_time()
    out = call()
    return time.thread_time() - c0, time.perf_counter() - w0, out


def measure(rounds: int, progress: Any = None) -> dict[str, Any]:
    """Time first and second calls at every size for ``rounds`` rounds (see the module doc)."""
    import torch
    from torch.func import vmap

    from funcbwd_lab.studies.bench.timing import median, one_torch_thread

    gen = torch.Generator().manual_seed(0)
    inputs = {n: (torch.randn(BATCH, n, generator=gen), torch.randn(n, n, generator=gen) / n)
              for n in SIZES}
    loops = {n: torch.stack([w @ (w @ x).relu() for x in xs]) for n, (xs, w) in inputs.items()}
    samples: dict[int, dict[str, list[float]]] = {
        n: {"first_cpu": [], "first_wall": [], "second_cpu": [], "second_wall": []} for n in SIZES}
    k = 0
    with one_torch_thread(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vmap(fresh(-1), in_dims=(0, None))(*inputs[SIZES[0]])  # one-time imports, not timed
        if progress is not None:
            progress.start(rounds * len(SIZES))
        for r in range(rounds):
            for n in SIZES[r % len(SIZES):] + SIZES[:r % len(SIZES)]:
                k += 1
                f = vmap(fresh(k), in_dims=(0, None))
                xs, w = inputs[n]
                for which in ("first", "second"):
                    cpu, wall, out = _clocks(lambda: f(xs, w))
                    torch.testing.assert_close(out, loops[n])  # a timing of a wrong answer is none
                    samples[n][f"{which}_cpu"].append(round(cpu, 6))
                    samples[n][f"{which}_wall"].append(round(wall, 6))
                if progress is not None:
                    progress.advance(label=f"round {r + 1} n={n}")
        if progress is not None:
            progress.close()
    sizes = {str(n): {**s, **{f"median_{key}": median(v) for key, v in s.items()}}
             for n, s in samples.items()}
    lo, hi = (str(n) for n in SIZES)
    ratio = {clock: sizes[hi][f"median_first_{clock}"] / sizes[lo][f"median_first_{clock}"]
             for clock in ("cpu", "wall")}
    return {"torch": torch.__version__, "python": platform.python_version(),
            "basis": f"the step under vmap over a batch of {BATCH}, one torch thread, a fresh "
                     f"code object per first call; every answer checked against a per-sample loop", "source": SOURCE.strip(), "rounds": rounds,
            "sizes": sizes, "ratio": ratio, "target": TARGET,
            "met": ratio["cpu"] <= TARGET}


def markdown(data: dict[str, Any]) -> str:
    """The docs block: the medians and the ratio, met or missed."""
    lo, hi = (str(n) for n in SIZES)
    s = data["sizes"]
    ms = lambda v: f"{v * 1e3:.1f} ms"  # noqa: E731
    rows = ["| n | first call (CPU) | first call (wall) | second call (CPU) |",
            "|---|---|---|---|"]
    for n in (lo, hi):
        rows.append(f"| {n} | {ms(s[n]['median_first_cpu'])} | {ms(s[n]['median_first_wall'])} "
                    f"| {ms(s[n]['median_second_cpu'])} |")
    r = data["ratio"]
    verdict = "met" if data["met"] else "missed"
    return ("\n".join(rows) + "\n\n"
            f"First call at n={hi} over n={lo}: **{r['cpu']:.2f}x** CPU ({r['wall']:.2f}x wall); "
            f"target <= {data['target']:g}x: **{verdict}**. Medians of {data['rounds']} rounds "
            f"in one run, torch {data['torch']}; {data['basis']} "
            "(`python -m funcbwd_lab.studies.yourcode.first_call`).")


def main(argv: list[str] | None = None) -> int:
    from funcbwd.errors import BadInputError
    from funcbwd_lab import command

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.yourcode.first_call",
                                description="The decorator's first call against input size.")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("out/first-call.json"))
    command.add_force(p)
    p.add_argument("--quiet", action="store_true")
    ns = p.parse_args(argv)
    try:
        command.check_out(ns.out, ns.force)
    except BadInputError as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    command.say_of(ns, "first-call")(f"{ns.rounds} rounds x {len(SIZES)} sizes (about a minute)")
    data = measure(ns.rounds, command.progress_of(ns, "first-call"))
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(data, indent=1) + "\n")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
