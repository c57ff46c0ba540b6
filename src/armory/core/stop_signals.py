"""Block until the process is asked to stop by a signal, without a lock in the handler.

A handler that sets a ``threading.Event`` can deadlock: the signal runs the handler on
the main thread, which may be inside ``Event.wait`` or another handler's ``Event.set``
holding the event's lock at that moment, and ``Event.set`` then waits for that same
lock for ever (``armory cluster`` hung so when two SIGINTs came at once). Here the
handler only appends to a list.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence

POLL_S = 0.2
"""How often the waiting thread looks for a signal that came."""


def wait_for_stop(signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> list[int]:
    """Called on the main thread: sleep until one of ``signums`` arrives and return the
    list the signals are noted in. The handlers stay: signals that come later are noted
    there and do nothing else, so the stop that follows runs to its end."""
    received: list[int] = []
    for signum in signums:
        signal.signal(signum, lambda s, _frame: received.append(s))
    while not received:
        time.sleep(POLL_S)
    return received
