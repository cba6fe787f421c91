"""The `rollscope` command line: parse, build a spec, call one function, print, exit.

Each command group lives in its own module; this one only assembles them. Exit codes: 0 done,
1 the run (or the store under it) failed, 2 bad input, 130 stopped (Ctrl-C, SIGTERM, cancel).
"""

from __future__ import annotations

import atexit
import signal
import sys

import typer
from rich.markup import escape

from app.cli.compare import compare
from app.cli.demo import demo
from app.cli.env_server import env_server
from app.cli.fork import fork
from app.cli.importer import import_command
from app.cli.output import err, out
from app.cli.read import export, runs, show
from app.cli.run import run_command
from app.cli.serve import dashboard
from app.cli.store_admin import migrate
from app.cli.store_failures import number_out_of_range, store_trouble
from app.cli.tags import tag, tags

cli = typer.Typer(
    name="rollscope",
    help="Run, record, replay and compare text-to-SQL agent rollouts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Markdown joins a docstring's wrapped lines into paragraphs; "rich" kept the line
    # breaks of every paragraph after the first, ragged at any terminal width.
    rich_markup_mode="markdown",
)
for name, command in (
    ("run", run_command), ("fork", fork), ("tag", tag), ("tags", tags), ("runs", runs),
    ("show", show), ("compare", compare), ("export", export), ("dashboard", dashboard),
    ("migrate", migrate),
    ("demo", demo), ("env-server", env_server), ("import", import_command),
):  # fmt: skip
    cli.command(name)(command)


def main() -> None:
    """Console entry point."""
    atexit.register(_ignore_stops)
    try:
        code = cli(standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        exit_code = getattr(exc, "exit_code", None)
        if hasattr(exc, "format_message") and isinstance(exit_code, int):
            _usage_error(exc, exit_code)
        if number_out_of_range(exc):
            from storage.models import BIG_INTEGER_RANGE, INTEGER_RANGE

            held = (
                f"ids up to {BIG_INTEGER_RANGE.stop - 1:,}; steps and counts up to "
                f"{INTEGER_RANGE.stop - 1:,}"
            )
            err.print(
                f"[bold red]error:[/] a number given is past what the store holds ({held}); "
                "check the numbers in the command",
                markup=True,
                soft_wrap=True,
            )
            sys.exit(2)
        trouble = store_trouble(exc)
        if trouble is None:
            raise  # a bug: its traceback is what to report
        err.print(
            f"[bold red]error:[/] {escape(f'{trouble.cause}: {trouble.fix}')}, then try again",
            markup=True,
            soft_wrap=True,
        )
        sys.exit(trouble.code)
    sys.exit(code if isinstance(code, int) else 0)


def _ignore_stops() -> None:
    """The command is over and its exit code set: a stop asked for while Python shuts down
    (connections closed, modules freed) must not turn that code into "killed"."""
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, signal.SIG_IGN)


def _usage_error(exc: Exception, exit_code: int) -> None:
    """Click's usage errors (unknown flag, wrong type): one line like every other error, not a
    five-line box. typer vendors click, so its exceptions are matched by their shape."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        out.print(exc.format_message())  # type: ignore[attr-defined]
        sys.exit(exit_code)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    err.print(f"[bold red]error:[/] {escape(message + hint)}", markup=True, soft_wrap=True)
    sys.exit(exit_code)
