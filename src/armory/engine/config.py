"""Options of ``armory serve`` (``--server.*``), read by the engine and the transports.

It imports nothing of Armory, so the command line builds and checks a config before
the engine is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20
"""Largest frame a robot may send by default: several full-resolution camera frames."""


@dataclass(frozen=True)
class PlainClientDefaults:
    """What the server assumes for a robot that sends no ``__armory__`` state."""

    control_hz: float = 20.0
    """Actions the robot executes per second."""
    min_execution_horizon: int = 1
    """Fewest actions of a chunk the robot executes before asking again."""
    max_execution_horizon: int | None = None
    """Actions of each chunk the robot executes; None: the policy's whole action horizon."""
    link_s: float = 0.002
    """One-way network delay (also an Armory client's until its first measured round trip)."""

    def __post_init__(self) -> None:
        if not (self.control_hz > 0 and math.isfinite(self.control_hz)):
            raise ValueError(f"default control_hz must be > 0, got {self.control_hz}")
        if self.min_execution_horizon < 1:
            raise ValueError(
                f"default min_execution_horizon must be >= 1, got {self.min_execution_horizon}"
            )
        if self.max_execution_horizon is not None and (
            self.max_execution_horizon < self.min_execution_horizon
        ):
            raise ValueError(
                f"default max_execution_horizon ({self.max_execution_horizon}) is below "
                f"min_execution_horizon ({self.min_execution_horizon})"
            )
        if not (self.link_s >= 0 and math.isfinite(self.link_s)):
            raise ValueError(f"default link_s must be >= 0, got {self.link_s}")


@dataclass(frozen=True)
class ServerConfig:
    """How the server batches, what it assumes about plain clients, and its limits."""

    # Batching
    max_batch_size: int = 4
    """Most robots in one forward pass."""
    scheduler: str = "just-in-time"
    """Scheduler name; an unknown one lists the valid names."""
    latency_profile: str | None = None
    """Latency preset seeding the learned profile; None: the policy's own, else l40s-pi05."""
    # Plain openpi clients (no __armory__ state)
    default_control_hz: float = 20.0
    """Control rate assumed for a plain openpi client."""
    default_min_execution_horizon: int = 1
    """Minimum execution horizon assumed for a plain openpi client."""
    default_max_execution_horizon: int | None = None
    """Actions of each chunk a plain client is assumed to execute; None: the whole chunk."""
    default_link_s: float = 0.002
    """One-way network delay assumed until measured (always, for plain clients)."""
    # Directed mode
    directed_margin_s: float = 0.01
    """Extra lead in ``next_request_index`` beyond links and one forward pass."""
    # Limits
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """Largest frame accepted from a robot; a larger one closes its connection (1009)."""
    max_pipelined_requests: int = 32
    """Most requests of one connection awaiting their replies at once (a pipelined
    every-tick robot sends without waiting); one more is refused with an error."""
    max_connections: int = 1024
    """Most robots connected at once through each door; one more is refused (openpi: HTTP
    503 at the handshake; GR00T: an error reply; LeRobot: RESOURCE_EXHAUSTED, also past
    two calls at once per robot)."""
    # Memory
    heap_trim_interval_s: float | None = 10.0
    """Every this many seconds the server returns freed heap memory to the operating
    system (glibc's ``malloc_trim``, a few ms in a worker thread), so that its resident
    memory falls back after a burst of large frames or connections; None: never."""
    # The executor
    decide_ahead_s: float = 0.002
    """The next batch is decided this long before the running forward pass is expected to
    end and queued behind it, so passes run back to back (taken back if the pass runs
    this long past its expected end); 0: decided when it ends."""
    switch_interval_s: float | None = 0.001
    """The server process's thread switch interval (``sys.setswitchinterval``; Python's is
    0.005): the longest the worker thread waits for the interpreter lock after a forward
    pass while the event loop is busy. None leaves Python's."""
    # Timeouts
    close_timeout_s: float = 2.0
    """Seconds to wait for a robot's close handshake after an error."""
    request_timeout_s: float = 30.0
    """Longest a request waits for a batch to take it: one still waiting then is refused
    with an error naming this option (its queue state put it behind everyone, e.g. a
    huge ``actions_left``); one already in a batch gets its chunk."""
    # Security
    tls_cert_file: str | None = None
    """PEM certificate (chain) of TLS on every door that supports it (openpi ``wss://``,
    LeRobot gRPC); with ``tls_key_file``. None: plaintext (docs/security.md)."""
    tls_key_file: str | None = None
    """PEM private key of ``tls_cert_file``."""
    # Observability
    metrics: bool = True
    """Serve Prometheus metrics at ``/metrics`` and the live dashboard at ``/dashboard`` on
    the openpi port, and keep the per-robot activity they show (docs/observability.md)."""
    metrics_max_robots: int = 32
    """Most robots with a ``robot`` label of their own in ``/metrics`` at a time; the rest
    are aggregated under ``robot="other"``."""
    explain_rules: bool = False
    """Also count what each rule of the scheduler changed against its base rule alone on
    the same snapshots (``/stats`` ``rule_changes``, ``armory fleet --explain``); the base
    rule is then asked on every decision too, before its batch starts: twice the
    scheduler's time (for diagnosis, not for production)."""
    # Checks
    check_invariants: bool = True
    """Assert every batch's invariants (cheap)."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"--server.max-batch-size must be >= 1, got {self.max_batch_size}")
        if not (self.directed_margin_s >= 0 and math.isfinite(self.directed_margin_s)):
            raise ValueError(
                f"--server.directed-margin-s must be >= 0, got {self.directed_margin_s}"
            )
        if self.max_message_bytes < 1024:
            raise ValueError(
                f"--server.max-message-bytes must be >= 1024, got {self.max_message_bytes}"
            )
        if self.max_pipelined_requests < 1:
            raise ValueError(
                f"--server.max-pipelined-requests must be >= 1, got {self.max_pipelined_requests}"
            )
        if self.max_connections < 1:
            raise ValueError(f"--server.max-connections must be >= 1, got {self.max_connections}")
        if self.heap_trim_interval_s is not None and not (
            self.heap_trim_interval_s > 0 and math.isfinite(self.heap_trim_interval_s)
        ):
            raise ValueError(
                "--server.heap-trim-interval-s must be > 0 seconds (or None), got "
                f"{self.heap_trim_interval_s}"
            )
        if not (self.decide_ahead_s >= 0 and math.isfinite(self.decide_ahead_s)):
            raise ValueError(f"--server.decide-ahead-s must be >= 0, got {self.decide_ahead_s}")
        if self.switch_interval_s is not None and not 0 < self.switch_interval_s <= 1:
            raise ValueError(
                "--server.switch-interval-s must be in (0, 1] seconds, got "
                f"{self.switch_interval_s}"
            )
        if not self.close_timeout_s > 0:
            raise ValueError(f"--server.close-timeout-s must be > 0, got {self.close_timeout_s}")
        if not (self.request_timeout_s > 0 and math.isfinite(self.request_timeout_s)):
            raise ValueError(
                f"--server.request-timeout-s must be > 0, got {self.request_timeout_s}"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            given = "cert" if self.tls_key_file is None else "key"
            raise ValueError(
                "--server.tls-cert-file and --server.tls-key-file go together: got only "
                f"--server.tls-{given}-file"
            )
        if self.metrics_max_robots < 0:
            raise ValueError(
                f"--server.metrics-max-robots must be >= 0, got {self.metrics_max_robots}"
            )
        self.plain_defaults()  # checks the defaults

    @property
    def tls(self) -> bool:
        """Whether a TLS certificate and key are set."""
        return self.tls_cert_file is not None

    def plain_defaults(self) -> PlainClientDefaults:
        """The assumptions about plain openpi clients, as one object."""
        return PlainClientDefaults(
            control_hz=self.default_control_hz,
            min_execution_horizon=self.default_min_execution_horizon,
            max_execution_horizon=self.default_max_execution_horizon,
            link_s=self.default_link_s,
        )
