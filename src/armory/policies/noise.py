"""Action-noise tickets: the noise a sampling policy starts from, fixed and named.

A flow-matching or diffusion policy draws Gaussian noise for every chunk; with
the same noise and the same observation it returns the same chunk. A *ticket*
pins that noise for a whole server run, so two runs (two servers, two
machines, a server and a notebook) can be compared bit for bit, and every reply
says which ticket produced it (its SHA-256).

Two ways to get one (mutually exclusive):

- ``seed``: ``np.random.Generator(np.random.PCG64(seed)).standard_normal(shape,
  dtype=np.float32)``, reproducible wherever NumPy is;
- ``ticket``: an ``.npz`` file holding exactly one array, ``noise``, of the
  policy's noise shape. float16, float32 and float64 arrays are accepted and
  cast to float32 (the values used, and hashed, are the float32 ones); every
  value must be finite after the cast. Pickled/object arrays are never loaded.

The identity is :func:`noise_sha256`: SHA-256 of the float32 values as
little-endian C-order bytes, whatever the byte order or memory layout of the
array it was computed from. Make a ticket with :func:`save_ticket`, or::

    python -m armory.policies.noise --seed 7 --shape 50 32 --out ticket.npz
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "NOISE_KEY",
    "NoiseConfig",
    "NoiseTicket",
    "make_noise",
    "noise_sha256",
    "save_ticket",
]

NOISE_KEY = "noise"
"""The one array name a ticket file holds."""

_CANONICAL_DTYPE = np.dtype("<f4")
"""Little-endian float32: the dtype of every ticket array and of the hashed bytes."""

_ACCEPTED_KINDS = "f"
"""Ticket files may hold float16, float32 or float64 (cast to float32)."""


@dataclass(frozen=True)
class NoiseConfig:
    """Fixed action noise for a sampling policy: a PCG64 seed or a ticket file (not both)."""

    seed: int | None = None
    """Draw the noise once from np.random.PCG64(seed) standard normals (float32)."""
    ticket: Path | None = None
    """An .npz file with exactly one float array named 'noise' of the policy's noise shape."""

    def __post_init__(self) -> None:
        if self.seed is not None and self.ticket is not None:
            raise ValueError(
                f"noise seed ({self.seed}) and noise ticket ({self.ticket}) are mutually "
                "exclusive: give one of them"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise ValueError(f"noise seed must be an int >= 0, got {self.seed!r}")

    @property
    def enabled(self) -> bool:
        """A seed or a ticket is set."""
        return self.seed is not None or self.ticket is not None


@dataclass(frozen=True)
class NoiseTicket:
    """Noise fixed for a whole run, and its identity."""

    array: np.ndarray
    """float32, C-order, read-only; of the shape the policy asked for."""
    sha256: str
    """:func:`noise_sha256` of ``array`` (64 hex digits)."""
    source: str
    """Where it came from: ``seed 7 (PCG64)`` or the ticket file's path."""


def noise_sha256(array: np.ndarray) -> str:
    """SHA-256 (hex) of ``array`` as little-endian float32 C-order bytes.

    The same values give the same digest whatever the input's byte order or memory
    layout (a big-endian or Fortran-order copy hashes like the canonical one). The
    shape is not hashed: the policy's noise shape is fixed by its metadata.
    """
    canonical = np.ascontiguousarray(np.asarray(array), dtype=_CANONICAL_DTYPE)
    return hashlib.sha256(canonical.tobytes(order="C")).hexdigest()


def make_noise(config: NoiseConfig, shape: tuple[int, ...]) -> NoiseTicket | None:
    """The run's noise of ``shape`` (e.g. ``(action_horizon, action_dim)``), or None when
    ``config`` sets neither seed nor ticket.

    Raises ValueError naming the file, key, expected and received values for a
    ticket that does not fit; call it when the policy is built, never per request.
    """
    shape = tuple(int(dim) for dim in shape)
    if any(dim < 1 for dim in shape):
        raise ValueError(f"noise shape must hold dimensions >= 1, got {shape}")
    if config.seed is not None:
        rng = np.random.Generator(np.random.PCG64(config.seed))
        array = rng.standard_normal(shape, dtype=np.float32)
        return _ticket(array, f"seed {config.seed} (PCG64)")
    if config.ticket is not None:
        return _ticket(load_ticket_array(config.ticket, shape), str(config.ticket))
    return None


def load_ticket_array(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """The checked float32 ``noise`` array of the ticket file at ``path``."""
    path = Path(path)
    where = f"noise ticket {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where}: no such file")
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{where}: not an .npz archive (save one with np.savez(path, {NOISE_KEY}=array) or "
            "armory.policies.noise.save_ticket)"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = sorted(archive.files)
            raw = archive[NOISE_KEY] if keys == [NOISE_KEY] else None
    except ValueError as exc:
        # np.load refuses object (pickled) arrays with allow_pickle=False.
        raise ValueError(
            f"{where}: array {NOISE_KEY!r} cannot be read as a plain array without pickle "
            f"({exc}); expected float32 {shape}"
        ) from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{where}: cannot read the archive: {exc}") from None
    if raw is None:
        raise ValueError(
            f"{where}: expected exactly one array named {NOISE_KEY!r}, received arrays {keys}"
        )
    if not isinstance(raw, np.ndarray):
        raise ValueError(
            f"{where}: member {NOISE_KEY!r} is not an .npy array; expected float32 {shape}"
        )
    if raw.dtype.kind not in _ACCEPTED_KINDS or raw.dtype.hasobject:
        raise ValueError(
            f"{where}: array {NOISE_KEY!r} has dtype {raw.dtype.str!r}; expected float32 "
            "(float16 and float64 are cast)"
        )
    if raw.shape != shape:
        raise ValueError(f"{where}: array {NOISE_KEY!r} has shape {raw.shape}; expected {shape}")
    with np.errstate(over="ignore"):
        array = raw.astype(np.float32)
    if not np.isfinite(array).all():
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise ValueError(
            f"{where}: array {NOISE_KEY!r} holds {bad} non-finite values (NaN or inf as "
            "float32); expected finite values"
        )
    return array


def save_ticket(path: Path | str, array: np.ndarray) -> Path:
    """Write ``array`` (cast to float32, finite) as a ticket file; returns its path.

    ``np.savez`` adds ``.npz`` to a name without it; the returned path has it.
    """
    values = np.ascontiguousarray(np.asarray(array), dtype=_CANONICAL_DTYPE)
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError("a noise ticket needs a non-empty array of finite values")
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    np.savez(path, **{NOISE_KEY: values})
    return path


def _ticket(array: np.ndarray, source: str) -> NoiseTicket:
    array = np.ascontiguousarray(array, dtype=np.float32)
    array.flags.writeable = False
    return NoiseTicket(array=array, sha256=noise_sha256(array), source=source)


@dataclass(frozen=True)
class MakeTicketArgs:
    """Write a noise ticket drawn from a PCG64 seed."""

    seed: int
    """PCG64 seed of the standard normals."""
    shape: tuple[int, ...]
    """Noise shape, e.g. 50 32 (action_horizon action_dim)."""
    out: Path
    """The .npz file to write."""


def main(args: MakeTicketArgs) -> str:
    """Write the ticket; returns the line printed (path, shape and SHA-256)."""
    if not args.shape or math.prod(args.shape) < 1:
        raise ValueError(f"--shape needs dimensions >= 1, got {args.shape}")
    ticket = make_noise(NoiseConfig(seed=args.seed), args.shape)
    assert ticket is not None
    path = save_ticket(args.out, ticket.array)
    return f"{path}  shape {ticket.array.shape}  sha256 {ticket.sha256}  ({ticket.source})"


if __name__ == "__main__":
    import tyro

    print(main(tyro.cli(MakeTicketArgs)))
