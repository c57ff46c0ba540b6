"""One worker process, seen from the server: start, talk with a deadline, kill.

The worker runs ``<python> -m armory.workers.worker_main`` in its own session (a
Ctrl-C meant for the server does not reach it; the server stops it), with
``PYTHONPATH`` set to a directory holding only Armory's package, so an interpreter of
another Python version sees none of the server's site-packages. The control socket
is one end of a ``socketpair`` passed as an inherited descriptor; stdout and stderr go
to a pipe that a thread copies to the log and keeps the last lines of, for error
messages.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import armory
from armory.workers import wire

logger = logging.getLogger(__name__)

_TAIL_LINES = 40
_STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class WorkerSpec:
    """How to start one worker."""

    python: str
    """Interpreter that runs the worker (needs numpy and the backend's libraries)."""
    backend: str
    """Backend name (``mock``, ``lerobot``)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The backend's options (JSON-able), passed on the command line."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables of the worker."""
    name: str = "worker"
    """Label in logs and error messages."""


class WorkerGone(Exception):
    """The worker's end of the connection closed: it exited or was killed."""


class WorkerTimeout(Exception):
    """No message came before the deadline."""


class WorkerProcess:
    """A started worker. Not thread-safe: one caller at a time (the executor's thread)."""

    def __init__(self, spec: WorkerSpec) -> None:
        """Start the process now (returns at once; the worker builds its backend meanwhile).
        Raises OSError when the interpreter cannot be run."""
        self.spec = spec
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._pythonpath = _package_path()
        ours, theirs = socket.socketpair()
        self.sock = ours
        command = [
            spec.python,
            "-m",
            "armory.workers.worker_main",
            "--fd",
            str(theirs.fileno()),
            "--backend",
            spec.backend,
            "--options",
            json.dumps(dict(spec.options)),
        ]
        env = {**os.environ, **spec.env, "PYTHONPATH": str(self._pythonpath)}
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("PYTHONHOME", None)
        try:
            self.popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
                env=env,
                start_new_session=True,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        assert self.popen.stdout is not None
        self._reader = threading.Thread(
            target=self._copy_output,
            args=(self.popen.stdout,),
            name=f"armory-{spec.name}-log",
            daemon=True,
        )
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    # ---- talking -------------------------------------------------------------

    def send(self, message: Mapping[str, Any]) -> None:
        """Send one control message; WorkerGone when the worker is no longer there."""
        try:
            self.sock.settimeout(None)
            wire.send_message(self.sock, message)
        except OSError as exc:
            raise WorkerGone(str(exc)) from None

    def receive(self, timeout_s: float | None) -> dict[str, Any]:
        """The next control message within ``timeout_s`` seconds (None: wait for ever).

        WorkerTimeout when none came in time (the connection is then out of step: kill
        the worker); WorkerGone when the worker closed its end.
        """
        self.sock.settimeout(timeout_s)
        try:
            message = wire.recv_message(self.sock)
        except TimeoutError:
            raise WorkerTimeout(f"no answer within {timeout_s:.1f} s") from None
        except (OSError, wire.WireError) as exc:
            raise WorkerGone(str(exc)) from None
        if message is None:
            raise WorkerGone("the worker closed the connection")
        return message

    # ---- ending --------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the worker (and anything it started in its session) and reap it."""
        if self.alive:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.popen.kill()
        self._reap(timeout_s=_STOP_GRACE_S)

    def stop(self, grace_s: float = _STOP_GRACE_S) -> None:
        """Ask the worker to close, wait ``grace_s`` seconds, then kill it."""
        if self.alive:
            with contextlib.suppress(WorkerGone):
                self.send({"op": "close"})
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                logger.warning("%s did not stop within %.1f s; killing it", self.spec.name, grace_s)
        self.kill()

    def exit_reason(self, wait_s: float = 2.0) -> str:
        """``exit code 1``, ``killed by SIGKILL``, or ``still running`` (waits up to
        ``wait_s`` seconds for a dying process)."""
        try:
            code = self.popen.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def output_tail(self, num_lines: int = 15) -> str:
        """The worker's last ``num_lines`` lines of stdout/stderr (after it exited, all of
        them have been read)."""
        if not self.alive:
            self._reader.join(timeout=2.0)
        return "\n".join(list(self._tail)[-num_lines:])

    def _reap(self, timeout_s: float) -> None:
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.error(
                "%s (pid %d) survived SIGKILL for %.1f s", self.spec.name, self.pid, timeout_s
            )
        self.sock.close()
        self._reader.join(timeout=2.0)
        if self.popen.stdout is not None and not self._reader.is_alive():
            self.popen.stdout.close()

    def _copy_output(self, stream: IO[bytes]) -> None:
        prefix = f"[{self.spec.name} {self.popen.pid}]"
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            self._tail.append(line)
            logger.info("%s %s", prefix, line)


def describe_failure(process: WorkerProcess, what: str) -> str:
    """``what`` with the worker's exit reason and its last lines of output."""
    reason = process.exit_reason()
    tail = process.output_tail()
    text = f"{what} ({reason})"
    return f"{text}; its last output:\n{tail}" if tail else text


_shim_lock = threading.Lock()
_shim_dir: Path | None = None


def _package_path() -> Path:
    """A directory whose only importable entry is Armory's package: its parent when that
    is a source tree (``src/``), else a temporary directory holding a link to it (so a
    worker of another Python version never sees the server's site-packages)."""
    global _shim_dir
    package = Path(armory.__file__).resolve().parent
    parent = package.parent
    if parent.name not in ("site-packages", "dist-packages"):
        return parent
    with _shim_lock:
        if _shim_dir is None or not (_shim_dir / "armory").exists():
            _shim_dir = Path(tempfile.mkdtemp(prefix="armory-path-"))
            (_shim_dir / "armory").symlink_to(package, target_is_directory=True)
        return _shim_dir
