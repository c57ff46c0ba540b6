"""The shared memory arena: one mmap'd file both processes map, holding array bytes.

The server creates it (in ``/dev/shm`` where there is one, so the bytes stay in RAM),
grows it by replacing it with a larger file under a new name, and deletes it when it
closes; the worker maps the file a request names and drops a mapping it no longer
needs. A plain file (not ``multiprocessing.shared_memory``) so that no resource
tracker in the worker unlinks the segment when the worker dies.

Standard library and numpy only: the worker imports this module.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

_SHM_DIR = Path("/dev/shm")


def arena_dir() -> Path:
    """``/dev/shm`` when it is a writable directory, else the system's temp directory."""
    if _SHM_DIR.is_dir() and os.access(_SHM_DIR, os.W_OK):
        return _SHM_DIR
    return Path(tempfile.gettempdir())


class Arena:
    """One mapped file of ``size`` bytes; ``buffer`` is its writable memoryview."""

    def __init__(self, path: Path, size: int, *, owner: bool) -> None:
        self.path = path
        self.size = size
        self.owner = owner
        """The creating side deletes the file on :meth:`close`."""
        with open(path, "r+b") as file:
            self._mmap = mmap.mmap(file.fileno(), size)
        self.buffer = memoryview(self._mmap)

    @classmethod
    def create(cls, size: int, *, directory: Path | None = None, prefix: str = "armory-") -> Arena:
        """A new zero-filled arena file of ``size`` bytes (at least one page)."""
        size = max(int(size), mmap.PAGESIZE)
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".arena", dir=directory or arena_dir())
        try:
            # Reserve the pages now: a full tmpfs fails here, not with SIGBUS at a write.
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            os.close(fd)
            os.unlink(name)
            if directory is None and arena_dir() == _SHM_DIR:  # /dev/shm full: use disk
                return cls.create(size, directory=Path(tempfile.gettempdir()), prefix=prefix)
            raise OSError(f"cannot reserve a {size}-byte worker arena in {name}: {exc}") from exc
        os.close(fd)
        return cls(Path(name), size, owner=True)

    @classmethod
    def open(cls, path: Path | str, size: int) -> Arena:
        """Map an existing arena file (the worker's side)."""
        path = Path(path)
        actual = path.stat().st_size
        if actual < size:
            raise ValueError(f"arena {path} holds {actual} bytes, expected {size}")
        return cls(path, size, owner=False)

    def write(self, offset: int, array: np.ndarray) -> None:
        """Copy ``array``'s bytes (C order) to ``offset``: the one copy a batch costs."""
        target = np.frombuffer(self.buffer, dtype=array.dtype, count=array.size, offset=offset)
        np.copyto(target.reshape(array.shape), array, casting="no")

    def close(self) -> None:
        """Unmap; the owner also deletes the file. Views of ``buffer`` must be gone."""
        try:
            self.buffer.release()
            self._mmap.close()
        except BufferError:  # a numpy view still exists; the mapping goes with the last one
            pass
        if self.owner:
            self.path.unlink(missing_ok=True)
