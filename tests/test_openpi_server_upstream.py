"""The unmodified PyPI openpi-client (0.1.2, numpy<2) against an Armory server.

The client lives in its own venv, ``.venv-openpi`` (created by scripts/test.sh),
because it needs numpy<2; the test runs a small script there as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from server_harness import expected_actions, make_mock, running_server
from tls_certs import write_test_certificates

from armory.core.latency_profile import LinearProfileConfig
from armory.policies.base import conform_observation
from armory.serve import ServerThread

ROOT = Path(__file__).resolve().parents[1]
OPENPI_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"

# Builds the observation without a random generator, so both numpy versions agree.
_SCRIPT = """
import json, sys
import numpy as np
from openpi_client import websocket_client_policy

def image(offset):
    return ((np.arange(224 * 224 * 3) + offset) % 251).astype(np.uint8).reshape(224, 224, 3)

obs = {
    "observation/image": image(0),
    "observation/wrist_image": image(7),
    "observation/state": np.linspace(-1.0, 1.0, 8),  # float64, as openpi examples send
    "prompt": "pick up the fork",
}
policy = websocket_client_policy.WebsocketClientPolicy(
    host=sys.argv[3], port=int(sys.argv[1]), api_key=sys.argv[2]
)
metadata = policy.get_server_metadata()
replies = [policy.infer(obs) for _ in range(2)]
print(json.dumps({
    "numpy": np.__version__,
    "metadata_keys": sorted(metadata),
    "reply_keys": sorted(replies[1]),
    "server_timing": sorted(replies[1]["server_timing"]),
    "shape": list(replies[0]["actions"].shape),
    "dtype": str(replies[0]["actions"].dtype),
    "actions": [r["actions"].tolist() for r in replies],
}))
"""


def _observation() -> dict[str, object]:
    def image(offset: int) -> np.ndarray:
        return ((np.arange(224 * 224 * 3) + offset) % 251).astype(np.uint8).reshape(224, 224, 3)

    return {
        "observation/image": image(0),
        "observation/wrist_image": image(7),
        "observation/state": np.linspace(-1.0, 1.0, 8),
        "prompt": "pick up the fork",
    }


def _run_client(
    server: ServerThread, *, host: str = "127.0.0.1", ssl_cert_file: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The script in .venv-openpi against ``server`` (key ``upstream-key``); waits until the
    server has closed the client's session. ``ssl_cert_file`` goes to ``SSL_CERT_FILE``."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    if ssl_cert_file is not None:
        env["SSL_CERT_FILE"] = str(ssl_cert_file)
    done = subprocess.run(
        [str(OPENPI_PYTHON), "-c", _SCRIPT, str(server.port), "upstream-key", host],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    deadline = time.monotonic() + 5
    while server.stats().num_sessions and time.monotonic() < deadline:
        time.sleep(0.01)
    return done


needs_openpi_client = pytest.mark.skipif(
    not OPENPI_PYTHON.exists(),
    reason=".venv-openpi is absent: scripts/test.sh creates it (pip install openpi-client==0.1.2)",
)


@needs_openpi_client
def test_unmodified_openpi_client_round_trips() -> None:
    """openpi-client 0.1.2 reads the metadata and gets the chunk of its own observation."""
    policy = make_mock()
    with running_server(policy, api_key="upstream-key") as server:
        done = _run_client(server)
        stats = server.stats()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["numpy"].startswith("1.")
    assert {"action_horizon", "action_dim", "inputs", "armory"} <= set(result["metadata_keys"])
    assert result["reply_keys"] == ["actions", "policy_timing", "server_timing"]
    assert result["server_timing"] == ["infer_ms", "prev_total_ms", "queue_ms"]
    assert result["shape"] == [10, 7] and result["dtype"] == "float32"
    inputs = policy.metadata.inputs
    expected = expected_actions(policy, conform_observation(_observation(), inputs))
    for actions in result["actions"]:
        np.testing.assert_array_equal(np.asarray(actions, dtype=np.float32), expected)
    assert stats.num_replies == 2 and stats.num_errors == 0


@needs_openpi_client
def test_unmodified_openpi_client_over_wss(tmp_path: Path) -> None:
    """openpi-client 0.1.2, given ``wss://`` and the CA in SSL_CERT_FILE, round-trips over
    TLS with its API key; without that trust it is refused at the TLS handshake."""
    certs = write_test_certificates(tmp_path)
    policy = make_mock()
    with running_server(
        policy,
        api_key="upstream-key",
        tls_cert_file=str(certs.cert_file),
        tls_key_file=str(certs.key_file),
    ) as server:
        assert server.uri.startswith("wss://")
        untrusted = _run_client(server, host="wss://127.0.0.1")
        done = _run_client(server, host="wss://127.0.0.1", ssl_cert_file=certs.ca_file)
        plaintext = _run_client(server, host="ws://127.0.0.1", ssl_cert_file=certs.ca_file)
        stats = server.stats()
    assert untrusted.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    assert plaintext.returncode != 0
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    expected = expected_actions(policy, conform_observation(_observation(), policy.metadata.inputs))
    for actions in result["actions"]:
        np.testing.assert_array_equal(np.asarray(actions, dtype=np.float32), expected)
    assert stats.num_replies == 2


# Robots that run openpi's own ActionChunkBroker: each asks for a chunk only once it has
# played the last one out, at 20 Hz, for the seconds given.
_BROKER_SCRIPT = """
import sys, threading, time
import numpy as np
from openpi_client import action_chunk_broker, websocket_client_policy

port, key, num_robots, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
obs = {
    "observation/image": np.zeros((224, 224, 3), np.uint8),
    "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
    "observation/state": np.zeros(8),
    "prompt": "pick up the fork",
}

def robot():
    policy = websocket_client_policy.WebsocketClientPolicy(
        host="127.0.0.1", port=port, api_key=key
    )
    broker = action_chunk_broker.ActionChunkBroker(policy, action_horizon=10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        broker.infer(obs)
        time.sleep(0.05)

threads = [threading.Thread(target=robot) for _ in range(num_robots)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


@needs_openpi_client
def test_unmodified_openpi_runtimes_over_capacity_wait_dry_as_the_optimum_shares() -> None:
    """Eight robots on openpi's ActionChunkBroker (a chunk of 10 asked for once the last
    is played out, 20 Hz: 16 chunks a second) share a GPU that computes about 13 (pairs
    in 0.15 s). Such a robot's observation is taken dry and its runtime cannot ask
    earlier, so over capacity the default serves it the fluid optimum's share by a dry
    wait (`fluid-share`) rather than ranking the robots by what a chunk adds."""
    policy = make_mock(linear=LinearProfileConfig(intercept_s=0.05, slope_s=0.05))
    with running_server(policy, api_key="upstream-key", max_batch_size=2) as server:
        done = subprocess.run(
            [str(OPENPI_PYTHON), "-c", _BROKER_SCRIPT, str(server.port), "upstream-key", "8", "4"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        stats = server.stats()
    assert done.returncode == 0, done.stderr
    assert stats.num_errors == 0
    assert stats.decisions_by_rule.get("fluid-share", 0) > 0
    assert stats.decisions_by_rule.get("overload", 0) == 0
