"""One fuzzing run: the server in a child process, a well-behaved robot at 20 Hz, N
hostile inputs through one door, then the checks (:meth:`FuzzReport.problems`).

The good robot is an Armory client (``PolicyClient``) on the openpi door asking for a
chunk every tick; its largest gap between two replies is the run's measure of harm.
The inputs are structure-aware mutations of the door's valid message (one in ten
frames also damaged byte-wise, one in fifty pure noise) or, with ``generate``, what a
property-based generator (:mod:`armory.fuzz.generate`) draws: each is a *feed*
handing inputs to the run's ``send``. After the inputs: the
server process must be alive, answer ``/healthz``, report no scheduling fault, and,
once the fuzzing sessions are gone, hold an RSS within 20% of its start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from armory.fuzz.doors import FAILURES, OUTCOMES, FuzzDoor, Wire, open_door, random_frame
from armory.fuzz.mutate import Mutator, mutate_bytes

SEND_TIMEOUT_S = 5.0
"""Longest a fuzzing client waits for one answer (the server's request timeout is 1 s)."""
MAX_GAP_S = 0.5
"""The good robot's largest gap between replies must stay under this."""
RSS_GROWTH = 0.2
"""The server's RSS after the run must be within this fraction of its start."""


@dataclass(frozen=True)
class FuzzReport:
    """What one run through one door found."""

    door: str
    num_inputs: int
    outcomes: dict[str, int]
    """Inputs per outcome (``armory.fuzz.doors.OUTCOMES``)."""
    first_failures: tuple[str, ...]
    """The first few failing inputs: outcome and a short description."""
    num_scheduler_faults: int
    """The server's count of scheduler exceptions."""
    num_good_replies: int
    num_good_errors: int
    good_max_gap_s: float
    """The good robot's largest time between two replies (or since the last one)."""
    good_gap_at_s: float
    """When that gap began, seconds after the fuzzing began."""
    inputs_during_gap: tuple[int, ...]
    """Feed positions (0-based) of the inputs in flight during that gap (the first 20):
    replay them alone with :func:`selected_feed` to tell a stall they cause from load."""
    load_at_gap: float
    """The machine's 1-minute load average sampled nearest that gap (other jobs included)."""
    healthz_ok: bool
    server_alive: bool
    rss_start_mb: float
    """The server's RSS after the warm-up inputs (before them if the run is shorter)."""
    rss_peak_mb: float
    rss_end_mb: float
    elapsed_s: float

    @property
    def num_failures(self) -> int:
        return sum(self.outcomes.get(name, 0) for name in FAILURES)

    def problems(self) -> list[str]:
        """Every check that failed, in words (empty: the run passed)."""
        out = []
        if not self.server_alive:
            out.append("the server process died")
        if not self.healthz_ok:
            out.append("/healthz did not answer")
        if self.num_failures:
            out.append(f"{self.num_failures} failing inputs: {list(self.first_failures)}")
        if self.num_scheduler_faults:
            out.append(f"{self.num_scheduler_faults} scheduler faults")
        if self.num_good_errors:
            out.append(f"the good robot got {self.num_good_errors} errors")
        if self.good_max_gap_s >= MAX_GAP_S:
            out.append(
                f"the good robot's largest gap was {self.good_max_gap_s:.3f} s, "
                f"{self.good_gap_at_s:.0f} s into the run (load average {self.load_at_gap:.1f}; "
                f"inputs in flight at positions {list(self.inputs_during_gap)})"
            )
        if self.rss_end_mb > (1 + RSS_GROWTH) * self.rss_start_mb:
            out.append(f"RSS grew from {self.rss_start_mb:.0f} to {self.rss_end_mb:.0f} MB")
        return out


# ---- the server ------------------------------------------------------------------


class ServerProcess:
    """``python -m armory.fuzz.server``: its ports, RSS, health and stats."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "armory.fuzz.server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the fuzzing server did not start")
        info = json.loads(line)
        self.ports: dict[str, int] = info["ports"]

    def alive(self) -> bool:
        return self.process.poll() is None

    def rss_mb(self) -> float:
        """Resident memory of the server process, MB (0 once it is gone)."""
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def get(self, path: str, timeout_s: float = 2.0) -> bytes | None:
        """An HTTP GET on the openpi port; None when it does not answer."""
        url = f"http://127.0.0.1:{self.ports['openpi']}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the answer's socket
            return None
        except OSError:
            return None

    def stats(self) -> dict[str, Any]:
        body = self.get("/stats")
        return {} if body is None else json.loads(body)

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def fuzz_server() -> Iterator[ServerProcess]:
    server = ServerProcess()
    try:
        yield server
    finally:
        server.stop()


# ---- the good robot ----------------------------------------------------------------


class GoodRobotProcess:
    """``python -m armory.fuzz.good_robot PORT``: its own process, so that the fuzzing
    clients never hold its interpreter lock; its reply times come back at the end
    (``time.monotonic`` is one clock for every process of the machine)."""

    def __init__(self, port: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "armory.fuzz.good_robot", str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reply_times_s: list[float] = []
        self.num_errors = 0
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            self.process.kill()
            raise RuntimeError("the good robot got no first reply")

    def kill(self) -> None:
        """Stop it without reading its record (the run failed)."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """Stop it and read its record."""
        out, _ = self.process.communicate(input="", timeout=4 * SEND_TIMEOUT_S)
        record = json.loads(out.strip().splitlines()[-1])
        self.reply_times_s = record["reply_times_s"]
        self.num_errors = record["num_errors"]

    def largest_gap(self, since_s: float, until_s: float) -> tuple[float, float]:
        """(seconds, start) of the largest time without a reply between ``since_s`` and
        ``until_s``."""
        times = [since_s, *(t for t in self.reply_times_s if since_s < t < until_s), until_s]
        gaps = np.diff(times)
        largest = int(np.argmax(gaps))
        return float(gaps[largest]), float(times[largest])


class SendLog:
    """When each input was in flight: its feed position and its send's start and end."""

    def __init__(self) -> None:
        self._positions = array("q")
        self._starts_s = array("d")
        self._ends_s = array("d")

    def add(self, position: int, start_s: float, end_s: float) -> None:
        self._positions.append(position)
        self._starts_s.append(start_s)
        self._ends_s.append(end_s)

    def during(self, from_s: float, to_s: float, limit: int = 20) -> tuple[int, ...]:
        """Positions of the inputs in flight at some time in ``[from_s, to_s]``."""
        starts = np.frombuffer(self._starts_s, dtype=np.float64)
        ends = np.frombuffer(self._ends_s, dtype=np.float64)
        hits = np.flatnonzero((starts <= to_s) & (ends >= from_s))
        positions = np.frombuffer(self._positions, dtype=np.int64)[hits]
        return tuple(int(p) for p in np.sort(positions)[:limit])


# ---- inputs ----------------------------------------------------------------------------


Send = Callable[[Any, Wire], None]
"""Sends one input (the message it encodes, described in the report only if it fails, and
its bytes) and records its outcome."""
Feed = Callable[[FuzzDoor, Send], None]
"""Produces a run's inputs for a door, handing each to ``send``."""


def mutation_feed(num_inputs: int, seed: int = 0) -> Feed:
    """Structure-aware mutations of the door's valid messages."""

    def feed(door: FuzzDoor, send: Send) -> None:
        rng = np.random.default_rng([seed, sum(map(ord, door.name))])
        mutator = Mutator(rng)
        for index in range(num_inputs):
            if rng.random() < 0.02:
                send(NOISE, Wire("observation", random_frame(rng)))
                continue
            valid = door.valid_message(index)
            message = valid if rng.random() < 0.05 else mutator.mutate(valid)
            try:
                wire = door.encode(message)
            except (TypeError, ValueError, OverflowError, RecursionError):
                wire = door.encode(valid)  # the encoding cannot carry it: damage the bytes
                wire = dataclasses.replace(wire, data=mutate_bytes(wire.data, rng))
            if rng.random() < 0.1:
                wire = dataclasses.replace(wire, data=mutate_bytes(wire.data, rng))
            send(message, wire)

    return feed


def selected_feed(feed: Feed, positions: Iterable[int]) -> Feed:
    """Only the inputs of ``feed`` at ``positions`` (0-based; the others are made, since a
    feed is one random stream, but not sent): a run's suspects replayed alone."""
    wanted = frozenset(positions)
    last = max(wanted, default=-1)

    def feed_selected(door: FuzzDoor, send: Send) -> None:
        position = 0

        def forward(message: Any, wire: Wire) -> None:
            nonlocal position
            if position in wanted:
                send(message, wire)
            position += 1
            if position > last:
                raise _Selected

        with contextlib.suppress(_Selected):
            feed(door, forward)

    return feed_selected


class _Selected(Exception):
    """The last selected input was sent: the feed stops."""


def chain_feeds(*feeds: Feed) -> Feed:
    """One feed after another, in one run."""

    def feed(door: FuzzDoor, send: Send) -> None:
        for each in feeds:
            each(door, send)

    return feed


NOISE = "noise"
"""What a feed hands ``send`` in place of a message for bytes that are no message."""


def describe(message: Any) -> str:
    """A message, in at most 160 characters, for the report."""
    text = NOISE if message is NOISE else repr(message)
    return text if len(text) <= 160 else text[:157] + "..."


def run_fuzz(
    door_name: str,
    feed: Feed,
    *,
    num_clients: int = 1,
    num_warmup_inputs: int = 200,
    progress: Callable[[int], None] | None = None,
) -> FuzzReport:
    """Send ``feed``'s inputs through door ``door_name`` beside the good robot, then check.
    ``num_clients`` fuzzing clients (each its own connection: its own robot to the door)
    take the inputs in turn, so that the door serves several hostile robots at once.
    The RSS baseline is taken after ``num_warmup_inputs`` inputs (thread pools, caches
    and allocator arenas grow once; the check is for what grows with the inputs)."""
    started_s = time.monotonic()
    with fuzz_server() as server:
        good = GoodRobotProcess(server.ports["openpi"])
        time.sleep(0.5)  # warm: the first batches, the learned profile
        rss_start = rss_peak = server.rss_mb()
        fuzz_from_s = time.monotonic()
        doors: list[FuzzDoor] = []
        try:
            port = server.ports[door_name]
            for _ in range(num_clients):
                doors.append(open_door(door_name, port, timeout_s=SEND_TIMEOUT_S))
        except BaseException:
            for door in doors:
                door.close()
            good.kill()
            raise
        outcomes: Counter[str] = Counter()
        failures: list[str] = []
        lock = threading.Lock()
        inputs = prefetched(feed, doors[0])
        died = threading.Event()
        errors: list[BaseException] = []
        sends = SendLog()
        loads: list[tuple[float, float]] = [(time.monotonic(), os.getloadavg()[0])]
        taken = 0

        def record(message: Any, outcome: str) -> None:
            nonlocal rss_start, rss_peak
            with lock:
                outcomes[outcome] += 1
                if outcome in FAILURES and len(failures) < 5:
                    failures.append(f"{outcome}: {describe(message)}")
                count = outcomes.total()
            if count == num_warmup_inputs:
                rss_start = server.rss_mb()
            if count % 500 == 0:
                rss_peak = max(rss_peak, server.rss_mb())
                loads.append((time.monotonic(), os.getloadavg()[0]))
                if progress is not None:
                    progress(count)

        def client(door: FuzzDoor) -> None:
            nonlocal taken
            try:
                while not died.is_set():
                    with lock:
                        item = next(inputs, None)
                        position, taken = taken, taken + 1
                    if item is None:
                        return
                    if not server.alive():
                        died.set()
                        return
                    start_s = time.monotonic()
                    outcome = door.send(item[1])
                    sends.add(position, start_s, time.monotonic())
                    record(item[0], outcome)
            except BaseException as exc:  # raised in the run's thread below
                errors.append(exc)
                died.set()

        threads = [
            threading.Thread(target=client, args=(door,), name=f"fuzz-client-{index}")
            for index, door in enumerate(doors)
        ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            with lock:
                inputs.close()
            for door in doors:
                door.close()
        if errors:
            raise errors[0]
        fuzz_until_s = time.monotonic()
        healthz_ok = server.get("/healthz") == b"OK\n"
        good.stop()
        gap_s, gap_from_s = good.largest_gap(fuzz_from_s, fuzz_until_s)
        time.sleep(3.0)  # the fuzzing sessions are swept
        stats = server.stats()
        rss_end = server.rss_mb()
        return FuzzReport(
            door=door_name,
            num_inputs=outcomes.total(),
            outcomes={name: outcomes.get(name, 0) for name in OUTCOMES},
            first_failures=tuple(failures),
            num_scheduler_faults=int(stats.get("num_scheduler_faults", -1)),
            num_good_replies=len(good.reply_times_s),
            num_good_errors=good.num_errors,
            good_max_gap_s=gap_s,
            good_gap_at_s=gap_from_s - fuzz_from_s,
            inputs_during_gap=sends.during(gap_from_s, gap_from_s + gap_s),
            load_at_gap=min(loads, key=lambda sample: abs(sample[0] - gap_from_s))[1],
            healthz_ok=healthz_ok,
            server_alive=server.alive(),
            rss_start_mb=rss_start,
            rss_peak_mb=max(rss_peak, rss_end),
            rss_end_mb=rss_end,
            elapsed_s=time.monotonic() - started_s,
        )


def prefetched(feed: Feed, door: FuzzDoor, depth: int = 64) -> Iterator[tuple[Any, Wire]]:
    """``feed``'s inputs, in order, made by a thread ahead of their sending: the next inputs
    are generated while the server answers the last one. Leaving the loop early stops the
    thread; an exception in the feed is raised here."""
    inputs: queue.Queue[tuple[Any, Wire] | _FeedEnd] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[Any, Wire] | _FeedEnd) -> None:
        while not stop.is_set():
            try:
                inputs.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _FeedStopped

    def produce() -> None:
        try:
            feed(door, lambda message, wire: put((message, wire)))
            put(_FeedEnd(None))
        except _FeedStopped:
            pass
        except BaseException as exc:  # handed to the consumer, raised there
            with contextlib.suppress(_FeedStopped):
                put(_FeedEnd(exc))

    thread = threading.Thread(target=produce, name="fuzz-feed", daemon=True)
    thread.start()
    try:
        while True:
            item = inputs.get()
            if isinstance(item, _FeedEnd):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        stop.set()
        thread.join()


@dataclass(frozen=True)
class _FeedEnd:
    """The feed is done (``error``: the exception that ended it)."""

    error: BaseException | None


class _FeedStopped(Exception):
    """The consumer left: the feed's thread ends."""
