"""A running server's /stats as the programs that drive it read it: the forward passes
since a run began, with the API key, and nothing from a server without /stats."""

from __future__ import annotations

import socket

from armory_client import PolicyClient
from server_harness import make_obs, running_server

from armory.server_stats import batches_since_now, fetch_stats


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
