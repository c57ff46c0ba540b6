"""The worker process: ``<python> -m armory.workers.worker_main --fd N --backend B --options J``.

Started by the server's supervisor (:mod:`armory.workers.process`) with ``PYTHONPATH``
pointing at Armory's source, under whatever interpreter the backend needs. It talks
over the inherited socket ``--fd`` (:mod:`armory.workers.wire`; stdout and stderr are
only for logs), in this order:

1. builds the backend and sends ``hello`` (its :class:`BackendInfo`), or ``fatal`` with
   the reason and exits 1;
2. receives ``configure`` (the fixed noise, if any, and the batch sizes to profile),
   warms up, times one forward pass per batch size, and sends ``ready`` with the
   seconds per batch size (or ``fatal``);
3. answers each ``infer`` with ``result`` (the chunks written to the arena) or
   ``error`` (the backend raised: the batch fails, the worker stays), until ``close``
   or the end of the connection.

Imports the standard library, numpy and the chosen backend only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from armory.workers import wire
from armory.workers.arena import Arena
from armory.workers.backends import make_backend
from armory.workers.backends.base import Backend

_MAX_ERROR_CHARS = 2000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="inherited socket descriptor")
    parser.add_argument("--backend", required=True, help="backend name (mock, lerobot)")
    parser.add_argument("--options", default="{}", help="backend options as a JSON object")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    try:
        return Worker(sock).run(args.backend, json.loads(args.options))
    finally:
        sock.close()


class Worker:
    """The worker's loop over one connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._arena: Arena | None = None

    def run(self, backend_name: str, options: dict[str, Any]) -> int:
        try:
            backend = make_backend(backend_name, options)
            info = backend.info()
        except BaseException as exc:  # report every start-up failure, then exit
            return self._fatal(f"cannot build the {backend_name!r} backend", exc)
        wire.send_message(self.sock, {"op": "hello", "info": info.to_message(), "pid": os.getpid()})
        try:
            configure = wire.recv_message(self.sock)
            if configure is None:
                return 0
            points = self._configure(backend, configure)
        except BaseException as exc:
            return self._fatal("cannot configure the backend", exc)
        wire.send_message(self.sock, {"op": "ready", "latency_points": points})
        try:
            self._serve(backend)
        finally:
            backend.close()
        return 0

    def _configure(self, backend: Backend, message: dict[str, Any]) -> dict[str, float]:
        """Set the noise, warm up, and time one pass per batch size: {size: seconds}."""
        if message.get("op") != "configure":
            raise wire.WireError(f"expected a configure message, got {message.get('op')!r}")
        noise = None
        if message.get("noise") is not None:
            arena = self._map(message)
            noise = np.array(wire.view_array(arena.buffer, message["noise"]), dtype=np.float32)
        backend.set_noise(noise)
        example = backend.example_observation()
        points: dict[str, float] = {}
        sizes = [int(size) for size in message.get("profile_batch_sizes", [])]
        # Warm-up: a new input shape often runs cold (lazy initialisation, kernels
        # compiled or tuned, memory allocated). Largest first: a batch too large for the
        # device fails here, before anything else is spent.
        warm = {int(size) for size in message.get("warmup_batch_sizes", [])}
        for size in sorted(warm, reverse=True):
            backend.infer([example] * size)
        for size in sizes:
            if size not in warm:
                backend.infer([example] * size)  # so that the timed pass is warm
            started = time.perf_counter()
            backend.infer([example] * size)
            points[str(size)] = time.perf_counter() - started
        return points

    def _serve(self, backend: Backend) -> None:
        while True:
            message = wire.recv_message(self.sock)
            if message is None or message.get("op") == "close":
                return
            if message.get("op") != "infer":
                raise wire.WireError(f"unexpected message {message.get('op')!r}")
            wire.send_message(self.sock, self._infer(backend, message))

    def _infer(self, backend: Backend, message: dict[str, Any]) -> dict[str, Any]:
        request_id = message.get("id")
        try:
            arena = self._map(message)
            observations = [wire.read_observation(arena.buffer, refs) for refs in message["obs"]]
            started = time.perf_counter()
            chunks = np.asarray(backend.infer(observations))
            infer_s = time.perf_counter() - started
            del observations
            expected = (len(message["obs"]), *message["chunk_shape"])
            if chunks.shape != expected:
                raise ValueError(
                    f"the backend returned chunks of shape {chunks.shape}, expected {expected}"
                )
            chunks = np.ascontiguousarray(chunks, dtype=np.float32)
            offset = int(message["reply_offset"])
            if offset + chunks.nbytes > arena.size:
                raise ValueError("the arena has no room for the reply")
            arena.write(offset, chunks)
        except Exception as exc:
            traceback.print_exc()
            sys.stderr.flush()
            return {"op": "error", "id": request_id, "error": _describe(exc)}
        return {
            "op": "result",
            "id": request_id,
            "chunks": wire.array_ref(chunks, offset),
            "infer_s": infer_s,
            "peak_memory_bytes": backend.peak_memory_bytes(),
        }

    def _map(self, message: dict[str, Any]) -> Arena:
        """The arena the message names, mapped once (a new name replaces the old one)."""
        path, size = message["arena"], int(message["arena_bytes"])
        if self._arena is None or str(self._arena.path) != path or self._arena.size != size:
            if self._arena is not None:
                self._arena.close()
            self._arena = Arena.open(Path(path), size)
        return self._arena

    def _fatal(self, what: str, exc: BaseException) -> int:
        traceback.print_exc()
        sys.stderr.flush()
        with contextlib.suppress(OSError):
            wire.send_message(self.sock, {"op": "fatal", "error": f"{what}: {_describe(exc)}"})
        return 1


def _describe(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
