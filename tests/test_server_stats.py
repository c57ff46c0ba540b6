"""A running server's /stats as the programs that drive it read it: the forward passes
since a run began, with the API key, nothing from a server without /stats, and a
cluster's replicas combined into one reading."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from armory_client import PolicyClient
from server_harness import make_obs, running_server

from armory.server_stats import StatsReading, batches_since_now, combined, fetch_stats


def test_batches_count_from_the_call_on_and_keep_the_last_count() -> None:
    """Forward passes before the counter is made are not counted; one robot's requests
    one after another are one batch each; once the server is gone the last count stays."""
    with (
        running_server(api_key="s3cret") as server,
        PolicyClient("127.0.0.1", server.port, api_key="s3cret") as robot,
    ):
        uri = f"ws://127.0.0.1:{server.port}"
        robot.infer(make_obs(0))
        assert batches_since_now(uri, None) is None  # the key is needed
        num_batches = batches_since_now(uri, "s3cret")
        assert num_batches is not None
        assert num_batches() == 0
        robot.infer(make_obs(1))
        robot.infer(make_obs(2))
        assert num_batches() == 2
        reading = fetch_stats(uri, "s3cret")
        assert reading is not None and sum(reading.batch_size_counts.values()) == 3
    assert num_batches() == 2


def test_nothing_listening_has_no_stats() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert batches_since_now(f"ws://127.0.0.1:{port}", None) is None


def test_replicas_combine_into_one_reading() -> None:
    """Passes, decisions and errors add up; busy seconds and learned latencies are the
    mean per GPU; decision time is weighted by passes; added times are the highest."""
    one = StatsReading(
        batch_size_counts={1: 3, 2: 1},
        busy_s=2.0,
        overhead_ms_p50=1.0,
        overhead_ms_p99=4.0,
        decision_ms_mean=0.2,
        decision_cpu_ms_mean=0.1,
        num_errors=1,
        latency_points_s={1: 0.05, 2: 0.06},
        decisions_by_rule={"on-time": 4},
    )
    two = StatsReading(
        batch_size_counts={2: 4},
        busy_s=4.0,
        overhead_ms_p50=2.0,
        overhead_ms_p99=None,
        decision_ms_mean=0.5,
        decision_cpu_ms_mean=0.3,
        num_errors=0,
        latency_points_s={1: 0.07},
        decisions_by_rule={"on-time": 2, "wait": 5},
    )
    both = combined([one, two])
    assert both.batch_size_counts == {1: 3, 2: 5} and both.num_replicas == 2
    assert both.busy_s == pytest.approx(3.0)
    assert both.latency_points_s == pytest.approx({1: 0.06, 2: 0.06})
    assert both.decision_ms_mean == pytest.approx((0.2 * 4 + 0.5 * 4) / 8)
    assert both.decision_cpu_ms_mean == pytest.approx((0.1 * 4 + 0.3 * 4) / 8)
    # A replica that does not report processor time leaves the combined one unknown.
    old = dataclasses.replace(two, decision_cpu_ms_mean=None)
    assert combined([one, old]).decision_cpu_ms_mean is None
    assert (both.overhead_ms_p50, both.overhead_ms_p99) == (2.0, 4.0)
    assert both.decisions_by_rule == {"on-time": 6, "wait": 5} and both.num_errors == 1
