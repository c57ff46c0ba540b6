"""How the ``armory`` command line shows docstrings and option errors (used by ``cli.main``).

The subcommands' help comes from the docstrings of frozen dataclasses, written for
readers of the code: wrapped at 100 columns, with reStructuredText markup. tyro
keeps a docstring's line break wherever the next line is indented, which every
continuation line of an attribute docstring is, and prints the markup as is. In
:func:`tyro_text`, help text is one paragraph per paragraph of the docstring, and
a value refused while tyro builds an option group (a ``ValueError`` from a config's
``__post_init__``) ends in the command's own one-line error, not in tyro's box
naming its internal ``__tyro-dummy-inner__`` wrapper.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, NoReturn

import tyro._strings

_LIST_ITEM = re.compile(r"[-*•] |\d+\. ")
_LITERAL = re.compile(r"``([^`]+)``")
_ROLE = re.compile(r":[a-z]+:`~?(?:[^`]*\.)?([^`.]+)`")


def plain_text(docstring: str) -> str:
    """A docstring as help text: each paragraph (and list item) on one line, blank lines
    between paragraphs, ``literals`` and :role:`targets` without their markup."""
    text = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", docstring))
    paragraphs = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        lines: list[str] = []
        for line in block.splitlines():
            line = line.strip()
            if lines and not _LIST_ITEM.match(line):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(p for p in paragraphs if p)


@contextmanager
def tyro_text(on_value_error: Callable[[str], NoReturn]) -> Iterator[None]:
    """While parsing: help text through :func:`plain_text`, and an option group's
    ``ValueError`` passed to ``on_value_error`` (which raises the caller's own error).

    Entered around ``tyro.cli`` by ``cli.main``; restores tyro's own handling on exit.
    """
    original = tyro._strings.remove_single_line_breaks
    _clear_tyro_caches()  # help text tyro cached before must not be served inside, nor after
    tyro._strings.remove_single_line_breaks = plain_text
    try:
        with _value_errors(on_value_error):
            yield
    finally:
        tyro._strings.remove_single_line_breaks = original
        _clear_tyro_caches()


def _clear_tyro_caches() -> None:
    """Forget the docstrings tyro has cached (they hold help text of one formatting)."""
    clear = getattr(getattr(tyro, "_unsafe_cache", None), "clear_cache", None)
    if clear is not None:
        clear()


def _value_errors(on_value_error: Callable[[str], NoReturn]) -> Any:
    """tyro's parse-error hook for values refused while building the options, if this
    tyro has one (without it, tyro's own box reports them)."""
    try:
        from tyro import _errors
    except ImportError:
        return nullcontext()
    failure = getattr(_errors, "InstantiationFailure", None)
    on_parse_error = getattr(_errors, "on_parse_error", None)
    if failure is None or on_parse_error is None:
        return nullcontext()

    def hook(event: object) -> None:
        if isinstance(event, failure):
            on_value_error(" ".join(str(getattr(event, "message", event)).split()))

    return on_parse_error(hook)
