"""`armory-client plot TRACE`: a runtime trace drawn as a PNG."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from armory_client.cli import main
from test_armory_client_runtime import PERIOD_S, FakeClient, FakeClock, FakeRobot, make_config
from test_armory_client_runtime import run_runtime as run_fake_runtime

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_trace(tmp_path: Path) -> Path:
    """The trace of a 1 s virtual-time run whose chunks land 2.5 ticks after sending."""
    clock = FakeClock()
    client = FakeClient(clock, delay_s=2.5 * PERIOD_S)
    runtime, _ = run_fake_runtime(
        clock, FakeRobot(clock), client, make_config(request_mode="threshold")
    )
    path = tmp_path / "trace.json"
    runtime.write_trace(path)
    return path


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """plot TRACE -o OUT draws the trace to OUT and prints its path."""
    pytest.importorskip("matplotlib")
    trace = write_trace(tmp_path)
    out = tmp_path / "queue.png"
    assert main(["plot", str(trace), "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert capsys.readouterr().out.strip() == str(out)


def test_plot_defaults_to_the_trace_name(tmp_path: Path) -> None:
    """Without -o the PNG goes beside the trace, TRACE.png."""
    pytest.importorskip("matplotlib")
    trace = write_trace(tmp_path)
    assert main(["plot", str(trace)]) == 0
    assert trace.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)


def test_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing matplotlib is a one-line error naming the plot extra, exit status 1."""
    trace = write_trace(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["plot", str(trace)]) == 1
    assert "armory-client[plot]" in capsys.readouterr().err


def test_plot_refuses_a_file_that_is_not_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not JSON, or JSON that is not a trace: a clear error naming the file."""
    for text, match in [("{", "not JSON"), (json.dumps({"version": 1}), "lacks 'config'")]:
        path = tmp_path / "bad.json"
        path.write_text(text)
        assert main(["plot", str(path)]) == 1
        err = capsys.readouterr().err
        assert str(path) in err and match in err
