"""Worker backends by name; each module is imported only by the worker that runs it."""

from __future__ import annotations

import importlib

from armory.workers.backends.base import Backend

BACKENDS = {
    "mock": "armory.workers.backends.mock",
    "lerobot": "armory.workers.backends.lerobot",
}
"""Backend name -> module defining ``make_backend(options: dict) -> Backend``."""


def make_backend(name: str, options: dict) -> Backend:
    """The backend ``name`` built from its JSON ``options``; ValueError lists valid names."""
    module_name = BACKENDS.get(name)
    if module_name is None:
        raise ValueError(f"unknown worker backend {name!r}; valid names: {', '.join(BACKENDS)}")
    backend = importlib.import_module(module_name).make_backend(options)
    if not isinstance(backend, Backend):
        raise TypeError(f"backend {name!r} built a {type(backend).__name__}, not a Backend")
    return backend
