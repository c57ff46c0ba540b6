"""Draw a runtime trace: the queue-size sawtooth and the round trips, as one PNG.

The first thing to look at when a robot stutters. A trace is what
`RobotRuntime.write_trace` writes (JSON: per tick the queue size and whether the
tick starved, per request its send time and round trip). matplotlib is imported
on first use only (install the ``plot`` extra: ``pip install 'armory-client[plot]'``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["load_trace", "plot_trace"]

_PLOT_HINT = "plotting needs matplotlib: pip install 'armory-client[plot]' (or matplotlib>=3.7)"


def load_trace(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The trace in `path`; ValueError naming the file when it is not a runtime trace."""
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(path)}: not JSON ({exc})") from None
    if not isinstance(trace, dict) or trace.get("version") != 1:
        raise ValueError(f"{os.fspath(path)}: not a version 1 runtime trace")
    for key in ("config", "ticks", "requests"):
        if not isinstance(trace.get(key), dict if key == "config" else list):
            raise ValueError(f"{os.fspath(path)}: runtime trace lacks {key!r}")
    return trace


def plot_trace(trace: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Draw `trace` to the PNG `path`: queue size per tick (starved ticks in red) above
    the round trip of every request at the time it was sent (failed ones as crosses).

    Raises ImportError naming the ``plot`` extra when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(_PLOT_HINT) from exc

    config = trace["config"]
    hz = float(config["control_hz"])
    ticks = trace["ticks"]
    requests = trace["requests"]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    try:
        times_s = [t["tick"] / hz for t in ticks]
        top.step(times_s, [t["actions_left"] for t in ticks], where="post", lw=1)
        starved = [(t["tick"] / hz, 0) for t in ticks if t["starved"]]
        if starved:
            top.scatter(*zip(*starved, strict=True), color="red", s=8, label="starved", zorder=3)
            top.legend(loc="upper right")
        top.set_ylabel("actions queued")
        top.set_title(
            f"{config.get('robot_id', '?')}: {hz:g} Hz, {config.get('request_mode', '?')}, "
            f"merge {config.get('merge_rule', 'replace')}"
        )
        answered = [r for r in requests if r.get("round_trip_s") is not None]
        bottom.plot(
            [_sent_s(r, i) for i, r in enumerate(answered)],
            [r["round_trip_s"] * 1e3 for r in answered],
            marker=".",
            lw=0.8,
        )
        failed = [_sent_s(r, 0) for r in requests if r.get("outcome") == "error"]
        if failed:
            bottom.scatter(failed, [0] * len(failed), marker="x", color="red", label="error")
            bottom.legend(loc="upper right")
        bottom.set_ylim(bottom=0)
        bottom.ticklabel_format(axis="y", useOffset=False)
        bottom.set_ylabel("round trip (ms)")
        bottom.set_xlabel("time since the first tick (s)")
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


def _sent_s(record: Mapping[str, Any], fallback: float) -> float:
    """When the request was sent (a trace without send times: its number)."""
    sent_s = record.get("sent_s")
    return float(fallback) if sent_s is None else float(sent_s)
