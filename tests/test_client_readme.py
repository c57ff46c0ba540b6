"""The client package's README example runs as written against `armory serve`'s default
policy (the mock), only the port changed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from server_harness import make_mock, running_server

README = Path(__file__).resolve().parents[1] / "packages" / "armory-client" / "README.md"


def _usage_example() -> str:
    """The first Python block under the README's '## Usage' heading."""
    usage = README.read_text().split("## Usage", 1)[1]
    match = re.search(r"```python\n(.*?)```", usage, re.DOTALL)
    assert match is not None, "no Python example under ## Usage"
    return match.group(1)


def test_usage_example_runs_against_the_mock(capsys: pytest.CaptureFixture[str]) -> None:
    """Every input the example sends is one the mock declares, and it gets a chunk back."""
    code = _usage_example()
    assert '"127.0.0.1", 8000' in code
    namespace: dict[str, object] = {}
    with running_server(make_mock()) as server:
        exec(code.replace("8000", str(server.port)), namespace)
    assert namespace["actions"].shape == (10, 7)  # type: ignore[attr-defined]
    assert "observation/image" in capsys.readouterr().out
