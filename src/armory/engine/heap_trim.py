"""Handing freed heap memory back to the operating system, now and then.

Every request allocates and frees frames, decoded arrays and reply buffers, and
connections come and go. glibc's allocator keeps the pages of freed blocks inside
its heaps for reuse and returns only a free stretch at the top of each heap, so
after a burst (large frames, thousands of connections) the process keeps its
high-water mark of resident memory although the memory is free.
``malloc_trim(0)`` returns every whole free page of every heap. It takes about
1-3 ms on a server of ~100 MB (docs/architecture.md) and runs in a worker thread;
allocations wait for it only while it holds their heap's lock.

Where the C library is not glibc there is no ``malloc_trim`` and nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
from collections.abc import Callable

logger = logging.getLogger(__name__)


@functools.cache
def glibc_malloc_trim() -> Callable[[], None] | None:
    """``malloc_trim(0)`` of the process's glibc, or None where the C library is another."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # no confstr, or no such name here
        return None
    if not version or not version.startswith("glibc"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the symbols the process already has
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def malloc_trim() -> None:
        trim(0)

    return malloc_trim


async def trim_heap_every(interval_s: float, trim: Callable[[], None]) -> None:
    """Call ``trim`` in a worker thread every ``interval_s`` seconds, until cancelled.
    A trim that raises is logged and the next one still runs."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await asyncio.to_thread(trim)
        except Exception:
            logger.exception("returning freed heap memory failed")
