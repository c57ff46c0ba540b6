"""The HTTP pages of observability on the openpi port: ``/metrics`` (Prometheus) and the
live dashboard (its page, script and style, shipped with the package: no CDN), plus the
WebSocket feed at ``/dashboard/live`` that pushes ``/stats`` to it twice a second."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from armory.observe.metrics import CONTENT_TYPE
from armory.transports.http import HttpAnswer, Page, stats_json

if TYPE_CHECKING:
    from armory.engine.server_engine import ServerEngine

METRICS_PATH = "/metrics"
DASHBOARD_PATH = "/dashboard"
LIVE_PATH = "/dashboard/live"
"""The dashboard's WebSocket: one JSON text frame of ``/stats`` per period."""
LIVE_PERIOD_S = 0.5
MAX_LIVE_VIEWERS = 32
"""Dashboards fed at once per server; counted apart from robots (``--server.max-connections``)."""

_ASSETS = {
    DASHBOARD_PATH: ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}


def observe_pages(engine: ServerEngine) -> dict[str, Page]:
    """The pages of an engine that keeps metrics (none when ``--server.metrics`` is off)."""
    metrics = engine.metrics
    if metrics is None:
        return {}
    static = resources.files("armory.observe") / "static"

    async def metrics_page() -> HttpAnswer:
        # Copied on the loop, formatted in a thread: a scrape never holds up the loop long.
        body = await asyncio.to_thread(metrics.exposition, engine.metrics_reading())
        return HttpAnswer(HTTPStatus.OK, body.decode(), content_type=CONTENT_TYPE)

    pages: dict[str, Page] = {METRICS_PATH: metrics_page}
    for path, (name, content_type) in _ASSETS.items():
        answer = HttpAnswer(
            HTTPStatus.OK,
            (static / name).read_text(encoding="utf-8"),
            content_type=content_type,
            headers=(("Cache-Control", "no-cache"),),
        )
        pages[path] = lambda answer=answer: answer
    return pages


def is_live_feed(path: str) -> bool:
    """Whether a WebSocket handshake's path asks for the dashboard's feed."""
    return path.split("?", 1)[0] == LIVE_PATH


async def serve_live_feed(
    ws: ServerConnection, stats: Callable[[], Any], *, period_s: float = LIVE_PERIOD_S
) -> None:
    """Send ``stats()`` as JSON every ``period_s`` until the browser closes the page (any
    frame it sends is ignored)."""
    try:
        while True:
            await ws.send(stats_json(stats))
            try:
                async with asyncio.timeout(period_s):
                    await ws.recv()
            except TimeoutError:
                pass
    except ConnectionClosed:
        return
