"""Measured latency profiles as files: what ``armory profile`` writes, and what fleet
files (``latency_profile: FILE``), ``policy:mock --policy.latency-profile FILE`` and the
simulator read back as latency points.

A profile file is JSON::

    {"format": "armory-latency-profile", "version": 1,
     "policy": "lerobot-smolvla", "device": "cpu", "warmup": 3, "timed": "...",
     "host": "...", "options": "...",
     "batches": [{"batch_size": 1, "num_samples": 20, "mean_s": ..., "p50_s": ...,
                  "p90_s": ..., "p99_s": ..., "min_s": ..., "max_s": ...,
                  "peak_memory_bytes": ...}, ...]}

The latency points a reader takes are each batch size's median (``p50_s``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROFILE_FORMAT = "armory-latency-profile"
"""The ``format`` field every profile file carries."""
PROFILE_VERSION = 1
"""The ``version`` this code writes and reads."""
MAX_PROFILE_BYTES = 1 << 20
"""A larger file is refused before it is parsed."""


@dataclass(frozen=True)
class BatchTiming:
    """Forward-pass times of one batch size, measured warm."""

    batch_size: int
    """Robots in each timed forward pass."""
    num_samples: int
    """Timed passes."""
    mean_s: float
    p50_s: float
    """Median seconds: the latency point readers use."""
    p90_s: float
    p99_s: float
    min_s: float
    max_s: float
    peak_memory_bytes: int | None = None
    """Peak memory of the model's process (CPU: resident set; GPU: device allocations)
    after this size's passes; None when unknown."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.num_samples < 1:
            raise ValueError(
                f"batch_size and num_samples must be >= 1, got {self.batch_size}, "
                f"{self.num_samples}"
            )
        times = (self.mean_s, self.p50_s, self.p90_s, self.p99_s, self.min_s, self.max_s)
        if not all(math.isfinite(t) and t > 0 for t in times):
            raise ValueError(f"batch size {self.batch_size}: times must be > 0, got {times}")


@dataclass(frozen=True)
class ProfileFile:
    """A measured latency profile of one policy on one device."""

    policy: str
    """The policy's metadata name (e.g. lerobot-smolvla)."""
    device: str
    """Where it ran (e.g. cpu, cuda: NVIDIA H200)."""
    batches: tuple[BatchTiming, ...]
    """One entry per batch size, ascending."""
    warmup: int = 0
    """Untimed passes before each batch size's timed ones."""
    timed: str = ""
    """What each sample times (the worker's model call, or infer_batch's wall time)."""
    host: str = ""
    """Free text on the machine (architecture, CPU count)."""
    options: str = ""
    """The policy options profiled (its config as JSON), for the record."""

    def __post_init__(self) -> None:
        sizes = [b.batch_size for b in self.batches]
        if not sizes:
            raise ValueError("a profile needs at least one batch size")
        if sizes != sorted(set(sizes)):
            raise ValueError(f"batch sizes must be distinct and ascending, got {sizes}")

    def points(self) -> dict[int, float]:
        """Latency points: each batch size's median seconds."""
        return {b.batch_size: b.p50_s for b in self.batches}


def timing_from_samples(
    batch_size: int, samples_s: Sequence[float], peak_memory_bytes: int | None = None
) -> BatchTiming:
    """Summarise timed forward passes of one batch size."""
    if not samples_s:
        raise ValueError(f"batch size {batch_size}: no timed passes")
    times = np.asarray(samples_s, dtype=np.float64)
    p50, p90, p99 = (float(v) for v in np.percentile(times, [50, 90, 99]))
    return BatchTiming(
        batch_size=batch_size,
        num_samples=len(times),
        mean_s=float(times.mean()),
        p50_s=p50,
        p90_s=p90,
        p99_s=p99,
        min_s=float(times.min()),
        max_s=float(times.max()),
        peak_memory_bytes=peak_memory_bytes,
    )


def write_profile(path: str | Path, profile: ProfileFile) -> Path:
    """Write ``profile`` as JSON (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, **dataclasses.asdict(profile)}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def read_profile(path: str | Path) -> ProfileFile:
    """A profile file; a ValueError names the file and what is wrong with it."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"latency profile {path}: cannot read it ({exc.strerror})") from exc
    if size > MAX_PROFILE_BYTES:
        raise ValueError(f"latency profile {path}: {size} bytes, more than {MAX_PROFILE_BYTES}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"latency profile {path}: not a JSON profile file ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise ValueError(f'latency profile {path}: no "format": "{PROFILE_FORMAT}" field')
    if data.get("version") != PROFILE_VERSION:
        raise ValueError(
            f"latency profile {path}: version {data.get('version')!r}, this Armory reads "
            f"version {PROFILE_VERSION}"
        )
    try:
        return _profile_from(data)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"latency profile {path}: {exc}") from exc


def is_profile_path(name: str) -> bool:
    """Whether a latency-profile name denotes a file rather than a preset."""
    return name.endswith(".json") or "/" in name


def _profile_from(data: dict[str, Any]) -> ProfileFile:
    fields = {f.name for f in dataclasses.fields(ProfileFile)}
    unknown = set(data) - fields - {"format", "version"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    raw_batches = data.get("batches")
    if not isinstance(raw_batches, list):
        raise ValueError('"batches" must be a list')
    batches = tuple(_timing_from(entry) for entry in raw_batches)
    kept = {k: v for k, v in data.items() if k in fields and k != "batches"}
    for name in ("policy", "device", "timed", "host", "options"):
        if name in kept and not isinstance(kept[name], str):
            raise ValueError(f"{name!r} must be a string")
    return ProfileFile(**kept, batches=batches)


def _timing_from(entry: Any) -> BatchTiming:
    if not isinstance(entry, dict):
        raise ValueError(f"a batch entry must be an object, got {entry!r}")
    fields = {f.name for f in dataclasses.fields(BatchTiming)}
    unknown = set(entry) - fields
    if unknown:
        raise ValueError(f"unknown batch fields {sorted(unknown)}")
    for name in ("batch_size", "num_samples"):
        if not isinstance(entry.get(name), int) or isinstance(entry.get(name), bool):
            raise ValueError(f"batch {name} must be an integer, got {entry.get(name)!r}")
    for name in fields - {"batch_size", "num_samples", "peak_memory_bytes"}:
        value = entry.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"batch {name} must be a number, got {value!r}")
    memory = entry.get("peak_memory_bytes")
    if memory is not None and (not isinstance(memory, int) or memory < 0):
        raise ValueError(f"peak_memory_bytes must be a non-negative integer, got {memory!r}")
    return BatchTiming(**entry)
