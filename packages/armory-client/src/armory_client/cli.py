"""The ``armory-client`` command: tools for the robot side (``plot TRACE``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: the process's); returns the exit status."""
    parser = argparse.ArgumentParser(prog="armory-client", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    plot = commands.add_parser(
        "plot", help="draw a runtime trace (queue size, round trips) as a PNG"
    )
    plot.add_argument("trace", type=Path, help="JSON written by RobotRuntime.write_trace")
    plot.add_argument(
        "-o", "--output", type=Path, default=None, help="PNG to write (default: TRACE.png)"
    )
    args = parser.parse_args(argv)
    # Imported here so that `armory-client --help` needs nothing optional.
    from armory_client.trace_plot import load_trace, plot_trace

    output = args.output or args.trace.with_suffix(".png")
    try:
        plot_trace(load_trace(args.trace), output)
    except (OSError, ValueError, ImportError) as exc:
        print(f"armory-client plot: {exc}", file=sys.stderr)
        return 1
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
