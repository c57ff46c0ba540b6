"""Debian's Chromium, headless, driven over the Chrome DevTools protocol (a WebSocket)
for the dashboard's browser test. Works offline: every flag that would make the browser
reach the network at start-up is set, and its profile is a fresh folder."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from websockets.sync.client import ClientConnection, connect

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
_MAX_MESSAGE_BYTES = 64 * 2**20
"""Largest DevTools message taken (a full-page screenshot, base64)."""


def find_chromium() -> str | None:
    """The browser's path, or None when none is installed."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


class HeadlessChromium:
    """One headless browser with one page; stopped on exit."""

    def __init__(
        self, binary: str, profile_dir: Path, *, width: int = 1400, height: int = 900
    ) -> None:
        self._binary = binary
        self._profile_dir = profile_dir
        self._size = (width, height)
        self._process: subprocess.Popen[bytes] | None = None
        self._ws: ClientConnection | None = None
        self._stack = contextlib.ExitStack()
        self._session = ""
        self._ids = itertools.count(1)

    def __enter__(self) -> Self:
        width, height = self._size
        self._process = subprocess.Popen(
            [
                self._binary,
                *FLAGS,
                f"--user-data-dir={self._profile_dir}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            self._ws = self._stack.enter_context(
                connect(self._browser_url(), max_size=_MAX_MESSAGE_BYTES, open_timeout=10)
            )
            target = self._call("Target.createTarget", url="about:blank")["targetId"]
            attached = self._call("Target.attachToTarget", targetId=target, flatten=True)
            self._session = attached["sessionId"]
            self.call("Page.enable")
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stack.close()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def _browser_url(self, timeout_s: float = 30.0) -> str:
        """The browser's DevTools WebSocket, from the file Chromium writes once it listens."""
        assert self._process is not None
        marker = self._profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self._process.returncode}")
            if marker.exists():
                lines = marker.read_text().split()
                if len(lines) >= 2:
                    return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            time.sleep(0.1)
        raise TimeoutError(f"chromium did not open its DevTools port within {timeout_s} s")

    def _call(self, method: str, *, session: str | None = None, **params: Any) -> Any:
        assert self._ws is not None
        call_id = next(self._ids)
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        while True:
            answer = json.loads(self._ws.recv(timeout=30))
            if answer.get("id") != call_id:
                continue  # an event
            if "error" in answer:
                raise RuntimeError(f"{method} failed: {answer['error']}")
            return answer.get("result", {})

    def call(self, method: str, **params: Any) -> Any:
        """A DevTools command on the page."""
        return self._call(method, session=self._session, **params)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression on the page (JSON-serializable)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout_s: float = 30.0) -> Any:
        """Evaluate ``expression`` until it is truthy (one that raises, e.g. while the page
        loads, counts as false); its value."""
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return false; }} }})()"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(guarded)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression!r} stayed false for {timeout_s} s")

    def screenshot(self, path: Path) -> None:
        """The page as PNG."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))


def in_ci() -> bool:
    return os.environ.get("CI") == "true"
