"""The observation keys of a real-time chunking request (``armory_client.merge``, ``rtc``).

A robot using the ``rtc`` merge rule sends its frozen and queued actions beside the
observation under these top-level keys; a server that guides its policy with them
reads the same keys (docs/protocol.md).
"""

from __future__ import annotations

__all__ = ["RTC_DELAY_KEY", "RTC_PREFIX_KEY", "RTC_REMAINDER_KEY"]

RTC_PREFIX_KEY = "rtc_prefix"
"""Observation key of the frozen actions: float (d, action_dim)."""
RTC_REMAINDER_KEY = "rtc_remainder"
"""Observation key of the queued actions after the frozen ones: float (n, action_dim)."""
RTC_DELAY_KEY = "rtc_delay"
"""Observation key of the number of frozen actions, d."""
