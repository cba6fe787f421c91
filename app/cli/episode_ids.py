"""The EPISODE argument of `show`, `tag` and `fork`: an episode id as the store numbers them."""

from __future__ import annotations

import re

import typer


def episode_id(text: str) -> int:
    """Digits alone. Python's `int` also reads `1_0` (as 10), ` 7` and other scripts' digits,
    which would open an episode the user did not name."""
    if not re.fullmatch(r"[0-9]+", text):
        raise typer.BadParameter(
            f"{text!r} is not an episode id: give the number the dashboard or "
            "`rollscope export` shows, as 17"
        )
    return int(text)
