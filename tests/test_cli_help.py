"""The armory command line's help text and option errors read as plain sentences."""

from __future__ import annotations

import pytest

from armory.cli import main
from armory.cli_text import plain_text
from armory.scheduling.registry import scheduler_names

SUBCOMMANDS = ["simulate", "sweep", "serve", "fleet", "serve policy:lerobot", "serve policy:replay"]


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: str) -> str:
    """The help of ``armory <argv>``, rendered wide enough that no line wraps."""
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit) as info:
        main([*argv.split(), "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_plain_text_joins_the_lines_of_each_paragraph() -> None:
    """Indented continuation lines join their paragraph; blank lines and list items stay."""
    docstring = (
        "First line of a field, None\n    keeps it closed.\n\n    Second:\n    - one\n    - two"
    )
    assert (
        plain_text(docstring)
        == "First line of a field, None keeps it closed.\n\nSecond:\n- one\n- two"
    )


def test_plain_text_drops_rst_markup() -> None:
    """Literals and roles lose their backticks; a ~role keeps only the last name."""
    text = "Set ``api_token`` (see :class:`~armory.engine.config.ServerConfig`, :func:`make`)."
    assert plain_text(text) == "Set api_token (see ServerConfig, make)."


@pytest.mark.parametrize("argv", SUBCOMMANDS)
def test_help_shows_no_rst_markup(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: str
) -> None:
    """No subcommand's help shows reStructuredText backticks or roles."""
    text = _help(capsys, monkeypatch, argv)
    assert "``" not in text and ":class:`" not in text and ":func:`" not in text


def test_help_keeps_sentences_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docstring wrapped in the source is one line of help when the terminal is wide."""
    fleet = _help(capsys, monkeypatch, "fleet")
    assert "around every request, so a loopback run resembles the simulated links" in fleet
    serve = _help(capsys, monkeypatch, "serve")
    assert "0 picks a free one, None keeps that door closed" in serve


def test_scheduler_options_panel_is_titled_scheduler(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's tuning flags sit in a panel titled 'scheduler options'."""
    text = _help(capsys, monkeypatch, "simulate")
    assert "scheduler options" in text and "scheduler-options" not in text


@pytest.mark.parametrize("argv", ["sweep", "simulate"])
def test_help_lists_the_scheduler_names(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: str
) -> None:
    """sweep --help and simulate --help name every valid scheduler."""
    text = _help(capsys, monkeypatch, argv)
    assert ", ".join(scheduler_names()) in text


def test_serve_help_speaks_of_all_three_doors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve --help names the openpi, GR00T and LeRobot doors."""
    text = _help(capsys, monkeypatch, "serve")
    assert "openpi WebSocket, GR00T ZeroMQ, LeRobot gRPC" in text


def test_a_config_refusing_its_value_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A value an option group's own check refuses ends in armory's one-line error, exit 2,
    without tyro's internal wrapper name."""
    assert main(["serve", "policy:lerobot"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("armory: error: give exactly one of --policy.path")
    assert err.count("\n") == 1 and "tyro" not in err
