"""An OpenGL platform for MuJoCo's offscreen renderer on a machine without a display.

MuJoCo picks its OpenGL platform once, when it is imported, from ``MUJOCO_GL``; unset,
it tries GLFW, which needs a display. A headless machine (CI, a server) renders with
EGL (a GPU's driver, or Mesa's software renderer: Debian's ``libegl1``,
``libegl-mesa0``, ``libgl1-mesa-dri``) or OSMesa (Mesa's software renderer: Debian's
``libosmesa6``). :func:`configure_headless_gl` chooses one before MuJoCo is imported
and sets ``MUJOCO_GL`` in this process's environment, which the robot processes it
starts inherit. A ``MUJOCO_GL`` the user set is kept.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path

EGL_PACKAGES = ("libegl1", "libegl-mesa0", "libgl1-mesa-dri")
"""Debian packages of EGL with Mesa's software renderer (a GPU driver brings its own)."""
OSMESA_PACKAGES = ("libosmesa6",)
"""Debian package of OSMesa."""
EGL_VENDOR_DIRS = (Path("/usr/share/glvnd/egl_vendor.d"), Path("/etc/glvnd/egl_vendor.d"))
"""Where libglvnd's EGL looks for drivers (Mesa's, NVIDIA's); without one it has none."""


class HeadlessGLError(RuntimeError):
    """No OpenGL platform can render here; the message says what to install or set."""


def choose_gl(
    environ: MutableMapping[str, str],
    *,
    find_library: Callable[[str], str | None] = ctypes.util.find_library,
    egl_vendor_dirs: tuple[Path, ...] = EGL_VENDOR_DIRS,
) -> str | None:
    """The ``MUJOCO_GL`` to render with: the one set; None with a display (MuJoCo's own
    choice, GLFW); else ``egl`` when libEGL and an EGL driver are installed, ``osmesa``
    when libOSMesa is; None when neither is."""
    chosen = environ.get("MUJOCO_GL", "").strip()
    if chosen:
        return chosen
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    has_vendor = any(d.is_dir() and any(d.glob("*.json")) for d in egl_vendor_dirs)
    if find_library("EGL") and has_vendor:
        return "egl"
    if find_library("OSMesa"):
        return "osmesa"
    return None


def configure_headless_gl(
    environ: MutableMapping[str, str] | None = None,
    *,
    find_library: Callable[[str], str | None] = ctypes.util.find_library,
    egl_vendor_dirs: tuple[Path, ...] = EGL_VENDOR_DIRS,
    renders_with_mujoco: bool = True,
) -> str | None:
    """Called before an environment that renders with MuJoCo is made: sets ``MUJOCO_GL``
    as :func:`choose_gl` says and returns it (None: a display, MuJoCo chooses).

    Raises HeadlessGLError naming the Debian packages when a headless machine has no
    platform, or, when the environment renders through MuJoCo's own context
    (``renders_with_mujoco``), when MuJoCo was imported before a platform was chosen (it
    keeps the one it found then): set ``MUJOCO_GL`` before starting Python. robosuite
    (LIBERO) makes its own context from ``MUJOCO_GL`` when it is imported, whatever
    platform an imported MuJoCo holds.
    """
    environ = os.environ if environ is None else environ
    headless = not (environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))
    chosen = choose_gl(environ, find_library=find_library, egl_vendor_dirs=egl_vendor_dirs)
    if chosen is None and headless:
        raise HeadlessGLError(
            "no OpenGL platform to render MuJoCo's camera without a display: install EGL "
            f"({' '.join(EGL_PACKAGES)}) or OSMesa ({' '.join(OSMESA_PACKAGES)}), e.g. "
            "`apt-get install libosmesa6` (scripts/test.sh does as root), or set MUJOCO_GL"
        )
    if chosen is None:
        return None
    loaded = _loaded_platform()
    if renders_with_mujoco and loaded is not None and headless and loaded != chosen:
        raise HeadlessGLError(
            f"MuJoCo was imported with the OpenGL platform {loaded!r} before {chosen!r} was "
            f"chosen; start Python with MUJOCO_GL={chosen} set"
        )
    environ["MUJOCO_GL"] = chosen
    return chosen


def _loaded_platform() -> str | None:
    """The platform of an already imported MuJoCo (``egl``, ``osmesa``, ``glfw``), or None
    when MuJoCo is not imported yet."""
    if "mujoco" not in sys.modules:
        return None
    context = getattr(sys.modules["mujoco"], "GLContext", None)
    module = getattr(context, "__module__", "") or ""
    return module.removeprefix("mujoco.").split(".")[0] or None
