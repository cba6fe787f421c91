"""The prompt layout codec: any conversation's prompts come back exactly, and the runner's
prompts come down to a few references."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from storage.prompt_layout import (
    Piece,
    ShapeMatcher,
    StepText,
    common_prefix_length,
    decode_episode,
    decode_layout,
    digest_continuing,
    digest_matches,
    encode_pieces,
    join_layout,
    layout_text_ids,
    prompt_hash,
    shape_of,
    step_digest,
)

Render = Callable[[str, str, list[StepText]], str]


def _json_messages(system: str, question: str, turns: list[StepText]) -> str:
    """The runner's prompt: JSON chat messages."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    for t in turns:
        messages += [
            {"role": "assistant", "content": t.raw_output},
            {"role": "user", "content": t.observation},
        ]
    return json.dumps(messages, ensure_ascii=False)


def _chat_template(system: str, question: str, turns: list[StepText]) -> str:
    """A rendered chat template ending in the generation prompt (as a tokenizer writes it)."""
    text = f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
    for t in turns:
        text += f"<|im_start|>assistant\n{t.raw_output}<|im_end|>\n"
        text += f"<|im_start|>user\n{t.observation}<|im_end|>\n"
    return text + "<|im_start|>assistant\n"


def _window(system: str, question: str, turns: list[StepText]) -> str:
    """A renderer that shows only the last two turns: no prompt extends the one before."""
    return _json_messages(system, question, turns[-2:])


def _roundtrip(render: Render, system: str, question: str, steps: list[StepText]) -> list[str]:
    """Encode every step's prompt as the sink does, decode as the reads do; the layouts."""
    texts: dict[str, int] = {}
    layouts, prompts = [], []
    for n in range(1, len(steps) + 1):
        prompt = render(system, question, steps[: n - 1])
        pieces = encode_pieces(
            prompt,
            question=question,
            steps={j: steps[j - 1] for j in range(1, n)},
            step_no=n,
            previous=prompts[-1] if prompts else None,
        )
        layouts.append(join_layout(pieces, lambda t: texts.setdefault(t, len(texts) + 1)))
        prompts.append(prompt)
    decoded, errors = decode_episode(
        list(enumerate(layouts, start=1)),
        texts={i: t for t, i in texts.items()},
        question=question,
        steps=dict(enumerate(steps, start=1)),
    )
    assert errors == {}
    assert [decoded[n] for n in range(1, len(steps) + 1)] == prompts
    return layouts


_text = st.text(max_size=80)
_steps = st.lists(st.builds(StepText, _text, _text), min_size=1, max_size=6)


@given(system=_text, question=_text, steps=_steps)
def test_any_conversation_comes_back_exactly(
    system: str, question: str, steps: list[StepText]
) -> None:
    for render in (_json_messages, _chat_template, _window):
        _roundtrip(render, system, question, steps)


@given(prompts=st.lists(st.text(max_size=60), min_size=1, max_size=5), question=_text)
def test_prompts_of_no_known_shape_come_back_exactly(prompts: list[str], question: str) -> None:
    """Prompts that share nothing with the steps (or each other) are stored as texts."""
    _roundtrip(
        lambda s, q, turns: prompts[len(turns)], "", question, [StepText("", "")] * len(prompts)
    )


def test_a_runner_step_is_a_few_references() -> None:
    system = "You answer a question about a SQLite database.\n" * 40  # ~2 kB
    steps = [
        StepText("I will look first.\nDESCRIBE singer", "table singer (6 rows)\ncolumns: ..."),
        StepText('QUERY: SELECT name FROM singer WHERE country = "France"', "name\nJoe\nAnn"),
        StepText("ANSWER: Joe", "Answer submitted: incorrect."),
    ]
    layouts = _roundtrip(_json_messages, system, "Who sings?\nTables: singer", steps)
    first, *later = layouts
    assert first.split() == ["t1", "Q", "t2"]  # the system prompt and framing, the question
    for n, layout in enumerate(later, start=2):
        tokens = layout.split()
        assert tokens[0].startswith("p") and tokens[2] == f"R{n - 1}" and tokens[4] == f"O{n - 1}"
        assert len(layout) < 40
    # Every step after the first uses the same three framing texts.
    assert len({i for layout in later for i in layout_text_ids(layout)}) == 3


def test_chat_template_steps_are_references_too() -> None:
    steps = [StepText("DESCRIBE singer", "table singer (6 rows)")] * 3
    layouts = _roundtrip(_chat_template, "system prompt", "How many singers?", steps)
    assert all(len(layout) < 40 for layout in layouts[1:])


def test_a_missing_text_is_reported_per_step_and_later_steps_too() -> None:
    prompts, errors = decode_episode(
        [(1, "t1"), (2, "p3 t2"), (3, "t2")],
        texts={2: "!"},
        question="",
        steps={},
    )
    assert prompts == {3: "!"}
    assert set(errors) == {1, 2}
    assert "text 1 is missing" in errors[1] and "previous step" in errors[2]


@given(a=st.text(max_size=40), b=st.text(max_size=40))
def test_common_prefix_length(a: str, b: str) -> None:
    n = common_prefix_length(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


def test_a_learnt_shape_encodes_the_next_step_or_declines() -> None:
    steps = [StepText("DESCRIBE singer", "table singer"), StepText("SAMPLE singer", "1 | Joe")]
    prompts = [_json_messages("sys", "How many?", steps[:n]) for n in range(3)]
    pieces = encode_pieces(
        prompts[1], question="How many?", steps={1: steps[0]}, step_no=2, previous=prompts[0]
    )
    learnt = shape_of(pieces, 2)
    assert learnt is not None
    shape = ShapeMatcher(learnt)
    keep = shape.keep(prompts[2], previous=prompts[1], question="How many?", last=steps[1])
    assert keep == common_prefix_length(prompts[1], prompts[2])
    again = shape.pieces(keep, 3)
    assert [p for p in again if isinstance(p, tuple)][1:] == [("r2",), ("o2",)]
    ids = {t: i for i, t in enumerate(_literals(again))}
    layout = join_layout(again, ids.__getitem__)
    # The template the sink formats once the texts have ids writes the same layout.
    assert shape.template(ids.__getitem__).format(keep, 2) == layout
    decoded = decode_layout(
        layout,
        texts=dict(enumerate(_literals(again))),
        question="How many?",
        steps={1: steps[0], 2: steps[1]},
        step_no=3,
        previous=prompts[1],
    )
    assert decoded == prompts[2]
    # Another renderer's next prompt does not fit: the caller searches instead.
    other = _chat_template("sys", "How many?", steps)
    assert shape.keep(other, previous=prompts[1], question="How many?", last=steps[1]) is None
    # A step that refers to older steps than the last has no reusable shape.
    assert shape_of([("p10",), ("R1",)], 3) is None and shape_of([("t1",)], 2) is None


_SHAPE_ITEMS = st.one_of(
    st.tuples(st.just(True), st.text(min_size=1, max_size=6)),  # framing, braces included
    st.tuples(st.just(False), st.sampled_from("rRoOqQ")),
)


@given(
    previous=st.text(max_size=30),
    cut=st.integers(min_value=0, max_value=30),
    shape=st.lists(_SHAPE_ITEMS, min_size=1, max_size=5).map(tuple),
    last=st.builds(StepText, st.text(max_size=12), st.text(max_size=12)),
    question=st.text(max_size=12),
    tail=st.text(max_size=3),
)
def test_a_shape_keeps_the_longest_common_prefix_or_declines(
    previous: str,
    cut: int,
    shape: tuple[tuple[bool, str], ...],
    last: StepText,
    question: str,
    tail: str,
) -> None:
    """Whatever it is given, a shape's match rebuilds the prompt exactly from the longest
    common prefix, and it matches every prompt that is that prefix plus its text."""
    matcher = ShapeMatcher(shape)
    added = matcher.added(question, last)
    for prompt in (previous[:cut] + added, previous[:cut] + added + tail):
        keep = matcher.keep(prompt, previous=previous, question=question, last=last)
        lcp = common_prefix_length(previous, prompt)
        if prompt == previous[:lcp] + added:
            assert keep == lcp
        if keep is None:
            continue
        assert keep == lcp
        pieces = matcher.pieces(keep, 5)
        literals = _literals(pieces)
        ids = {t: i for i, t in enumerate(literals)}
        layout = join_layout(pieces, ids.__getitem__)
        assert matcher.template(ids.__getitem__).format(keep, 4) == layout
        rebuilt = decode_layout(
            layout,
            texts=dict(enumerate(literals)),
            question=question,
            steps={4: last},
            step_no=5,
            previous=previous,
        )
        assert rebuilt == prompt


def _literals(pieces: list[Piece]) -> list[str]:
    return list(dict.fromkeys(p for p in pieces if isinstance(p, str)))


def test_a_step_digest_checks_a_prompt_in_new_and_older_rows() -> None:
    prompt = '[{"role": "system", "content": "x\u00e9"}]'
    assert len(step_digest(prompt)) == 8
    assert digest_matches(step_digest(prompt), prompt)
    assert digest_matches(prompt_hash(prompt), prompt)  # a row written with all 32 bytes
    assert not digest_matches(step_digest(prompt), prompt + " ")
    assert not digest_matches(prompt_hash(prompt + " "), prompt)
    assert not digest_matches(b"", prompt)  # an empty digest proves nothing


# Any characters, lone surrogates among them (prompts are encoded with surrogatepass).
_any_text = st.text(st.characters(blacklist_categories=()), max_size=80)


def _sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@given(prompt=_any_text, data=st.data())
def test_a_continued_digest_is_the_whole_prompts(prompt: str, data: st.DataObject) -> None:
    """From a state over any prefix (or none), the digest is the whole prompt's, and the state
    it hands on covers the prompt but its tail, whatever the split's characters."""
    keep = data.draw(st.integers(0, len(prompt)))
    tail = data.draw(st.integers(0, len(prompt) + 2))
    known = data.draw(st.booleans())
    kept = hashlib.sha256(prompt[:keep].encode("utf-8", "surrogatepass")) if known else None
    digest, upto = digest_continuing(prompt, keep, tail, kept)
    assert digest == step_digest(prompt)
    assert upto.digest() == _sha256(prompt[: max(len(prompt) - tail, 0)])
    if kept is not None:  # left as it was: a failed batch's history must not change
        assert kept.digest() == _sha256(prompt[:keep])
