"""Fuzzing every front door beside one well-behaved robot: N hostile inputs per door.

For each door a fresh server (``policy:mock``, all three doors, in a child process)
serves a good robot at 20 Hz (its own process, an Armory client on the openpi door)
while this process sends N inputs through the door: nine in ten are structure-aware
mutations of a valid message (extreme numbers, wrong types, missing and extra keys,
malformed arrays, one in ten also damaged byte-wise), one in ten is drawn whole by
a property-based generator (hypothesis). Afterwards: the server alive and answering
``/healthz``, no input answered with an internal error, a scheduling failure or
nothing at all, no scheduler fault in ``/stats``, the good robot's largest gap under
0.5 s, the server's RSS after the run within 20% of its start (taken after the first
1% of the inputs, at least 200: allocator arenas of the door's threads fill over the
first thousands). Exit status 1 if any door fails a check.

    python benchmarks/fuzz.py [--inputs 1000000] [--doors openpi groot lerobot] [--seed 0]
        [--clients 4] [--only POSITIONS]

A failed gap check names when the gap began, the machine's load average then, and the
feed positions of the inputs in flight; ``--only`` with the same ``--inputs`` and
``--seed`` replays those inputs alone beside the good robot (a stall they cause shows
again; one the machine's other jobs caused does not).
"""

from __future__ import annotations

import argparse
import sys
import time

from armory.fuzz.doors import DOORS
from armory.fuzz.generate import generated_feed
from armory.fuzz.harness import FuzzReport, chain_feeds, mutation_feed, run_fuzz, selected_feed
from armory.sim.table import format_table

GENERATED_SHARE = 0.1
"""Share of each door's inputs the property-based generator draws."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per door")
    parser.add_argument("--doors", nargs="+", choices=DOORS, default=list(DOORS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--clients", type=int, default=4, help="fuzzing clients at once per door (own robots)"
    )
    parser.add_argument(
        "--only",
        type=lambda text: [int(p) for p in text.split(",")],
        default=None,
        help="send only these feed positions (e.g. a failed run's inputs in flight: 12,13,15)",
    )
    args = parser.parse_args()
    num_generated = int(args.inputs * GENERATED_SHARE)
    num_mutated = args.inputs - num_generated
    reports = []
    for door in args.doors:
        started = time.monotonic()

        def progress(count: int, door: str = door, started: float = started) -> None:
            if count % 10_000 == 0:
                rate = count / (time.monotonic() - started)
                print(f"  {door}: {count} inputs ({rate:.0f}/s)", file=sys.stderr, flush=True)

        feed = chain_feeds(
            mutation_feed(num_mutated, seed=args.seed),
            generated_feed(num_generated, seed=args.seed),
        )
        if args.only is not None:
            feed = selected_feed(feed, args.only)
        reports.append(
            run_fuzz(
                door,
                feed,
                num_clients=args.clients,
                num_warmup_inputs=max(200, args.inputs // 100),
                progress=progress,
            )
        )
    print(format_table(*_table(reports)))
    failed = False
    for report in reports:
        for problem in report.problems():
            failed = True
            print(f"{report.door}: {problem}")
    print("all checks passed" if not failed else "CHECKS FAILED")
    sys.exit(1 if failed else 0)


def _table(reports: list[FuzzReport]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "door",
        "inputs",
        "replies",
        "refused",
        "closed",
        "failures",
        "sched faults",
        "good replies",
        "good errors",
        "good max gap s",
        "RSS MB start/peak/end",
        "inputs/s",
    ]
    rows = [
        [
            r.door,
            str(r.num_inputs),
            str(r.outcomes["reply"]),
            str(r.outcomes["refused"]),
            str(r.outcomes["closed"]),
            str(r.num_failures),
            str(r.num_scheduler_faults),
            str(r.num_good_replies),
            str(r.num_good_errors),
            f"{r.good_max_gap_s:.3f}",
            f"{r.rss_start_mb:.0f}/{r.rss_peak_mb:.0f}/{r.rss_end_mb:.0f}",
            f"{r.num_inputs / r.elapsed_s:.0f}",
        ]
        for r in reports
    ]
    return headers, rows


if __name__ == "__main__":
    main()
