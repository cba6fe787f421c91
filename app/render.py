"""Terminal renderings of store records: the runs table, an episode transcript, tags."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Context, Decimal

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from app.pictured import picture_controls
from app.plural import counted
from rollout_core.records import ChatMessage
from storage.read_models import Annotation, EpisodeDetail, RunSummary, StoredStep, TagCount


def _shown(text: str, style: str = "") -> Text:
    """Text from a store or a file, for the terminal: plain (never markup), controls pictured."""
    return Text(picture_controls(text), style=style)


_EVERY_DIGIT = Context(prec=400, rounding=ROUND_HALF_UP)
"""Digits enough for any float's integer part with its decimals (1e308 has 309)."""


_WRITTEN_OUT = 1e15
"""The size from which a figure is written as a power of ten."""


def fixed(value: float, digits: int, *, sign: bool = False) -> str:
    """`value` with `digits` decimals, a tie rounded away from zero as the dashboard's browser
    tables round (Python's format rounds it to even: 3.625 would read 3.62 here, 3.63 there)."""
    if not math.isfinite(value) or abs(value) >= _WRITTEN_OUT:
        # A reward of 1e308 written out is 309 digits: every other column would give way.
        return f"{value:{'+' if sign else ''}.{digits}e}"
    rounded = Decimal(value).quantize(Decimal(1).scaleb(-digits), context=_EVERY_DIGIT)
    if rounded.is_zero():
        rounded = abs(rounded)  # -0.0001 to 3 digits is 0.000, not -0.000
    return f"{rounded:+f}" if sign else f"{rounded:f}"


def fmt_pct(value: float | None) -> str:
    """0.4567 -> '45.7%'; None -> '-'."""
    return "-" if value is None else f"{fixed(value * 100, 1)}%"


def fmt_num(value: float | None, digits: int = 2) -> str:
    """A number with fixed digits; None -> '-'."""
    return "-" if value is None else fixed(value, digits)


def fmt_signed(value: float | None, digits: int = 3) -> str:
    """A difference with its sign; None -> '-'."""
    return "-" if value is None else fixed(value, digits, sign=True)


def episodes_text(run: RunSummary) -> str:
    """`12/40`, finished of planned (`1,200/4,000`); `12` for a run with no plan."""
    if run.plan is None:
        return f"{run.episodes_finished:,}"
    return f"{run.episodes_finished:,}/{run.plan:,}"


_COLUMNS: tuple[str, ...] = ("id", "name", "policy", "dataset", "status", "episodes")
_COLUMNS += ("accuracy", "reward", "steps", "unparsed", "errors")
_NAMES = ("name", "policy", "dataset")
_NAME_LEAST = 8
"""Characters a name column keeps on a narrow terminal before policy and dataset give way."""


def runs_table(runs: Sequence[RunSummary], width: int | None = None) -> Table:
    """One row per run with its metrics. Given the terminal's `width`, policy and dataset
    are left out where they would squeeze the figures: a figure cut short reads as another."""
    rows: list[tuple[str | Text, ...]] = [
        (
            str(r.id),
            _shown(r.name),
            _shown(r.policy),
            _shown(r.dataset or "-"),
            r.status,
            episodes_text(r),
            fmt_pct(r.accuracy),
            fmt_num(r.mean_reward, 3),
            fmt_num(r.mean_steps, 1),
            fmt_pct(r.parse_failure_rate),
            # Episodes that could not be played or graded: shown apart, never only as wrong.
            Text(str(r.errors), style="bold red") if r.errors else Text("0"),
        )
        for r in runs
    ]
    least = {
        col: _NAME_LEAST if col in _NAMES else max([len(col), *(len(str(r[i])) for r in rows)])
        for i, col in enumerate(_COLUMNS)
    }
    shown = _COLUMNS
    if width is not None and sum(w + 2 for w in least.values()) - 2 > width:
        shown = tuple(c for c in _COLUMNS if c not in ("policy", "dataset"))
    notes = []
    if skipped := [f"{r.name} {r.skipped_lines:,}" for r in runs if r.skipped_lines]:
        # An import's malformed lines: a run that looks whole may have left rows out.
        notes.append(f"bad lines skipped by imports: {', '.join(skipped)}")
    if shown != _COLUMNS:
        notes.append("policy and dataset left out at this width (`--json` holds them)")
    table = Table(
        title="runs",
        title_justify="left",
        box=box.SIMPLE_HEAD,  # no rules between columns: room for the names at 80 columns
        pad_edge=False,
        collapse_padding=True,
        caption=_shown("\n".join(notes)) if notes else None,
        caption_justify="left",
    )
    for col in shown:
        figure = col not in _NAMES
        table.add_column(
            col,
            justify="right" if col in ("id", "episodes", "errors") else "left",
            min_width=least[col] if figure else None,
            no_wrap=figure,
        )
    for row in rows:
        table.add_row(*(cell for col, cell in zip(_COLUMNS, row, strict=True) if col in shown))
    return table


def action_label(step: StoredStep) -> str:
    """A step's action in words. An unparsed output rollscope's environment ran as a QUERY is
    one; an imported or recorded turn without SQL took no action, and is "no SQL"."""
    return step.action or "no SQL"


def episode_transcript(detail: EpisodeDetail, *, prompts: bool = False) -> Group:
    """The question, each step (output, parsed action, observation, reward) and the outcome;
    with `prompts`, each step's prompt first: the chat messages as the model received them."""
    s = detail.summary
    head = Text()
    head.append(f"episode {s.id}", style="bold")
    where = f"  db {s.db_id}" if s.db_id else ""  # an import names no database
    names = f"  run {detail.run.name}  question {s.question_id}#{s.sample_index}{where}\n"
    head.append(picture_controls(names))
    head.append(picture_controls(s.question))  # plain Text: a "[red]" in it is not markup
    if s.forked_from is not None:
        head.append(
            f"\nfork of episode {s.forked_from}: steps before {s.fork_step} replayed",
            style="italic",
        )
    parts: list[Panel | Text | Syntax] = [head]
    if detail.gold_sql:
        gold = Syntax(picture_controls(detail.gold_sql), "sql", word_wrap=True)
        parts += [Text("gold SQL:", style="bold"), gold]
    parts += [_annotation_line(a) for a in detail.annotations]
    for step in detail.steps:
        if prompts:
            parts.append(_prompt_panel(step))
        body = Text()
        if step.replayed:
            body.append("replayed from the source episode\n", style="italic")
        body.append("output: ", style="bold")
        body.append(picture_controls(step.raw_output) + "\n")
        if step.parsed:
            flag = ""
        elif step.fell_back:
            flag = "  (unparsed: fell back to QUERY)"
        else:
            flag = "  (recorded unparsed)"
        action = action_label(step)
        body.append(f"action: {action}{flag}", style="bold yellow" if flag else "bold")
        if step.parsed and step.argument:
            # What the action ran or answered: inside a tag, a tool call or a fence of the
            # output, not always where a reader finds it.
            body.append(" " + picture_controls(step.argument), style="cyan")
        body.append("\nobservation: ", style="bold")
        if step.observation:
            body.append(picture_controls(step.observation), style="red" if step.error else "")
        elif step.error is not None:
            body.append(picture_controls(f"Error: {step.error}"), style="red")
        else:  # NULL: nothing answered the turn; '': the reply was empty
            body.append("(no reply)" if step.observation is None else "(empty)", style="italic")
        title = f"step {step.step_no}  reward {fmt_signed(step.reward, 3)}"
        if step.truncated:
            title += "  output cut"
        parts.append(Panel(body, title=title, title_align="left"))
    outcome = Text(
        f"outcome: {s.outcome or 'unfinished'}  reward {fmt_num(s.reward, 3)}  steps {s.steps}",
        style="bold green" if s.outcome == "correct" else "bold",
    )
    parts.append(outcome)
    if detail.error:
        parts.append(_shown(f"error: {detail.error}", style="red"))
    return Group(*parts)


def _prompt_panel(step: StoredStep) -> Panel:
    body = Text()
    if not step.prompt:
        body.append("(no prompt recorded: its producer did not see it)", style="italic")
    for i, message in enumerate(step.prompt):
        role = picture_controls(str(message.get("role", "?")))
        body.append(("\n" if i else "") + f"[{role}]\n", style="bold cyan")
        text, extra = message_parts(message)
        body.append(picture_controls(text))
        if extra is not None:
            body.append("\n" + picture_controls(extra), style="dim")
    title = f"step {step.step_no} prompt: {counted(len(step.prompt), 'message')}"
    return Panel(body, title=title, title_align="left", border_style="cyan")


def message_parts(message: ChatMessage) -> tuple[str, str | None]:
    """A chat message as the CLI and the dashboard show it: its content as text (content that
    is not text as JSON), and its other fields (the tool calls a model made, a tool's name) as
    one JSON line, or None."""
    content = message.get("content")
    if content is None:
        text = ""
    else:
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}
    return text, json.dumps(extra, ensure_ascii=False) if extra else None


def _annotation_line(a: Annotation) -> Text:
    line = Text()
    line.append(picture_controls(f"tag {a.tag}"), style="bold magenta")
    line.append("" if a.step is None else f" (step {a.step})")
    line.append(picture_controls(f"  {a.author or 'someone'}, {a.created_at:%Y-%m-%d %H:%M} UTC"))
    if a.note:
        line.append(picture_controls(f"\n  {a.note}"))
    return line


def tag_table(counts: Sequence[TagCount]) -> Table:
    """Tags in use with the number of episodes carrying each."""
    table = Table(title="tags", title_justify="left")
    table.add_column("tag")
    table.add_column("episodes", justify="right")
    for c in counts:
        table.add_row(_shown(c.tag), str(c.episodes))
    return table


def annotated_table(details: Sequence[EpisodeDetail], tag: str) -> Table:
    """Episodes carrying a tag: one row per annotation with that tag, its step and note."""
    table = Table(title=_shown(f"episodes tagged {tag}"), title_justify="left")
    for col in ("episode", "run", "question", "outcome", "step", "note", "by"):
        table.add_column(col, justify="right" if col in ("episode", "step") else "left")
    for d in details:
        s = d.summary
        for a in d.annotations:
            if a.tag != tag:
                continue
            table.add_row(
                str(s.id),
                _shown(s.run_name),
                _shown(s.question_id),
                s.outcome or "playing",
                "-" if a.step is None else str(a.step),
                _shown(a.note or ""),
                _shown(a.author or ""),
            )
    return table
