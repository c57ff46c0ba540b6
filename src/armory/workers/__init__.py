"""Policies in worker processes: the server's side (supervisor, watchdog, restarts) and
the worker's side (``worker_main``, backends).

The worker side (``wire``, ``arena``, ``worker_main``, ``backends``) imports only the
standard library and numpy (and a backend's own libraries), so it runs under any
interpreter that has numpy, e.g. LeRobot's Python 3.12 environment. See docs/workers.md.
"""
