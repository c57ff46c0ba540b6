"""The armory command line: simulate end to end, clear one-line errors, option plumbing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_files import make_fleet_dict, write_fleet_file

from armory.cli import SchedulerOptions, main
from armory.scheduling.config import SchedulerConfig
from armory.scheduling.registry import scheduler_names


def test_simulate_prints_tables_and_writes_the_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """simulate prints a per-robot table and a summary and writes every required JSON key."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict(num_robots=3))
    out = tmp_path / "out" / "report.json"
    argv = ["simulate", "--fleet", str(fleet), "--scheduler", "max-batch", "--duration", "5"]
    assert main([*argv, "--seed", "3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "arm-2" in printed and "starvation:" in printed and "bound:" in printed
    report = json.loads(out.read_text())
    assert report["scheduler"] == "max-batch"
    assert report["seed"] == 3
    system = report["system"]
    for key in (
        "starvation",
        "throughput_actions_per_s",
        "weighted_throughput",
        "jain_service",
        "bound_starvation",
        "mean_batch_size",
    ):
        assert isinstance(system[key], float), key
    assert 0.0 <= system["bound_starvation"] <= 1.0
    assert [r["id"] for r in report["robots"]] == ["arm-0", "arm-1", "arm-2"]
    for robot in report["robots"]:
        assert {"id", "starvation", "actions_per_s", "weight"} <= set(robot)


@pytest.mark.parametrize(
    ("fleet_overrides", "group_overrides", "expected"),
    [
        # Chunk-fraction robots that send holding less than a round trip's ticks: the
        # group and the threshold that would do.
        (
            {"request_mode": "chunk-fraction", "chunk_size_threshold": 0.05},
            {},
            (
                "note: robots of group 'arm' send holding at most 0 of their 10 actions",
                "at least 0.10 covers it",
            ),
        ),
        # Directed robots told to send holding half their chunk or more: the group and
        # what each chunk adds.
        (
            {"request_mode": "directed"},
            {"control_hz": 10.0, "max_execution_horizon": 3},
            (
                "note: robots of group 'arm', served in full, are told to send holding",
                "each chunk adds at most 1",
            ),
        ),
    ],
    ids=["chunk-fraction", "directed"],
)
def test_simulate_notes_what_the_fleet_file_sets_against_any_scheduler(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fleet_overrides: dict[str, object],
    group_overrides: dict[str, object],
    expected: tuple[str, ...],
) -> None:
    """A fleet whose own settings cost it whatever the scheduler gets a note after the
    report naming the group."""
    data = make_fleet_dict(**fleet_overrides)
    data["robots"][0].update(group_overrides)
    fleet = write_fleet_file(tmp_path, data)
    assert main(["simulate", "--fleet", str(fleet), "--duration", "2"]) == 0
    printed = capsys.readouterr().out
    for text in expected:
        assert text in printed


def test_simulate_without_bound_leaves_it_null(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-bound skips the linear program: the report's bound is null."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict())
    out = tmp_path / "report.json"
    argv = ["simulate", "--fleet", str(fleet), "--scheduler", "max-batch", "--duration", "2"]
    assert main([*argv, "--no-bound", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["system"]["bound_starvation"] is None


def test_simulate_is_deterministic_per_seed(tmp_path: Path) -> None:
    """Two runs with the same seed write the same metrics."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict(num_robots=4))
    reports = []
    for n in range(2):
        out = tmp_path / f"r{n}.json"
        argv = ["simulate", "--fleet", str(fleet), "--scheduler", "random", "--duration", "3"]
        assert main([*argv, "--seed", "7", "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        report.pop("timing")
        reports.append(report)
    assert reports[0] == reports[1]


def test_unknown_scheduler_is_one_line_listing_valid_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown scheduler exits non-zero with one stderr line naming every valid scheduler."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict())
    assert main(["simulate", "--fleet", str(fleet), "--scheduler", "fifo"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'fifo'" in err
    for name in scheduler_names():
        assert name in err


BAD_FLEET_FILES = [
    ("robots: [{count: 2}]\nmax_batch: 4\n", "max_batch"),
    ("robots: [{count: 2, control_hz: 0}]\n", "control_hz must be > 0"),
    ("robots: [{count: 2\n", "cannot read fleet file"),
]


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--scheduler", "max-batch"],
        # No server listens on port 9: the file must fail before any connection.
        ["fleet", "--port", "9"],
    ],
    ids=["simulate", "fleet"],
)
@pytest.mark.parametrize(("content", "expected"), BAD_FLEET_FILES)
def test_bad_fleet_file_is_one_line_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    content: str,
    expected: str,
) -> None:
    """A fleet file with an unknown key, a bad value or broken YAML fails in one clear line
    naming the file, for every command that reads fleet files."""
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main([command[0], "--fleet", str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert expected in err and str(path) in err


def test_errors_reach_the_shell_without_a_traceback(tmp_path: Path) -> None:
    """Run as a program, a missing fleet file exits 2 with a one-line message and no traceback."""
    missing = tmp_path / "missing.yaml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "armory.cli",
            "simulate",
            "--fleet",
            str(missing),
            "--scheduler",
            "max-batch",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("armory: error:") and "missing.yaml" in result.stderr


def test_scheduler_options_reach_the_scheduler_config() -> None:
    """Every SchedulerConfig option but name and seed is a CLI flag with the same default."""
    cli_fields = {f.name for f in dataclasses.fields(SchedulerOptions)}
    config_fields = {f.name for f in dataclasses.fields(SchedulerConfig)} - {"name", "seed"}
    assert cli_fields == config_fields
    assert SchedulerOptions().config("max-batch", 0) == SchedulerConfig(name="max-batch")
    deep = SchedulerOptions(lookahead_depth=2).config("lookahead-actions", 5)
    assert (deep.lookahead_depth, deep.seed) == (2, 5)


def test_lookahead_flags_are_accepted(tmp_path: Path) -> None:
    """simulate takes the lookahead options as --kebab-case flags."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict())
    argv = ["simulate", "--fleet", str(fleet), "--scheduler", "lookahead-actions"]
    flags = ["--lookahead-depth", "2", "--lookahead-node-budget", "8", "--duration", "2"]
    assert main([*argv, *flags, "--no-bound"]) == 0


def test_bad_option_value_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid scheduler option fails with the option named, no traceback."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict())
    argv = ["simulate", "--fleet", str(fleet), "--scheduler", "lookahead-actions"]
    assert main([*argv, "--lookahead-depth", "0"]) != 0
    assert "lookahead_depth must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [["simulate"], ["fleet", "--port", "9"], ["serve", "--port", "0"]],
    ids=["simulate", "fleet", "serve"],
)
def test_negative_seed_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """--seed -1 fails in one line naming the option, before any run, server or connection."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict())
    extra = [] if command[0] == "serve" else ["--fleet", str(fleet)]
    assert main([*command, *extra, "--seed", "-1"]) == 2
    err = capsys.readouterr().err
    assert err == "armory: error: --seed must be >= 0, got -1\n"
