"""funcbwd_lab.parallel: the Dask engine for long sweeps.

Real local clusters (2 worker processes): results equal the serial path and come back in item
order; an item that raises, one that kills its worker (``os._exit``, a segfault) and one that
hangs each become that item's failure record while the others complete; no cluster or worker
process outlives a call, also when the call raises.
"""

from __future__ import annotations

import ctypes
import os
import time

import distributed
import psutil
import pytest

from funcbwd import BadInputError
from funcbwd_lab.parallel import WARMUP_PLUGIN, failure_record, map_items

TIMEOUT_S = 4.0


# Top-level so workers can import them by name.
def slow_square(x: int) -> dict:
    """Later items finish first, so in-order results are not an accident of timing."""
    time.sleep(0.05 * (6 - x) if x < 6 else 0)
    return {"item": x, "status": "pass", "value": x * x}


def misbehave(item: str) -> dict:
    if item == "raise":
        raise ValueError("bad item")
    if item == "exit":
        os._exit(1)
    if item == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if item == "hang":
        time.sleep(120)
    return {"item": item, "status": "pass", "value": len(item)}


def square_where(x: int) -> dict:
    return {**slow_square(x), "pid": os.getpid()}


WARMED: list[str] = []


def record_warmup() -> None:
    WARMED.append("warm")


def _children() -> list:
    """Live descendant processes, except multiprocessing's resource tracker (one per parent
    process, started with its first spawned child and kept until the parent exits)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and not any(
                    "resource_tracker" in part for part in p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _no_processes_left(deadline_s: float = 10.0) -> bool:
    end = time.monotonic() + deadline_s
    while _children() and time.monotonic() < end:
        time.sleep(0.2)
    return not _children()


def _no_client() -> bool:
    try:
        distributed.default_client()
    except ValueError:
        return True
    return False


@pytest.fixture(autouse=True)
def _clean_process_tree():
    assert _no_processes_left(), f"processes before the test: {_children()}"
    yield
    assert _no_processes_left(), f"left running: {[p.cmdline()[:3] for p in _children()]}"
    assert _no_client(), "a distributed Client is still open"


def test_local_workers_match_serial_in_item_order():
    items = list(range(8))
    expected = [{"item": x, "status": "pass", "value": x * x} for x in items]
    serial = map_items(square_where, items, workers=0, progress=False)
    local = map_items(square_where, items, workers=2, progress=False)
    assert [{k: v for k, v in r.items() if k != "pid"} for r in serial] == expected
    assert [{k: v for k, v in r.items() if k != "pid"} for r in local] == expected
    assert {r["pid"] for r in serial} == {os.getpid()}
    pids = {r["pid"] for r in local}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # ran in the worker processes


def test_raise_crash_segfault_and_hang_become_failure_records():
    items = ["a", "raise", "bb", "exit", "segfault", "hang", "ccc"]
    hooked = []

    def on_failure(item, reason, message):
        hooked.append(item)
        return failure_record(item, reason, message)

    start = time.monotonic()
    out = map_items(misbehave, items, workers=2, timeout=TIMEOUT_S, progress=False,
                    on_failure=on_failure, crash_retries=0)
    elapsed = time.monotonic() - start
    by_item = dict(zip(items, out))
    for ok in ("a", "bb", "ccc"):
        assert by_item[ok] == {"item": ok, "status": "pass", "value": len(ok)}
    assert by_item["raise"]["reason"] == "error"
    assert by_item["raise"]["message"].startswith("ValueError: bad item")
    assert "misbehave" in by_item["raise"]["message"]  # the traceback's tail
    for crash in ("exit", "segfault"):
        assert by_item[crash]["reason"] == "crash", by_item[crash]
        assert "died" in by_item[crash]["message"] and "1 attempt)" in by_item[crash]["message"]
    assert by_item["hang"]["reason"] == "timeout"
    assert f"{TIMEOUT_S:g} s" in by_item["hang"]["message"]
    assert all(r["status"] == "fail" for i, r in by_item.items() if i not in ("a", "bb", "ccc"))
    assert sorted(hooked) == sorted(["raise", "exit", "segfault", "hang"])
    assert elapsed < 120 - 10, "the hang was not cut short"


def test_a_crash_is_retried_once_by_default_before_it_is_recorded():
    out = map_items(misbehave, ["exit", "a"], workers=2, timeout=TIMEOUT_S, progress=False)
    assert out[0]["reason"] == "crash" and "(2 attempts)" in out[0]["message"]
    assert out[1] == {"item": "a", "status": "pass", "value": 1}


def test_serial_path_records_errors_and_says_timeouts_are_not_enforced(capsys):
    out = map_items(misbehave, ["a", "raise"], workers=0, timeout=0.001, progress=True)
    assert out[0]["status"] == "pass"
    assert out[1] == failure_record("raise", "error", out[1]["message"])
    assert out[1]["message"].startswith("ValueError: bad item")
    err = capsys.readouterr().err
    assert "items 2/2 100%, 1 failed" in err and "timeouts not enforced" in err


def test_cluster_is_closed_when_the_caller_raises():
    def exploding_hook(item, reason, message):
        raise RuntimeError(f"hook refused {item}")

    with pytest.raises(RuntimeError, match="hook refused raise"):
        map_items(misbehave, ["a", "raise"], workers=2, progress=False,
                  on_failure=exploding_hook)
    # the autouse fixture checks that no worker process is left


def test_existing_scheduler_is_used_and_left_running():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        WARMED.clear()
        out = map_items(slow_square, [1, 2, 3], scheduler=cluster.scheduler_address,
                        progress=False, warmup=record_warmup)
        assert [r["value"] for r in out] == [1, 4, 9]
        assert WARMED == ["warm"]  # the in-process worker ran the warmup once
        assert cluster.status.name == "running"
        assert WARMUP_PLUGIN not in cluster.scheduler.worker_plugins  # and it was removed


@pytest.mark.parametrize("kwargs, match", [
    ({"workers": -1}, "workers must be an int >= 0"),
    ({"workers": 1.5}, "workers must be an int >= 0"),
    ({"timeout": 0}, "timeout must be seconds > 0"),
    ({"scheduler": "localhost"}, "scheduler must be an address"),
    ({"crash_retries": -1}, "crash_retries must be an int >= 0"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(BadInputError, match=match):
        map_items(slow_square, [1], progress=False, **kwargs)
    with pytest.raises(BadInputError, match="fn must be a callable"):
        map_items("slow_square", [1], workers=0)


def _exit_counting(item: str) -> dict:
    """Dies on "exit", after appending a line to the file named by the item's suffix."""
    name, _, log = item.partition(":")
    with open(log, "a") as f:
        f.write(name + "\n")
    if name == "exit":
        os._exit(1)
    return {"item": name, "status": "pass", "value": len(name)}


def test_a_crash_runs_once_with_no_retries_and_an_item_marks_its_start(tmp_path):
    # the start marker is what tells a crashing item (marked: recorded at once with
    # crash_retries=0) from an innocent one its worker took down before it started (rerun); a
    # run_item that marked nothing would rerun the crashing item too
    from funcbwd_lab.parallel import run_item

    log = tmp_path / "runs.txt"
    out = map_items(_exit_counting, [f"exit:{log}", f"ok:{log}"], workers=1,
                    timeout=TIMEOUT_S, progress=False, on_failure=failure_record,
                    crash_retries=0)
    assert out[0]["reason"] == "crash" and out[1]["status"] == "pass"
    assert log.read_text().splitlines().count("exit") == 1
    mark = tmp_path / "started"
    assert run_item(misbehave, "raise", str(mark))["message"].startswith("ValueError")
    assert mark.exists()  # made before the item ran (and raised)
