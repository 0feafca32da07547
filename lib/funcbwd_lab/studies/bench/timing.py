"""Timing on a shared machine: interleaved series, medians and noise, paired differences.

Two designs, both keeping every raw sample:

* **interleaved series** (:func:`run_interleaved`): each series is warmed up and calibrated once,
  then every round times each series once in a rotating order, so machine noise hits all alike;
  ratios are then ratios of medians of the same run;
* **paired differences** (:func:`run_paired`, :func:`paired_difference`): two arms of one
  callable (e.g. the same graph with hooks vs no-op hooks) timed back to back in many pairs,
  alternating which arm goes first; the per-pair differences get a distribution-free 95%
  interval for their median. A difference far below the noise of either arm's samples can still
  be resolved this way, and when it cannot be the interval says so (it spans zero).

Samples are seconds per call over ``number`` back-to-back calls (gc off, as ``timeit`` does) on
both clocks: ``thread_cpu`` (``time.thread_time``: immune to preemption by other processes) and
``wall``. Timings are never thresholds: nothing here passes or fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import statistics
import time
from typing import Any, Callable, Iterator, Sequence

from funcbwd.errors import first_line


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread for the block (the previous count restored after): timings
    that do not depend on how many cores the machine lends."""
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def div(a: float, b: float) -> float:
    """a / b, NaN when either is missing (NaN) or b is zero."""
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def rel_iqr(xs: Sequence[float]) -> float:
    """Interquartile range / median of the raw samples: the run's own noise level."""
    if len(xs) < 2:
        return math.nan
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return div(q3 - q1, statistics.median(xs))


def sample_once(fn: Callable[[], Any], number: int) -> dict[str, float]:
    """Seconds per call over ``number`` back-to-back calls on both clocks (gc off during the
    calls, as ``timeit`` does; no per-sample warm-up: :func:`calibrate` warms up once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(number):
            fn()
        c1, w1 = time.thread_time(), time.perf_counter()
    finally:
        if enabled:
            gc.enable()
    return {"thread_cpu": (c1 - c0) / number, "wall": (w1 - w0) / number}


def calibrate(fn: Callable[[], Any], target_s: float, max_number: int, clock: str = "thread_cpu") -> int:
    """Warm up ``fn`` (first calls trace, compile or register) and pick how many calls make one
    sample last about ``target_s``."""
    fn()
    once = max(sample_once(fn, 1)[clock], 1e-7)
    return max(1, min(max_number, int(target_s / once)))


@dataclasses.dataclass
class Timed:
    """One measured series: a callable, the context entered around each sample, its raw samples."""

    key: dict[str, Any]
    fn: Callable[[], Any]
    context: Callable[[], Any]
    rounds: int
    number: int = 0
    clock: str = "thread_cpu"
    samples: list[float] = dataclasses.field(default_factory=list)
    wall_samples: list[float] = dataclasses.field(default_factory=list)
    error: str = ""

    def add(self, sample: dict[str, float]) -> None:
        # nanoseconds are both clocks' resolution; more digits only bloat the JSON
        self.samples.append(round(sample[self.clock], 9))
        self.wall_samples.append(round(sample["wall"], 9))

    def record(self) -> dict[str, Any]:
        d = dict(self.key)
        d.update(number=self.number, clock=self.clock, samples=self.samples,
                 wall_samples=self.wall_samples, median=median(self.samples))
        if self.error:
            d["error"] = self.error
        return d


def run_interleaved(series: list[Timed], clock: str, target_s: float, max_number: int) -> None:
    """Calibrate every series, then for each round time each series once, rotating the order.
    A series whose calibration raises keeps the error and is not timed (recorded, not fatal)."""
    for s in series:
        s.clock = clock
        try:
            with s.context():
                s.number = calibrate(s.fn, target_s, max_number, clock)
        except Exception as e:  # noqa: BLE001 - a label that cannot run is recorded, not fatal
            s.error = f"{type(e).__name__}: {first_line(str(e))}"
    live = [s for s in series if not s.error]
    for r in range(max((s.rounds for s in live), default=0)):
        for s in live[r % len(live):] + live[:r % len(live)]:
            if r < s.rounds:
                with s.context():
                    s.add(sample_once(s.fn, s.number))


# ------------------------------------------------------------------------------ paired differences
def run_paired(fn: Callable[[], Any], arms: Sequence[Callable[[], Any]], pairs: int, target_s: float,
               max_number: int, clock: str = "thread_cpu") -> tuple[int, list[list[float]]]:
    """Time ``fn`` under each of two ``arms`` (contexts entered around, never inside, a sample)
    ``pairs`` times, the arms back to back in each pair and alternating which goes first.
    Returns (calls per sample, [samples of arm 0, samples of arm 1]) on ``clock``; sample ``i``
    of both arms belong to pair ``i``."""
    if len(arms) != 2:
        raise ValueError("run_paired takes exactly two arms")
    with arms[0]():
        number = calibrate(fn, target_s, max_number, clock)
    with arms[1]():
        fn()  # warm-up of the second arm
    out: list[list[float]] = [[], []]
    for i in range(pairs):
        for a in ((0, 1) if i % 2 == 0 else (1, 0)):
            with arms[a]():
                out[a].append(round(sample_once(fn, number)[clock], 9))
    return number, out


def median_interval(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of ``xs``: the order statistics
    ``(x_(k), x_(n-k+1))`` with the largest ``k`` whose coverage, ``1 - 2 P(Binomial(n, 1/2) < k)``,
    is at least ``confidence`` (the sign-test interval). NaNs if ``n`` is too small for it."""
    n = len(xs)
    s = sorted(xs)
    tail, k = 0.0, 0
    while k < n // 2:
        nxt = tail + math.comb(n, k) / 2 ** n  # P(B <= k)
        if 1 - 2 * nxt < confidence:
            break
        tail, k = nxt, k + 1
    if k == 0:
        return math.nan, math.nan
    return s[k - 1], s[n - k]


def paired_difference(a: Sequence[float], b: Sequence[float], scale: float = 1.0,
                      confidence: float = 0.95) -> dict[str, Any]:
    """The per-pair differences ``(a_i - b_i) * scale``: their median, mean, a ``confidence``
    interval for the median (:func:`median_interval`) and whether that interval excludes zero
    (``resolved``; when it spans zero the difference is below what this run's noise can show)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    d = [(x - y) * scale for x, y in zip(a, b)]
    lo, hi = median_interval(d, confidence)
    resolved = not math.isnan(lo) and (lo > 0 or hi < 0)
    return {"pairs": len(d), "median": median(d), "mean": statistics.fmean(d) if d else math.nan,
            "ci_low": lo, "ci_high": hi, "confidence": confidence, "resolved": resolved,
            "method": "median of per-pair differences; distribution-free (sign-test) interval"}

