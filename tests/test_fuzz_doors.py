"""Fuzzing each door beside a well-behaved robot (a bounded number of inputs per door:
structure-aware mutations, then messages a property-based generator draws).

Each run starts the server in a child process with all three doors, the good robot in
another, and checks: no crash, no scheduling fault, every input answered (GR00T: every
request gets its reply), the good robot's largest gap under 0.5 s, ``/healthz``
answering, and the server's RSS after the run within 20% of its start. benchmarks/
fuzz.py runs the same harness with a million inputs per door.
"""

from __future__ import annotations

import pytest

from armory.fuzz.doors import DOORS, Wire
from armory.fuzz.generate import generated_feed
from armory.fuzz.harness import chain_feeds, mutation_feed, run_fuzz

NUM_MUTATIONS = 200
NUM_GENERATED = 80


@pytest.mark.parametrize("door", DOORS)
def test_fuzzing_a_door_hurts_nobody(door: str) -> None:
    """Hostile inputs through one door from two robots at once: the checks of
    FuzzReport.problems all hold, and every input is sent once."""
    report = run_fuzz(
        door,
        chain_feeds(mutation_feed(NUM_MUTATIONS, seed=1), generated_feed(NUM_GENERATED, seed=1)),
        num_clients=2,
        num_warmup_inputs=100,
    )
    assert report.problems() == []
    assert report.num_inputs == NUM_MUTATIONS + NUM_GENERATED
    assert report.outcomes["refused"] > 0
    assert report.num_good_replies > 0
    assert report.good_gap_at_s >= 0 and report.load_at_gap >= 0


def test_prefetched_feed_keeps_order_and_raises_the_feeds_error() -> None:
    """The feed's thread hands inputs over in order; its exception reaches the consumer;
    leaving early stops the thread."""
    from armory.fuzz.harness import prefetched

    def feed(door, send):  # type: ignore[no-untyped-def]
        for index in range(200):
            send(index, Wire("frame", bytes([index % 256])))
        raise ValueError("feed broke")

    items = prefetched(feed, door=None, depth=4)  # type: ignore[arg-type]
    received = []
    with pytest.raises(ValueError, match="feed broke"):
        for message, _ in items:
            received.append(message)
    assert received == list(range(200))

    early = prefetched(feed, door=None, depth=4)  # type: ignore[arg-type]
    assert [next(early)[0] for _ in range(3)] == [0, 1, 2]
    early.close()  # joins the feed's thread, which would otherwise block on a full queue


def test_selected_feed_sends_the_same_inputs_at_their_positions() -> None:
    """Replaying positions of a run sends exactly the inputs the run sent there, across
    the mutation and the generated part of the feed."""
    from armory.fuzz.doors import OpenpiDoor
    from armory.fuzz.harness import selected_feed

    door = OpenpiDoor(1, timeout_s=1.0)  # never connected: only its messages are used
    feed = chain_feeds(mutation_feed(40, seed=3), generated_feed(40, seed=3))
    everything: list[bytes] = []
    feed(door, lambda message, wire: everything.append(wire.data))
    positions = [3, 17, 45, 60]
    chosen: list[bytes] = []
    selected_feed(feed, positions)(door, lambda message, wire: chosen.append(wire.data))
    assert chosen == [everything[p] for p in positions]


def test_send_log_names_the_inputs_in_flight_during_a_window() -> None:
    """An input counts when its send overlaps the window at all."""
    from armory.fuzz.harness import SendLog

    log = SendLog()
    for position, (start_s, end_s) in enumerate([(0.0, 1.0), (1.0, 2.5), (2.0, 3.0), (4.0, 5.0)]):
        log.add(position, start_s, end_s)
    assert log.during(2.2, 3.5) == (1, 2)
    assert log.during(3.2, 3.8) == ()
    assert log.during(0.0, 10.0, limit=3) == (0, 1, 2)
