"""What the server has seen of one robot: rate, queue depth, starvation, latency.

Kept per connection by the engine, updated at each request and reply (a few
attribute writes), and read by ``/metrics``, the dashboard, ``/stats`` and the
connect/disconnect log lines.

Starvation is estimated from the robot's own reports: an Armory client's action
index advances only when it executes an action (a starved tick moves no index),
so between two reports the share of ticks it starved is
``1 - index advance / (control_hz * seconds between the reports)``, counted from
its first report that holds a chunk (start-up is not starvation). Plain clients
report no queue, so their depth and starvation are unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass

_SMOOTHING = 0.2
"""Weight of the newest sample in the moving averages of latency and observation age."""


@dataclass(frozen=True)
class RobotRow:
    """One robot as ``/stats`` and the dashboard show it (``dataclasses.asdict`` makes JSON)."""

    robot: str
    """The Armory robot id, or ``conn-N`` for a plain client."""
    named: bool
    """``robot`` is the id the robot reported (an Armory client that has sent a request);
    otherwise it is the connection's own ``conn-N``."""
    door: str
    """Front door it came through: openpi, groot or lerobot."""
    connected: bool
    control_hz: float | None
    weight: float | None
    max_execution_horizon: int | None
    num_requests: int
    num_replies: int
    num_errors: int
    request_hz: float
    """Requests per second since its first request."""
    queue_depth_actions: int | None
    """Actions it held when it took its last observation (None: a plain client)."""
    starvation: float | None
    """Share of its ticks without an action since its first chunk (None: unknown)."""
    starving: bool
    """Its queue was empty at its last report, after it had a chunk."""
    latency_ms: float | None
    """Moving average of arrival to reply sent, per chunk."""
    observation_age_ms: float | None
    """Moving average of an observation's age when its forward pass starts (its uplink
    included)."""
    last_seen_s_ago: float


@dataclass(frozen=True)
class RobotSample:
    """One robot's counters as ``/metrics`` reads them, copied on the event loop."""

    robot: str
    queue_depth_actions: int | None
    starvation: float | None
    num_requests: int
    num_chunks: int
    latency_sum_s: float
    observation_age_sum_s: float


class RobotActivity:
    """Runtime counters of one robot's connection (server clock, seconds)."""

    def __init__(self, *, door: str, peer: str, name: str, connected_s: float) -> None:
        self.door = door
        self.peer = peer
        self.name = name
        self.connected_s = connected_s
        self.closed_s: float | None = None
        self.control_hz: float | None = None
        self.weight: float | None = None
        self.max_execution_horizon: int | None = None
        self.num_requests = 0
        self.num_replies = 0
        self.num_errors = 0
        self.named = False
        self.first_request_s: float | None = None
        self.last_seen_s = connected_s
        self.queue_depth_actions: int | None = None
        self.has_chunk = False
        self.latency_s: float | None = None
        self.latency_sum_s = 0.0
        self.observation_age_s: float | None = None
        self.observation_age_sum_s = 0.0
        self.num_chunks = 0
        # Starvation: index and time at the first report holding a chunk, and the latest.
        self._episode: int | None = None
        self._base_index = 0
        self._base_s = 0.0
        self._served_actions = 0
        self._span_s = 0.0
        self._past_span_s = 0.0
        """Seconds covered by earlier episodes' reports."""
        self._past_served_s = 0.0
        """Seconds of actions executed within them."""

    def request(
        self,
        received_s: float,
        *,
        name: str,
        control_hz: float,
        weight: float,
        max_execution_horizon: int,
        report: tuple[int, int, bool, int] | None,
    ) -> None:
        """Called at each accepted request; ``report``: (action index, actions left, holds a
        chunk, episode id) of an Armory client, None for a plain one."""
        self.name = name
        self.control_hz = control_hz
        self.weight = weight
        self.max_execution_horizon = max_execution_horizon
        self.num_requests += 1
        self.last_seen_s = received_s
        if self.first_request_s is None:
            self.first_request_s = received_s
        self.named = report is not None
        if report is None:
            return
        index, left, has_chunk, episode = report
        self.queue_depth_actions = left
        self.has_chunk = has_chunk
        if not has_chunk:
            return
        if episode != self._episode or index < self._base_index + self._served_actions:
            # A new episode (or a restarted count): the earlier span is kept, a new one starts.
            self._past_span_s += self._span_s
            self._past_served_s += self._served_actions / control_hz
            self._span_s = 0.0
            self._served_actions = 0
            self._episode = episode
            self._base_index = index
            self._base_s = received_s
            return
        self._served_actions = index - self._base_index
        self._span_s = received_s - self._base_s

    def reply(self, total_s: float, observation_age_s: float | None) -> None:
        """Called once a chunk's reply is sent: ``total_s`` from arrival to sent."""
        self.num_replies += 1
        self.num_chunks += 1
        self.latency_sum_s += total_s
        self.latency_s = _smooth(self.latency_s, total_s)
        if observation_age_s is not None:
            self.observation_age_sum_s += observation_age_s
            self.observation_age_s = _smooth(self.observation_age_s, observation_age_s)

    def starvation(self) -> float | None:
        """Share of ticks it starved since its first chunk; None before a tick's worth."""
        if self.control_hz is None:
            return None
        span_s = self._past_span_s + self._span_s
        if span_s * self.control_hz < 2:
            return None
        served_s = self._past_served_s + self._served_actions / self.control_hz
        return min(max(1.0 - served_s / span_s, 0.0), 1.0)

    def sample(self) -> RobotSample:
        """The counters ``/metrics`` reads."""
        return RobotSample(
            robot=self.name,
            queue_depth_actions=self.queue_depth_actions,
            starvation=self.starvation(),
            num_requests=self.num_requests,
            num_chunks=self.num_chunks,
            latency_sum_s=self.latency_sum_s,
            observation_age_sum_s=self.observation_age_sum_s,
        )

    def row(self, now_s: float) -> RobotRow:
        """The robot as the dashboard and ``/stats`` show it at ``now_s``."""
        since_s = now_s - (self.first_request_s if self.first_request_s is not None else now_s)
        return RobotRow(
            robot=self.name,
            named=self.named,
            door=self.door,
            connected=self.closed_s is None,
            control_hz=self.control_hz,
            weight=self.weight,
            max_execution_horizon=self.max_execution_horizon,
            num_requests=self.num_requests,
            num_replies=self.num_replies,
            num_errors=self.num_errors,
            request_hz=self.num_requests / since_s if since_s > 0 else 0.0,
            queue_depth_actions=self.queue_depth_actions,
            starvation=self.starvation(),
            starving=self.has_chunk and self.queue_depth_actions == 0,
            latency_ms=None if self.latency_s is None else 1e3 * self.latency_s,
            observation_age_ms=(
                None if self.observation_age_s is None else 1e3 * self.observation_age_s
            ),
            last_seen_s_ago=max(now_s - self.last_seen_s, 0.0),
        )


def _smooth(average: float | None, sample: float) -> float:
    return sample if average is None else average + _SMOOTHING * (sample - average)
