"""Each command's `--help` prints its description as paragraphs that wrap at the terminal's
width, not at the line breaks of the source's docstring."""

from __future__ import annotations

import inspect

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import cli

COMMANDS = sorted(get_command(cli).commands)  # type: ignore[attr-defined]


def paragraphs(help_text: str) -> list[str]:
    return [" ".join(p.split()) for p in inspect.cleandoc(help_text).split("\n\n")]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_prints_each_paragraph_of_the_description_on_one_line(name: str) -> None:
    command = get_command(cli).commands[name]  # type: ignore[attr-defined]
    shown = CliRunner().invoke(cli, [name, "--help"], env={"COLUMNS": "400"}).output
    lines = [" ".join(line.split()) for line in shown.splitlines()]
    for paragraph in paragraphs(command.help or ""):
        # Code spans print as code, without their backticks.
        assert paragraph.replace("`", "") in lines, f"{name}: {paragraph!r} not one line"


def test_the_command_list_gives_each_summary_on_one_line() -> None:
    shown = CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "400"}).output
    lines = [" ".join(line.strip(" │").split()) for line in shown.splitlines()]
    for name in COMMANDS:
        command = get_command(cli).commands[name]  # type: ignore[attr-defined]
        summary = paragraphs(command.help or "")[0].replace("`", "")
        assert f"{name} {summary}" in lines
