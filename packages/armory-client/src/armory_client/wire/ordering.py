"""Keeping overlapping (pipelined) requests in order: each waits for the one before."""

from __future__ import annotations

import asyncio
from typing import Any


async def after(earlier: asyncio.Future[Any] | None) -> None:
    """Wait until ``earlier`` (the step of the request before) is done; at once when it
    is, or when there is none. Its result or failure is not this waiter's concern."""
    if earlier is not None and not earlier.done():
        await asyncio.wait({earlier})
