"""Lines of code of the default scheduler's decision path, module by module.

The scheduling goal asks for a decision path (its modules) under 500 lines. A line of
code here is a line that holds a token of a statement: blank lines, comments and
docstrings (of modules, classes, functions and attributes) do not count. The fluid
program (``scheduling/fluid.py``) is listed apart: the decision path solves it, and so
do the starvation bound and placement, whose options it also carries.

    python benchmarks/decision_path_lines.py
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

SCHEDULING = Path(__file__).resolve().parents[1] / "src" / "armory" / "scheduling"
DECISION_PATH = ("just_in_time.py", "fluid_mix.py", "ordering.py", "batch_sizes.py")
"""The modules only the default's decisions run (beside the snapshot it reads)."""
SHARED = ("fluid.py",)
"""The fluid program: solved by the decision path, the bound and placement."""

_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """Lines of ``source`` holding code: not blank, not only a comment, not a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def main() -> None:
    totals = {}
    for group, names in (("decision path", DECISION_PATH), ("fluid program", SHARED)):
        total = 0
        for name in names:
            text = (SCHEDULING / name).read_text()
            lines = code_lines(text)
            total += lines
            print(f"{name:<18} {lines:5d} lines of code  ({len(text.splitlines())} in the file)")
        totals[group] = total
        print(f"{group:<18} {total:5d}\n")
    print(f"decision path with the fluid program: {sum(totals.values())} lines of code")


if __name__ == "__main__":
    main()
