"""armory sweep: the grid, its aggregation, and the csv, json and png files it writes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from fleet_files import make_fleet_dict, write_fleet_file

from armory.cli import main
from armory.scheduling.config import SchedulerConfig
from armory.sim import sweep


@pytest.mark.parametrize(
    ("name", "num_robots", "family"),
    [
        ("l40s-pi05-half-fast-6-w3", 6, "l40s-pi05-half-fast-w3"),
        ("l40s-pi05-homogeneous-10", 10, "l40s-pi05-homogeneous"),
        ("scale-1000", 1000, "scale"),
        ("mixed-rate", 8, "mixed-rate"),
        ("2-arms-2", 2, "2-arms"),
        ("4", 4, "4"),
    ],
)
def test_fleet_family_drops_the_robot_count(name: str, num_robots: int, family: str) -> None:
    """The family is the name without its last dash-separated number equal to the robot count."""
    assert sweep.fleet_family(name, num_robots) == family


def test_sweep_writes_csv_json_and_one_plot_per_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 fleets x 2 schedulers x 1 seed: 4 csv rows, matching json, one png for the family."""
    fleets = tmp_path / "fleets"
    small = write_fleet_file(fleets, make_fleet_dict("tiny-2", num_robots=2))
    write_fleet_file(fleets, make_fleet_dict("tiny-3", num_robots=3), ".json")
    out = tmp_path / "out"
    argv = ["sweep", "--fleets", str(small), str(fleets / "tiny-3.json")]
    argv += ["--schedulers", "max-batch", "round-robin", "--seeds", "1", "--duration", "3"]
    assert main([*argv, "--out", str(out)]) == 0
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == sweep.CSV_COLUMNS
    assert [(r["fleet"], r["scheduler"]) for r in rows] == [
        ("tiny-2", "max-batch"),
        ("tiny-2", "round-robin"),
        ("tiny-3", "max-batch"),
        ("tiny-3", "round-robin"),
    ]
    assert all(0.0 <= float(r["bound_starvation"]) <= 1.0 for r in rows)
    data = json.loads((out / "results.json").read_text())
    assert len(data["runs"]) == 4 and len(data["cells"]) == 4
    assert data["runs"][0]["starvation"] == pytest.approx(float(rows[0]["starvation"]))
    png = out / "tiny.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tiny-3" in capsys.readouterr().out


def test_sweep_rejects_an_unknown_scheduler_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown scheduler name fails at once, writing nothing."""
    fleet = write_fleet_file(tmp_path, make_fleet_dict())
    out = tmp_path / "out"
    argv = ["sweep", "--fleets", str(fleet), "--schedulers", "max-batch", "nope"]
    assert main([*argv, "--out", str(out)]) != 0
    assert "'nope'" in capsys.readouterr().err
    assert not out.exists()


def test_directories_expand_to_their_fleet_files_in_order(tmp_path: Path) -> None:
    """A directory stands for its .yaml/.yml/.json files, sorted; other files are ignored."""
    for name in ("b", "a"):
        write_fleet_file(tmp_path, make_fleet_dict(name))
    write_fleet_file(tmp_path, make_fleet_dict("c"), ".json")
    (tmp_path / "notes.txt").write_text("not a fleet")
    assert [f.name for f in sweep.load_fleets([tmp_path])] == ["a", "b", "c"]


def test_two_fleets_with_one_name_are_rejected(tmp_path: Path) -> None:
    """Fleet names key the results, so a name may appear only once in a sweep."""
    first = write_fleet_file(tmp_path / "x", make_fleet_dict("same"))
    second = write_fleet_file(tmp_path / "y", make_fleet_dict("same"))
    with pytest.raises(ValueError, match="'same'"):
        sweep.load_fleets([first, second])


def test_aggregate_means_over_seeds() -> None:
    """A cell holds the mean starvation and weighted throughput over its seeds."""
    base = dict(fleet="f-2", num_robots=2, scheduler="s", bound_starvation=0.1)
    stats = dict(throughput=1.0, jain_service=1.0, mean_batch_size=1.0)
    runs = [
        sweep.SweepRun(**base, **stats, seed=0, starvation=0.2, weighted_throughput=10.0),
        sweep.SweepRun(**base, **stats, seed=1, starvation=0.4, weighted_throughput=20.0),
    ]
    (cell,) = sweep.aggregate(runs)
    assert (cell.family, cell.num_seeds) == ("f", 2)
    assert cell.starvation == pytest.approx(0.3)
    assert cell.starvation_std == pytest.approx(0.1)
    assert cell.weighted_throughput == pytest.approx(15.0)


def test_results_do_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    """Two worker processes return the same runs in the same order as one."""
    fleets = [
        sweep.read_fleet(write_fleet_file(tmp_path, make_fleet_dict(f"w-{n}", n))) for n in (2, 3)
    ]
    configs = [SchedulerConfig(name="random"), SchedulerConfig(name="max-batch")]
    grid = dict(duration_s=2.0, with_bound=False)
    one = sweep.run_grid(fleets, configs, [0, 1], workers=1, **grid)
    two = sweep.run_grid(fleets, configs, [0, 1], workers=2, **grid)
    assert one == two
    assert [(r.fleet, r.scheduler, r.seed) for r in one][:3] == [
        ("w-2", "random", 0),
        ("w-2", "random", 1),
        ("w-2", "max-batch", 0),
    ]


def test_a_repeated_scheduler_runs_once(tmp_path: Path) -> None:
    """A scheduler named twice is swept once, not counted as a second seed."""
    fleets = [sweep.read_fleet(write_fleet_file(tmp_path, make_fleet_dict("r-2", 2)))]
    config = SchedulerConfig(name="max-batch")
    runs = sweep.run_grid(fleets, [config, config], [0], duration_s=1.0, with_bound=False)
    assert [(r.scheduler, r.seed) for r in runs] == [("max-batch", 0)]
    (cell,) = sweep.aggregate(runs)
    assert cell.num_seeds == 1


def test_directories_list_fleets_in_natural_order(tmp_path: Path) -> None:
    """fleet-2 comes before fleet-10 (numbers by value, not as text)."""
    for name in ("fleet-10", "fleet-2", "fleet-1"):
        write_fleet_file(tmp_path, make_fleet_dict(name))
    assert [p.stem for p in sweep.fleet_paths([tmp_path])] == ["fleet-1", "fleet-2", "fleet-10"]


def _cell(scheduler: str, num_robots: int, bound: float | None = 0.1) -> sweep.SweepCell:
    return sweep.SweepCell(
        family="f",
        fleet=f"f-{num_robots}",
        num_robots=num_robots,
        scheduler=scheduler,
        num_seeds=1,
        starvation=0.2,
        starvation_std=0.0,
        weighted_throughput=10.0,
        bound_starvation=bound,
    )


def _line_colors(cells: list[sweep.SweepCell]) -> dict[str, str]:
    starved_ax = sweep.family_figure(cells).axes[0]
    return {line.get_label(): line.get_color() for line in starved_ax.get_lines()}


def test_plot_colours_follow_the_scheduler_not_the_argument_order() -> None:
    """A scheduler has the same colour whichever order, or company, it is swept in."""
    cells = [_cell(name, n) for name in ("max-batch", "round-robin") for n in (2, 4)]
    forward, backward = _line_colors(cells), _line_colors(cells[::-1])
    alone = _line_colors([c for c in cells if c.scheduler == "round-robin"])
    assert forward == backward
    assert forward["round-robin"] == alone["round-robin"] != forward["max-batch"]


def test_a_one_fleet_bound_is_drawn_and_an_absent_one_is_not_in_the_legend() -> None:
    """One fleet's bound is a visible mark; without a bound the legend names none."""
    starved_ax = sweep.family_figure([_cell("max-batch", 2)]).axes[0]
    (bound,) = [line for line in starved_ax.get_lines() if line.get_label() == "bound"]
    assert bound.get_marker() not in (None, "None", "")
    legend = sweep.family_figure([_cell("max-batch", 2, bound=None)]).axes[0].get_legend()
    assert "bound" not in [text.get_text() for text in legend.get_texts()]
