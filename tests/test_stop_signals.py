"""Waiting for a stop signal: it returns on the signal, however many come, and later
signals are only noted (the stop that follows is not interrupted)."""

from __future__ import annotations

import os
import signal
import threading
import time

from armory.core.stop_signals import wait_for_stop


def test_a_burst_of_signals_ends_the_wait_and_later_ones_are_only_noted() -> None:
    """Two hundred SIGUSR1s sent as fast as a thread can send them, from 0.3 s into the
    wait: the wait returns within seconds, and every signal, during the wait and after
    it, is noted and nothing else (the process is not interrupted)."""
    before = signal.getsignal(signal.SIGUSR1)

    def burst() -> None:
        time.sleep(0.3)
        for _ in range(200):
            os.kill(os.getpid(), signal.SIGUSR1)

    sender = threading.Thread(target=burst)
    started = time.monotonic()
    sender.start()
    try:
        received = wait_for_stop([signal.SIGUSR1])
        assert time.monotonic() - started < 30.0
        sender.join()
        assert received[0] == signal.SIGUSR1
        noted = len(received)  # a burst coalesces: a signal pending is not queued twice
        os.kill(os.getpid(), signal.SIGUSR1)  # after the wait: noted, nothing else
        time.sleep(0.1)
        assert len(received) == noted + 1
    finally:
        sender.join()
        signal.signal(signal.SIGUSR1, before)
