"""The worker wire and arena: framing, array layout and views round-trip; the worker side
imports only the standard library and numpy."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from armory.workers import wire
from armory.workers.arena import Arena

SRC = Path(__file__).resolve().parents[1] / "src"


def test_frame_round_trip_over_a_socket() -> None:
    """Messages sent over a socketpair arrive equal, in order; EOF reads as None."""
    left, right = socket.socketpair()
    with left, right:
        messages = [{"op": "infer", "id": 1, "obs": [{"a": {"text": "pick"}}]}, {"op": "close"}]
        for message in messages:
            wire.send_message(left, message)
        left.shutdown(socket.SHUT_WR)
        assert [wire.recv_message(right) for _ in messages] == messages
        assert wire.recv_message(right) is None


def test_frames_refuse_oversized_and_non_object_bodies() -> None:
    """A header past the limit and a body that is not a JSON object are WireErrors."""
    with pytest.raises(wire.WireError, match="exceeds"):
        wire.body_length((wire.MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(wire.WireError, match="not an object"):
        wire.decode_body(b"[1, 2]")
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.decode_body(b"\x80abc")


def test_layout_round_trips_arrays_and_text_through_an_arena() -> None:
    """Every array lands aligned, key by key; views read back the same values and dtypes."""
    rng = np.random.default_rng(0)
    observations = [
        {
            "image": rng.integers(0, 256, (5, 7, 3), dtype=np.uint8),
            "state": rng.standard_normal(3).astype(np.float32),
            "task": f"task {i}",
            "scalar": np.float64(i),
        }
        for i in range(3)
    ]
    observations[1]["prefix"] = rng.standard_normal((2, 4)).astype(">f8")  # big-endian
    layout = wire.plan_layout(observations, start=10)
    assert all(offset % wire.ALIGN_BYTES == 0 for offset, _ in layout.placements)
    image_offsets = [refs["image"]["offset"] for refs in layout.observations]
    assert image_offsets == sorted(image_offsets)  # one key's arrays are neighbours
    arena = Arena.create(layout.num_bytes)
    try:
        for offset, array in layout.placements:
            arena.write(offset, array)
        refs = json.loads(json.dumps(layout.observations))  # what the worker receives
        for sent, entry in zip(observations, refs, strict=True):
            back = wire.read_observation(arena.buffer, entry)
            assert set(back) == set(sent)
            for key, value in sent.items():
                if isinstance(value, str):
                    assert back[key] == value
                else:
                    np.testing.assert_array_equal(back[key], value)
                    assert back[key].dtype == np.asarray(value).dtype
            del back
    finally:
        arena.close()
    assert not arena.path.exists()


def test_layout_refuses_objects_and_bad_references() -> None:
    """Object arrays and non-array values are refused by key; a reference past the arena
    or of an object dtype is a WireError."""
    with pytest.raises(wire.WireError, match="'x'"):
        wire.plan_layout([{"x": [1, 2]}])
    with pytest.raises(wire.WireError, match="'o'"):
        wire.plan_layout([{"o": np.array([object()])}])
    buffer = bytearray(64)
    with pytest.raises(wire.WireError, match="runs past"):
        wire.view_array(buffer, {"dtype": "<f4", "shape": [100], "offset": 0})
    with pytest.raises(wire.WireError, match="not a plain array"):
        wire.view_array(buffer, {"dtype": "|O", "shape": [1], "offset": 0})


def test_worker_side_imports_only_stdlib_and_numpy() -> None:
    """worker_main with the mock backend pulls in no tyro, websockets, msgpack, scipy,
    armory_client or server-side armory module; ``import armory`` stays light."""
    code = (
        "import sys, armory.workers.worker_main, armory.workers.backends.mock\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tyro', 'websockets', 'msgpack', 'scipy', 'armory_client', 'torch', 'PIL'))\n"
        "server = sorted(m for m in sys.modules if m.startswith('armory.') and "
        "not m.startswith('armory.workers'))\n"
        "print(mods, server)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "[] []"
