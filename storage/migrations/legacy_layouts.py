"""The prompt layouts stores held from revision 0003 to 0010, frozen for the migrations that
write (0003) and read (0011, 0003's downgrade) them.

A layout is a space-separated list of tokens whose pieces, joined, are the prompt:

    p<k>   the first k characters of the previous step's prompt (step_no - 1)
    t<id>  a text of the `prompt_texts` table
    r<j>   raw output of step j          R<j>  the same, escaped as inside a JSON string
    o<j>   observation of step j         O<j>  the same, JSON-escaped
    q      the episode's question        Q     the same, JSON-escaped
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import NamedTuple


class StepText(NamedTuple):
    """What an earlier step contributes to later prompts: its output and observation."""

    raw_output: str
    observation: str


def prompt_hash(prompt: str) -> bytes:
    """SHA-256 of a text's UTF-8 bytes (the key of a text in `prompt_texts`)."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).digest()


def json_inner(text: str) -> str:
    """`text` as it appears inside a JSON string written by `json.dumps(ensure_ascii=False)`."""
    return encode_basestring(text)[1:-1]


def simple_pieces(prompt: str, previous: str | None) -> tuple[int, str]:
    """(characters kept from the previous prompt, the rest): the layout `p<k> t<rest>`."""
    # Character by character, as wanted here: these are texts, not paths.
    keep = len(os.path.commonprefix([previous, prompt])) if previous else 0  # noqa: RUF071
    return keep, prompt[keep:]


def layout_text_ids(layout: str) -> list[int]:
    """The `prompt_texts` ids a layout reads."""
    return [int(tok[1:]) for tok in layout.split() if tok[0] == "t"]


def decode_layout(
    layout: str,
    *,
    texts: Mapping[int, str],
    question: str,
    steps: Mapping[int, StepText],
    previous: str | None,
) -> str:
    """The prompt a layout stands for; ValueError when a part is missing."""
    out: list[str] = []
    for tok in layout.split():
        kind, arg = tok[0], tok[1:]
        if kind == "t":
            out.append(texts[int(arg)])
        elif kind == "p":
            if previous is None:
                raise ValueError("the previous step's prompt is missing")
            out.append(previous[: int(arg)])
        elif kind in "qQ" and not arg:
            out.append(question if kind == "q" else json_inner(question))
        elif kind in "rRoO":
            s = steps[int(arg)]
            field = s.raw_output if kind in "rR" else s.observation
            out.append(field if kind in "ro" else json_inner(field))
        else:
            raise ValueError(f"unknown prompt layout token {tok!r}")
    return "".join(out)


def decode_episode(
    layouts: Sequence[tuple[int, str]],
    *,
    texts: Mapping[int, str],
    question: str,
    steps: Mapping[int, StepText],
) -> dict[int, str]:
    """step_no -> prompt of one episode's (step_no, layout) in step order; a step whose prompt
    cannot be rebuilt (a damaged row) is left out, and the steps built on it too."""
    prompts: dict[int, str] = {}
    for step_no, layout in layouts:
        try:
            prompts[step_no] = decode_layout(
                layout,
                texts=texts,
                question=question,
                steps=steps,
                previous=prompts.get(step_no - 1),
            )
        except (KeyError, ValueError):
            continue
    return prompts
