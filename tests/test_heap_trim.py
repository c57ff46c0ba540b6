"""The server returns freed heap memory to the operating system every few seconds."""

from __future__ import annotations

import asyncio
import logging
import math
import platform
import threading
import time
from collections.abc import Callable

import pytest
from server_harness import make_mock

import armory.serve
from armory.engine.config import ServerConfig
from armory.engine.heap_trim import glibc_malloc_trim, trim_heap_every
from armory.serve import ArmoryServer, ServerThread


class CountingTrim:
    """A stand-in for ``malloc_trim`` that records the threads it was called on."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.threads: list[str] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.threads.append(threading.current_thread().name)
            if self.fail_first and len(self.threads) == 1:
                raise OSError("trim failed")

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.threads)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_trims_repeat_in_a_worker_thread_and_survive_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each trim runs off the event loop's thread; one that raises is logged and the next
    one still runs; cancelling the task stops them."""
    trim = CountingTrim(fail_first=True)

    async def main() -> None:
        task = asyncio.create_task(trim_heap_every(0.005, trim))
        while trim.calls < 3:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        loop_thread = threading.current_thread().name
        assert loop_thread not in trim.threads
        calls = trim.calls
        await asyncio.sleep(0.05)
        assert trim.calls == calls

    with caplog.at_level(logging.ERROR, logger="armory.engine.heap_trim"):
        asyncio.run(main())
    assert "returning freed heap memory failed" in caplog.text


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_malloc_trim_returns_freed_pages() -> None:
    """On glibc the real call is found and gives back free memory that the allocator
    keeps: 40 MB freed below blocks still in use."""
    trim = glibc_malloc_trim()
    assert trim is not None
    blocks = [bytearray(4096) for _ in range(20_000)]  # ~80 MB of heap blocks
    del blocks[:10_000]  # the older half: below the live half, not at the heap's top
    before_mb = resident_mb()
    trim()
    assert resident_mb() < before_mb - 20
    assert len(blocks) == 10_000


def test_the_server_trims_while_it_runs_and_stops_when_it_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ArmoryServer starts the periodic trim with the engine and stops it on stop."""
    trim = CountingTrim()
    monkeypatch.setattr(armory.serve, "glibc_malloc_trim", lambda: trim)
    server = ArmoryServer(
        make_mock(), ServerConfig(heap_trim_interval_s=0.01), host="127.0.0.1", port=0
    )
    with ServerThread(server):
        wait_for(lambda: trim.calls >= 2)
    calls = trim.calls
    time.sleep(0.05)
    assert trim.calls == calls


def test_no_trim_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``heap_trim_interval_s=None`` starts no periodic trim (with the option on, the same
    server starts one with its interval)."""
    started: list[float] = []

    async def record(interval_s: float, trim: Callable[[], None]) -> None:
        started.append(interval_s)
        await asyncio.Event().wait()  # until cancelled, as the real one

    monkeypatch.setattr(armory.serve, "glibc_malloc_trim", CountingTrim)
    monkeypatch.setattr(armory.serve, "trim_heap_every", record)
    switched_on = ArmoryServer(
        make_mock(), ServerConfig(heap_trim_interval_s=7.0), host="127.0.0.1", port=0
    )
    with ServerThread(switched_on):
        wait_for(lambda: bool(started))
    switched_off = ArmoryServer(
        make_mock(), ServerConfig(heap_trim_interval_s=None), host="127.0.0.1", port=0
    )
    with ServerThread(switched_off):
        time.sleep(0.1)  # a task created at start would have run its first step by now
    assert started == [7.0]


@pytest.mark.parametrize("interval_s", [0.0, -1.0, math.inf, math.nan])
def test_the_trim_interval_is_checked(interval_s: float) -> None:
    with pytest.raises(ValueError, match=r"--server\.heap-trim-interval-s must be > 0"):
        ServerConfig(heap_trim_interval_s=interval_s)
