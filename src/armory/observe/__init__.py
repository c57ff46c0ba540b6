"""Seeing the fleet while it runs: per-robot activity, Prometheus metrics, the live
dashboard and the server's log lines (docs/observability.md)."""
