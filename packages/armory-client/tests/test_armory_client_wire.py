"""The wire contract (`armory_client.wire`) depends on nothing but numpy and msgpack."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import armory_client.wire

PACKAGE = Path(armory_client.wire.__file__).resolve().parents[1]
ALLOWED_THIRD_PARTY = {"numpy", "msgpack"}
"""Outside the standard library, the only packages the contract may import."""
ALLOWED_OWN = ("armory_client.wire", "armory_client.errors")
"""Within the client package: the contract itself and the exception tree."""


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules a source file imports, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module or "")
    return names


def test_wire_imports_only_stdlib_numpy_and_msgpack() -> None:
    """Every module of the contract imports the standard library, numpy, msgpack, the
    contract's own modules and the exception tree, nothing else (no websockets, no
    runtime, no server)."""
    sources = sorted((PACKAGE / "wire").glob("*.py"))
    assert {p.stem for p in sources} >= {"codec", "queue_state", "reply_state", "ordering"}
    bad = {}
    for path in sources:
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY:
                continue
            if name == "armory_client.wire" or name.startswith(ALLOWED_OWN):
                continue
            bad.setdefault(path.name, []).append(name)
    assert bad == {}


def test_exception_tree_imports_nothing() -> None:
    """The contract's errors come from a module with no imports beyond __future__."""
    assert imported_modules(PACKAGE / "errors.py") <= {"__future__"}


def test_contract_names_are_the_clients() -> None:
    """What the package exports at its top level is the contract's very objects."""
    import armory_client

    for name in ("ARMORY_KEY", "WIRE_VERSION", "RobotState", "ReplyState", "packb", "unpackb"):
        assert getattr(armory_client, name) is getattr(armory_client.wire, name)
