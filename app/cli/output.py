"""What the CLI prints: results on stdout, progress and one-line errors on stderr."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from app.pictured import picture_controls
from rollout_core.clip import clip
from rollout_core.errors import RollscopeError

# Piped output (CI logs, `| less`) gets a wide table rather than rich's 80-column default.
# Printed text is taken as it is: it names runs, tags and paths, where "[red]" is text, not
# markup, and a number is not to be coloured. A message that styles says `markup=True`.
out = Console(width=None if sys.stdout.isatty() else 150, markup=False, highlight=False)
err = Console(
    stderr=True, width=None if sys.stderr.isatty() else 150, markup=False, highlight=False
)

USER_ERRORS = (RollscopeError, OSError)
"""The project's own errors (bad input, an unusable file or store) and file errors: one line,
exit 2. Anything else is a bug and keeps its traceback."""


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, a non-zero exit, no traceback."""
    # The message names paths and files' values: `[red]` in one is text, not markup.
    shown = escape(picture_controls(message))
    err.print(f"[bold red]error:[/] {shown}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def one_line(exc: BaseException) -> str:
    """An exception's message as one line (KeyError's quotes dropped; a file error's name cut
    to a line's length: a name too long for the system is one the user gave)."""
    text = str(exc).strip()
    if isinstance(exc, KeyError):
        text = text.strip("'\"")
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.strerror}: {clip(str(exc.filename), 200)}"
    text = text or type(exc).__name__
    return text.splitlines()[0]


def jsonable(value: Any) -> Any:
    """Records' dicts with dates as ISO text, for `--json`."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
