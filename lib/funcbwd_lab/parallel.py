"""Run a long sweep item by item on Dask distributed, one worker process per core.

:func:`map_items` maps a picklable top-level ``fn(item) -> record`` over ``items`` and returns
the records in the order of ``items``. It exists for sweeps in which a single item may raise,
kill its process (a segfault in a kernel) or hang: each of those becomes *that item's* failure
record, built by the caller's ``on_failure(item, reason, message)`` (default
:func:`failure_record`), and the sweep goes on:

* ``reason="error"``: ``fn`` raised (the message is ``Type: text`` plus the traceback's tail), or
  its result could not be sent back.
* ``reason="crash"``: the worker process died while running the item (``os._exit``, a segfault,
  the nanny's memory limit). A death can also take down an item that merely sat queued on that
  worker, so a crashed item is retried ``crash_retries`` times (default 1) on a fresh worker
  before it is recorded; only an item that kills a worker every time is a crash. An item that
  had finished but whose result died with its worker before it was fetched is simply rerun
  (up to ``MAX_LOST`` times), and so is an item the dead worker never started (on our own local
  cluster each item marks a file when it starts: an innocent item assigned to a worker that a
  neighbour's crash or a timeout's kill took down is not counted as a crash).
* ``reason="timeout"``: the item ran longer than ``timeout`` seconds (counted from when a
  worker took it; each worker first runs a warmup, by default importing ``fn``'s module, so
  imports are not charged to the first item). Its task is cancelled and
  its worker process killed (a thread cannot be stopped) and restarted by its nanny, so the
  hang costs one worker restart, not the sweep.

Where it runs: by default a ``distributed.LocalCluster`` of ``workers`` nanny-managed processes
with one thread each (and one BLAS/OpenMP/torch thread each), created for the call and always
closed, also when the call raises. ``scheduler="tcp://host:port"`` uses an existing cluster
instead (only the client is closed; its workers must be nanny-managed for timeouts to restart
them). Crash and timeout attribution assume a worker runs one item at a time: the local cluster
is created with ``worker-saturation`` 1.0 (the scheduler sends a worker only as many tasks as it
has threads) and ``allowed-failures`` 0 (the first death fails the task; :func:`map_items`
retries it itself); an external scheduler should be configured the same way, otherwise a timeout
counts from when the task was *assigned* to a worker.

``workers=0`` runs serially in this process with the same records for errors; a crash there
ends the process and timeouts are not enforced (the progress line says so).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Iterable, Sequence

from distributed.diagnostics.plugin import WorkerPlugin

from funcbwd.errors import BadInputError
from funcbwd_lab.progress import Progress

REASONS = ("error", "crash", "timeout")
DEFAULT_TIMEOUT_S = 600.0
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
WARMUP_PLUGIN = "funcbwd-warmup"
MAX_LOST = 3  # reruns of an item whose finished result died with its worker
_FAILED = "__funcbwd_item_failed__"


def failure_record(item: Any, reason: str, message: str) -> dict[str, Any]:
    """The default failure record: ``{"item", "status": "fail", "reason", "message"}``."""
    return {"item": item, "status": "fail", "reason": reason, "message": message}


def _describe(exc: BaseException, frames: int = 3) -> str:
    tail = "".join(traceback.format_tb(exc.__traceback__)[-frames:]).rstrip()
    head = f"{type(exc).__name__}: {exc}"
    return f"{head}\n{tail}" if tail else head


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    """``fn(item)``, an exception turned into a marker (so ``fn``'s errors never depend on how
    Dask ships exceptions)."""
    try:
        return fn(item)
    except Exception as e:  # noqa: BLE001 - every failure becomes the item's record
        return {_FAILED: True, "message": _describe(e)}


def run_item(fn: Callable[[Any], Any], item: Any, started: str | None = None) -> Any:
    """What a worker runs: :func:`_call` with one torch thread (if ``fn`` uses torch, the
    worker's first item imports it with ``OMP_NUM_THREADS=1``; later items are pinned here).
    ``started``: a file made before the item runs (a worker that dies before it was made did
    not die of this item)."""
    if started is not None:
        open(started, "w").close()
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    return _call(fn, item)


def _is_failure(result: Any) -> bool:
    return isinstance(result, dict) and result.get(_FAILED) is True


def default_warmup(fn: Callable[[Any], Any]) -> Callable[[], Any] | None:
    """Import the module that defines ``fn`` (through ``functools.partial``); None for
    ``__main__`` (cloudpickle ships those functions by value)."""
    module = getattr(getattr(fn, "func", fn), "__module__", None)
    if not module or module == "__main__":
        return None
    return functools.partial(importlib.import_module, module)


class Warmup(WorkerPlugin):
    """Runs ``warmup()`` once on every worker when it starts (restarted ones included), before
    it takes items, so slow imports are not charged to the first item's timeout."""

    def __init__(self, warmup: Callable[[], Any]) -> None:
        self.warmup = warmup

    def setup(self, worker: Any) -> None:
        self.warmup()


# ------------------------------------------------------------------------------ progress
def _progress(progress: bool | Progress, total: int, note: str = "") -> Progress:
    """The caller's :class:`funcbwd_lab.progress.Progress` (or one on stderr when ``progress`` is
    True, a silent one when False), counting ``total`` items; ``note`` is said once first."""
    bar = progress if isinstance(progress, Progress) else Progress("items", enabled=bool(progress))
    if note:
        bar(note)
    bar.start(total)
    return bar


# ------------------------------------------------------------------------------ entry point
def map_items(fn: Callable[[Any], Any], items: Iterable[Any], *, workers: int = 2,
              scheduler: str | None = None, timeout: float | None = DEFAULT_TIMEOUT_S,
              progress: bool | Progress = True,
              on_failure: Callable[[Any, str, str], Any] = failure_record,
              crash_retries: int = 1, warmup: Callable[[], Any] | None | str = "import",
              cluster_options: dict | None = None,
              on_result: Callable[[Any, Any], None] | None = None) -> list[Any]:
    """``[fn(item) for item in items]`` on Dask workers, each failing item replaced by
    ``on_failure(item, reason, message)`` (see the module docstring for the reasons).

    ``fn`` must be a picklable top-level function and return a picklable (JSON-like) record;
    ``on_failure`` runs here, in the caller's process. ``workers`` is the number of local worker
    processes (0 = serial, in-process); with ``scheduler`` it is ignored. ``progress``: a
    :class:`funcbwd_lab.progress.Progress` to count the items on, or True (one on stderr) / False. ``timeout`` is per item
    in seconds (None = none), counted from when a worker takes the item. ``warmup`` is a
    picklable no-argument callable every worker runs once at start (see :class:`Warmup`);
    the default imports ``fn``'s module, None skips it. ``cluster_options`` are extra
    ``LocalCluster`` arguments (e.g. ``memory_limit``).
    ``on_result(item, record)`` is called as each item's record arrives (success or failure
    record, in completion order): a caller saving records as they come can resume an
    interrupted sweep."""
    items = list(items)
    _check(fn, workers, scheduler, timeout, crash_retries)
    if warmup == "import":
        warmup = default_warmup(fn)
    elif warmup is not None and not callable(warmup):
        raise BadInputError(f"warmup must be a callable, None or 'import', got {warmup!r}")
    if scheduler is None and workers == 0:
        return _serial(fn, items, on_failure, progress, timeout, on_result)
    return _distributed(fn, items, workers, scheduler, timeout, progress, on_failure,
                        crash_retries, warmup, cluster_options or {}, on_result)


def _check(fn, workers, scheduler, timeout, crash_retries) -> None:
    if not callable(fn):
        raise BadInputError(f"fn must be a callable, got {type(fn).__name__}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise BadInputError(f"workers must be an int >= 0 (0 = serial), got {workers!r}")
    if scheduler is not None and (not isinstance(scheduler, str) or "://" not in scheduler):
        raise BadInputError(f"scheduler must be an address like 'tcp://host:8786', got "
                            f"{scheduler!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise BadInputError(f"timeout must be seconds > 0 or None, got {timeout!r}")
    if isinstance(crash_retries, bool) or not isinstance(crash_retries, int) or crash_retries < 0:
        raise BadInputError(f"crash_retries must be an int >= 0, got {crash_retries!r}")


def _serial(fn, items: Sequence[Any], on_failure, progress: bool | Progress,
            timeout: float | None, on_result=None) -> list[Any]:
    note = "serial, in this process" + ("; timeouts not enforced" if timeout is not None else "")
    bar = _progress(progress, len(items), note)
    out = []
    for item in items:
        bar.doing(str(item))
        result = _call(fn, item)  # the caller's process: its torch threads are left alone
        failed = _is_failure(result)
        out.append(on_failure(item, "error", result["message"]) if failed else result)
        if on_result is not None:
            on_result(item, out[-1])
        bar.advance(failed=failed)
    bar.close()
    return out


# ------------------------------------------------------------------------------ distributed
def _start(workers: int, scheduler: str | None, cluster_options: dict):
    """(client, cluster or None). The local cluster's scheduler gets the one-task-per-thread
    settings the failure attribution relies on."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        return Client(scheduler), None
    options = {"n_workers": workers, "threads_per_worker": 1, "processes": True,
               "host": "127.0.0.1", "silence_logs": logging.CRITICAL, "env": dict(THREAD_ENV),
               # no dashboard; the scheduler's HTTP endpoint on a free port, not 8787
               "dashboard_address": None, "scheduler_kwargs": {"dashboard_address": ":0"}}
    options.update(cluster_options)
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0,
                          "distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(**options)
        try:
            client = Client(cluster)
        except BaseException:
            cluster.close()
            raise
    return client, cluster


def _distributed(fn, items, workers, scheduler, timeout, progress, on_failure, crash_retries,
                 warmup, cluster_options, on_result=None) -> list[Any]:
    from distributed import wait
    from distributed.scheduler import KilledWorker

    results: list[Any] = [None] * len(items)
    bar = _progress(progress, len(items))
    client, cluster = _start(workers, scheduler, cluster_options)
    pending: dict[Any, tuple[int, int]] = {}  # future -> (item index, attempt)
    lost = [0] * len(items)
    # our own local workers share this directory: an item marks it when it starts, so a worker
    # dying before an item started (assigned, or its neighbour crashed) is not that item's crash
    marks = tempfile.TemporaryDirectory(prefix="funcbwd-started-") if cluster is not None else None
    try:
        if warmup is not None:
            client.register_plugin(Warmup(warmup), name=WARMUP_PLUGIN)

        def started(fut: Any) -> str | None:
            return None if marks is None else os.path.join(marks.name, fut.key)

        def submit(index: int, attempt: int) -> None:
            key = f"funcbwd-item-{index}-{attempt}-{os.urandom(4).hex()}"
            mark = None if marks is None else os.path.join(marks.name, key)
            fut = client.submit(run_item, fn, items[index], mark, pure=False, key=key)
            pending[fut] = (index, attempt)

        def finish(index: int, value: Any, failed: bool) -> None:
            results[index] = value
            if on_result is not None:
                on_result(items[index], value)
            bar.advance(failed=failed, label=str(items[index]))

        for i in range(len(items)):
            submit(i, 0)
        seen: dict[str, float] = {}  # task key -> when it was first seen running
        poll = 0.5 if timeout is None else min(0.5, timeout / 4)
        while pending:
            try:
                done, _ = wait(list(pending), timeout=poll, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for fut in done:
                index, attempt = pending.pop(fut)
                seen.pop(fut.key, None)
                item = items[index]
                if fut.status == "finished":
                    try:
                        value = fut.result()
                    except Exception as e:  # noqa: BLE001 - the result could not be sent back
                        finish(index, on_failure(item, "error", _describe(e)), True)
                        continue
                    if _is_failure(value):
                        finish(index, on_failure(item, "error", value["message"]), True)
                    else:
                        finish(index, value, False)
                elif fut.status == "error":
                    exc = fut.exception()
                    if isinstance(exc, KilledWorker):
                        mark = started(fut)
                        if mark is not None and not os.path.exists(mark) and lost[index] < MAX_LOST:
                            lost[index] += 1  # it never started: not its crash, run it again
                            submit(index, attempt)
                            continue
                        if attempt < crash_retries:
                            submit(index, attempt + 1)
                            continue
                        msg = (f"the worker process died while running this item "
                               f"({attempt + 1} attempt{'s' if attempt else ''}): {exc}")
                        finish(index, on_failure(item, "crash", msg), True)
                    else:
                        finish(index, on_failure(item, "error", _describe(exc)), True)
                elif fut.status == "lost" and lost[index] < MAX_LOST:
                    # it finished, but the worker holding its result died before we fetched
                    # it (e.g. the next item crashed that worker): run it again
                    lost[index] += 1
                    fut.cancel()
                    submit(index, attempt)
                else:  # cancelled from outside (e.g. the scheduler went away), or lost again
                    finish(index, on_failure(item, "error", f"task {fut.status}"), True)
            if timeout is not None and pending:
                _enforce_timeout(client, cluster, pending, seen, timeout, items, finish,
                                 on_failure)
    finally:
        bar.close()
        try:
            for fut in list(pending):
                fut.cancel()
            if cluster is None and warmup is not None:  # leave an external cluster as it was
                try:
                    client.unregister_worker_plugin(WARMUP_PLUGIN)
                except Exception:  # noqa: BLE001 - never registered (the call failed first)
                    pass
            client.close()
        finally:
            if cluster is not None:
                cluster.close()
            if marks is not None:
                marks.cleanup()
    return results


def _enforce_timeout(client, cluster, pending, seen, timeout, items, finish, on_failure) -> None:
    """Record items running longer than ``timeout`` as timed out; cancel their tasks and
    restart the workers running them."""
    now = time.monotonic()
    by_key = {fut.key: fut for fut in pending}
    running_on: dict[str, str] = {}
    for address, keys in client.processing().items():
        for key in keys:
            if key in by_key:
                running_on[key] = address
                seen.setdefault(key, now)
    overdue = [k for k, t0 in seen.items() if k in running_on and now - t0 > timeout]
    restart: set[str] = set()
    for key in overdue:
        fut = by_key[key]
        index, _ = pending.pop(fut)
        seen.pop(key)
        fut.cancel()
        restart.add(running_on[key])
        finish(index, on_failure(items[index], "timeout",
                                 f"still running after {timeout:g} s; its worker was killed"),
               True)
    for address in sorted(restart):
        _kill_worker(client, cluster, address)


def _kill_worker(client, cluster, address: str) -> None:
    """Stop a worker whose item hangs. A graceful restart would wait for the item's thread, so
    a worker of our own local cluster gets SIGKILL (its nanny, in this process, knows the pid
    and starts a fresh worker); an external one is asked to restart, bounded by 10 s (a hang
    that ignores that keeps the worker busy until it ends)."""
    import signal

    nanny = next((n for n in (cluster.workers.values() if cluster is not None else ())
                  if getattr(n, "worker_address", None) == address), None)
    pid = getattr(nanny, "pid", None)
    try:
        if pid:
            os.kill(int(pid), signal.SIGKILL)
        else:
            client.restart_workers([address], timeout=10, raise_for_error=False)
    except Exception:  # noqa: BLE001 - a worker that cannot be stopped only costs capacity
        pass
