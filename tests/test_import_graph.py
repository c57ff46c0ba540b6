"""Imports inside the server run one way, down the layers docs/architecture.md draws.

Every import of every module under src/armory (at any depth: in functions and under
``TYPE_CHECKING`` too) is read with `ast`, and the module it names is mapped to its
part (``armory.engine.session`` -> ``engine``). A part may import itself and any part
of a lower layer, never one of its own layer or above, so no cycle can form between
parts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "armory"

LAYERS: tuple[frozenset[str], ...] = (
    # The root package (its __file__ locates the repository and the worker's path).
    frozenset({"armory"}),
    # Shared types and errors, the latency model.
    frozenset({"core"}),
    # Pure decisions; a policy's worker process; fleet files.
    frozenset({"scheduling", "workers", "fleet_spec"}),
    # Policies; the metrics and report of a fleet run; the server's own metrics and logs;
    # which replica serves each robot; a running server's /stats as its drivers read it.
    frozenset({"policies", "report", "observe", "placement", "server_stats"}),
    frozenset({"engine"}),
    frozenset({"transports"}),
    frozenset({"serve"}),
    # What drives the server or the shared decision step: simulator, real-socket fleet,
    # evaluation, fuzzing, the cluster of servers.
    frozenset({"sim", "fleet", "eval", "fuzz", "cluster"}),
    frozenset({"cli"}),
)
"""Parts from the bottom up."""

SERVING = frozenset(
    {"armory", "core", "scheduling", "policies", "observe", "engine", "transports", "serve"}
)
"""The parts that answer robots: they speak the wire contract, not the robot's runtime."""
SERVING_CLIENT_MODULES = ("armory_client.wire", "armory_client.image_prep")
"""What of the client package the serving parts may import: the wire contract, and the
image resizing robots apply (the LeRobot door resizes its robots' frames alike)."""


def part_of(module: str) -> str:
    """The part a module of Armory belongs to (``armory.cli_text`` is the command line's)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "armory"
    return "cli" if parts[1] == "cli_text" else parts[1]


def layer_of(part: str) -> int:
    for index, layer in enumerate(LAYERS):
        if part in layer:
            return index
    raise AssertionError(f"part {part!r} is in no layer of tests/test_import_graph.py")


def module_name(path: Path) -> str:
    names = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in a source file."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            yield node.lineno, name
            # `from armory import sim` imports the part sim, not only the root.
            for alias in node.names:
                if name == "armory":
                    yield node.lineno, f"armory.{alias.name}"


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "lerobot_proto" not in p.parts)


def violations(paths: list[Path]) -> list[str]:
    """Every import that runs up or sideways between parts, one line each."""
    found = []
    for path in paths:
        here = part_of(module_name(path))
        for line, name in imports(path):
            top = name.split(".")[0]
            where = f"{path.relative_to(SRC)}:{line}"
            if top == "armory":
                there = part_of(name)
                if there != here and layer_of(there) >= layer_of(here):
                    found.append(f"{where}: {here} imports {name} ({there}, not below it)")
            elif (
                top == "armory_client"
                and here in SERVING
                and not name.startswith(SERVING_CLIENT_MODULES)
            ):
                found.append(f"{where}: {here} imports {name}, not the wire contract")
    return found


def test_every_part_has_a_layer() -> None:
    """Each top-level module and subpackage of armory is placed in a layer."""
    for path in sources():
        layer_of(part_of(module_name(path)))


def test_imports_run_down_the_layers() -> None:
    """No module imports a part of its own layer or above, and the serving parts take
    nothing of the client package but the wire contract (and image resizing)."""
    assert violations(sources()) == []


@pytest.mark.parametrize(
    ("module", "source", "message"),
    [
        ("scheduling/x.py", "from armory.engine.session import Session\n", "not below"),
        ("policies/x.py", "from ..engine import errors\n", "not below"),
        ("sim/x.py", "import armory.fleet.runner\n", "not below"),
        ("engine/x.py", "from armory_client import PolicyClient\n", "not the wire"),
        ("core/x.py", "from armory import scheduling\n", "not below"),
    ],
)
def test_the_check_catches_an_import_that_runs_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, message: str
) -> None:
    """A module written against the order is reported with its file and line."""
    monkeypatch.setattr(f"{__name__}.SRC", tmp_path)
    path = tmp_path / "armory" / module
    path.parent.mkdir(parents=True)
    path.write_text(source)
    (found,) = violations([path])
    assert message in found and f"armory/{module}:1" in found
