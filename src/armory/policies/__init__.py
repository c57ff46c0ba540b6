"""Policies the server can batch: the Policy interface, the mock, and adapters."""
