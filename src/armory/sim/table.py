"""Plain-text tables of run results, as `armory simulate`, `armory fleet` and `armory sweep`
print them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from armory.report import SimReport
from armory.scheduling.rule_changes import RuleChanges

if TYPE_CHECKING:
    from armory.sim.multi_gpu import MultiGpuReport
    from armory.sim.sweep import SweepCell


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(headers)} headers")
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(w) for cell, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100.0 * fraction:.1f}%"


def format_robots(report: SimReport, *, max_rows: int = 40) -> str:
    """One row per robot; past ``max_rows`` robots, a line saying how many were left out.
    A run over real sockets adds the observation bytes each robot sent per second."""
    headers = ("robot", "weight", "Hz", "starved", "actions/s", "inferences", "age ms")
    wire = any(r.bytes_sent_per_s is not None for r in report.robots)
    if wire:
        headers += ("req/s", "KB/s sent")
    rows = []
    for r in report.robots[:max_rows]:
        row = (
            r.id,
            f"{r.weight:g}",
            f"{r.control_hz:g}",
            _percent(r.starvation),
            f"{r.actions_per_s:.2f}",
            str(r.inferences),
            f"{1e3 * r.mean_age_s:.0f}",
        )
        if wire:
            row += (f"{r.requests_per_s:.1f}", _kilobytes(r.bytes_sent_per_s))
        rows.append(row)
    text = format_table(headers, rows)
    left_out = len(report.robots) - len(rows)
    if left_out > 0:
        text += f"\n... {left_out} more robots (all of them are in the JSON report)"
    return text


def _kilobytes(num_bytes: float | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / 1e3:.0f}"


def format_system(report: SimReport) -> str:
    """The fleet-wide metrics, one ``name: value`` line each."""
    s = report.system
    lines = [
        ("scheduler", report.scheduler),
        ("fleet", f"{report.fleet} ({len(report.robots)} robots, {report.request_mode})"),
        (f"{report.clock} time", f"{report.duration_s:g} s, seed {report.seed}"),
        ("starvation", _percent(s.starvation)),
        ("bound", _percent(s.bound_starvation) + " (least starvation any scheduler can reach)"),
        ("throughput", f"{s.throughput_actions_per_s:.2f} actions/s"),
        ("weighted throughput", f"{s.weighted_throughput:.2f}"),
        ("fairness", f"{s.jain_service:.3f} (Jain's index over robots' 1 - starvation)"),
        ("worst robot", _worst_robot(report)),
        ("mean batch size", f"{s.mean_batch_size:.2f} over {s.num_batches} batches"),
        ("GPU utilization", _percent(s.gpu_utilization)),
        ("freshness", f"{1e3 * s.mean_age_s:.0f} ms mean observation age per action"),
    ]
    if s.bytes_sent_per_robot_per_s is not None:
        lines.append(("sent", f"{_kilobytes(s.bytes_sent_per_robot_per_s)} KB/s per robot"))
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name + ':':<{width + 1}} {value}" for name, value in lines)


def _worst_robot(report: SimReport) -> str:
    """The most starved robot and its starvation, or '-' for a run without robots."""
    if not report.robots:
        return "-"
    worst = max(report.robots, key=lambda r: r.starvation)
    return f"{_percent(worst.starvation)} starved ({worst.id})"


def format_report(report: SimReport, *, max_robot_rows: int = 40) -> str:
    """The per-robot table, a blank line, then the system summary."""
    return format_robots(report, max_rows=max_robot_rows) + "\n\n" + format_system(report)


def format_sweep(cells: Sequence[SweepCell]) -> str:
    """One row per (fleet, scheduler): means over seeds next to the fleet's bound."""
    headers = ("fleet", "scheduler", "seeds", "starved", "bound", "weighted thr.")
    rows = [
        (
            c.fleet,
            c.scheduler,
            str(c.num_seeds),
            _percent(c.starvation),
            _percent(c.bound_starvation),
            f"{c.weighted_throughput:.2f}",
        )
        for c in cells
    ]
    return format_table(headers, rows)


def format_rules(report: SimReport, descriptions: Mapping[str, str]) -> str:
    """How often each rule of the scheduler decided (``--explain``), with what it does."""
    total = sum(report.decisions_by_rule.values())
    if not total:
        return "decisions by rule: none recorded (the server reported no rule counts)"
    lines = [f"decisions by rule ({report.scheduler}, {total} decisions):"]
    width = max(len(r) for r in (*report.decisions_by_rule, *descriptions))
    for rule in [
        *report.decisions_by_rule,
        *(r for r in descriptions if r not in report.decisions_by_rule),
    ]:
        count = report.decisions_by_rule.get(rule, 0)
        lines.append(
            f"  {rule:<{width}s} {count:8d} {100 * count / total:6.1f}%  "
            f"{descriptions.get(rule, '')}"
        )
    if report.rule_changes:
        lines += ["", format_rule_changes(report.rule_changes, base_rule=next(iter(descriptions)))]
    return "\n".join(lines)


def format_rule_changes(changes: Mapping[str, RuleChanges], *, base_rule: str) -> str:
    """What each rule changed against ``base_rule`` alone on the same snapshots: how many
    of its decisions differ, the waits that held the GPU where the base rule would run a
    batch, batches run where it would wait, and, where both run one, the batch sizes and
    the robots the rule put in that the base rule's batch left out."""
    headers = (
        "rule",
        "decisions",
        "changed",
        "held the GPU (mean ms planned)",
        f"ran where {base_rule} waits",
        f"robots a batch ({base_rule})",
        "robots swapped a batch",
    )
    rows = []
    for rule, c in sorted(changes.items(), key=lambda kv: -kv[1].decisions):
        both = max(c.both_ran, 1)
        rows.append(
            (
                rule,
                str(c.decisions),
                f"{c.changed} ({100 * c.changed / max(c.decisions, 1):.1f}%)",
                f"{c.held} ({1e3 * c.held_s / c.held:.1f})" if c.held else "0",
                str(c.ran),
                f"{c.robots / both:.2f} ({c.base_robots / both:.2f})" if c.both_ran else "-",
                f"{c.swapped / both:.2f}" if c.both_ran else "-",
            )
        )
    title = f"what each rule changed, against {base_rule} alone on the same snapshots:"
    return title + "\n" + format_table(headers, rows)


def format_gpus(multi: MultiGpuReport) -> str:
    """One row per GPU of a K-GPU run (``armory simulate --gpus K``)."""
    rows = [
        [
            f"gpu{k}",
            str(g.num_robots),
            _percent(g.starvation),
            _percent(g.gpu_utilization),
            f"{g.fluid_load:.2f}",
        ]
        for k, g in enumerate(multi.gpus)
    ]
    table = format_table(["gpu", "robots", "starved", "busy", "fluid load"], rows)
    return (
        f"placement {multi.placement}: {multi.num_starved_ticks} starved ticks, "
        f"{multi.num_moved} robots moved off a GPU over capacity\n{table}"
    )
