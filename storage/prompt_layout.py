"""A step's prompt as a short layout over text stored elsewhere, rebuilt byte for byte on read.

Every step of an episode shows the model the whole conversation so far, which is the previous
step's prompt plus what that step wrote and saw; stored whole, the prompts were 80% of a step's
bytes (1.46 kB of ~1.9 kB on the demo store). A layout is a space-separated list of tokens whose
pieces, joined, are the prompt:

    p<k>   the first k characters of the previous step's prompt (step_no - 1)
    t<id>  a text of the `prompt_texts` table (system prompt, message framing: stored once)
    r<j>   raw output of step j          R<j>  the same, escaped as inside a JSON string
    o<j>   observation of step j         O<j>  the same, JSON-escaped
    q      the episode's question        Q     the same, JSON-escaped

The encoder knows no prompt format: it keeps the longest common prefix with the previous
prompt, then finds the referenced fields in what is left and stores the rest as texts. A
runner step (JSON chat messages) becomes `p1834 t3 R4 t4 O4 t5`; the first step of an episode
`t1 Q t2` (system prompt and framing, then the question, then the database's table list).
A prompt of any other shape still comes back exactly, just with more of it in texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from hashlib import _Hash as Hash

# A field shorter than this stays inside the surrounding text: referencing "4" or "a" would cut
# the framing into many one-off texts where they happen to occur.
MIN_REFERENCE = 8
# Without the previous prompt as a base (or past what it covers), literal text beyond this
# many characters makes the encoder look for every earlier step's fields, not just the last.
_WIDEN_AFTER = 256


class PromptLayoutError(ValueError):
    """A layout that cannot be rebuilt from what the store holds."""


class StepText(NamedTuple):
    """What an earlier step contributes to later prompts: its output and observation.

    A tuple: the sink makes one a step, and a frozen dataclass cost four times as much."""

    raw_output: str
    observation: str


def prompt_hash(prompt: str) -> bytes:
    """SHA-256 of a text's UTF-8 bytes (the key of a shared text in `prompt_texts`)."""
    return hash_state(prompt).digest()


def hash_state(text: str) -> Hash:
    """The SHA-256 state over a text's UTF-8 bytes (lone surrogates too), to go on from."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass"))


STEP_DIGEST_BYTES = 8
"""What a step keeps of its prompt's SHA-256 to check the rebuilt prompt against: a wrong rebuild
goes unnoticed once in 2^64, and the other 24 bytes were 5% of a step's row. Steps written
before keep all 32; `digest_matches` compares as many as a step holds."""


def step_digest(prompt: str) -> bytes:
    """The digest a step stores of its exact prompt."""
    return prompt_hash(prompt)[:STEP_DIGEST_BYTES]


def digest_continuing(prompt: str, keep: int, tail: int, kept: Hash | None) -> tuple[bytes, Hash]:
    """(`step_digest(prompt)`, the SHA-256 state over all of `prompt` but its last `tail`
    characters); `kept` is the state over `prompt[:keep]`, when known (None: hash it all).

    A step's prompt is mostly the last one's: it keeps what the last step's state covers and
    adds a turn. Hashing only the added text makes a step's digest cost what the step adds,
    not the whole (and growing) prompt: 0.8 us a step instead of 1.3 us at 2 kB, 11 us at
    20 kB. UTF-8 encodes character by character (lone surrogates too, with surrogatepass), so
    the parts' bytes are the whole's.
    """
    cut = max(len(prompt) - tail, 0)
    if kept is None or cut < keep:
        h = hash_state(prompt[:cut])
    else:
        h = kept.copy()
        h.update(prompt[keep:cut].encode("utf-8", "surrogatepass"))
    upto = h.copy()
    h.update(prompt[cut:].encode("utf-8", "surrogatepass"))
    return h.digest()[:STEP_DIGEST_BYTES], upto


def digest_matches(stored: bytes, prompt: str) -> bool:
    """True when `prompt` has the digest a step stored (8 bytes, or 32 in older rows)."""
    stored = bytes(stored)
    return len(stored) >= STEP_DIGEST_BYTES and prompt_hash(prompt)[: len(stored)] == stored


def json_inner(text: str) -> str:
    """`text` as it appears inside a JSON string written by `json.dumps(ensure_ascii=False)`."""
    return encode_basestring(text)[1:-1]


Piece = str | tuple[str]
"""A literal text (str) or a reference token in a 1-tuple, e.g. ("R4",)."""


def encode_pieces(
    prompt: str,
    *,
    question: str,
    steps: Mapping[int, StepText],
    step_no: int,
    previous: str | None,
) -> list[Piece]:
    """The prompt as literal texts and reference tokens (texts get their ids afterwards).

    `steps` holds the episode's earlier steps by number; `previous` is the prompt of step
    `step_no - 1` when known.
    """
    pieces: list[Piece] = []
    rest = prompt
    if previous:
        keep = common_prefix_length(previous, prompt)
        if keep:
            pieces.append((f"p{keep}",))
            rest = prompt[keep:]
    last = steps.get(step_no - 1)
    narrow = _candidates(question, [(step_no - 1, last)] if last is not None else [])
    found = _find(rest, narrow)
    if sum(len(p) for p in found if isinstance(p, str)) > _WIDEN_AFTER and len(steps) > 1:
        earlier = sorted(steps.items(), reverse=True)  # the most recent first
        found = _find(rest, _candidates(question, earlier))
    pieces.extend(found)
    return pieces


def _candidates(question: str, steps: Sequence[tuple[int, StepText]]) -> list[tuple[str, str]]:
    """(needle, token) pairs, each needle once, long enough to be worth a reference."""
    pairs = [p for j, s in steps for p in _step_needles(j, s)] + list(_question_needles(question))
    seen: set[str] = set()
    out = []
    for needle, token in pairs:
        if needle not in seen:
            seen.add(needle)
            out.append((needle, token))
    return out


# Each step's needles serve the next step's prompt (and the widened search): computed once.
@lru_cache(maxsize=4096)
def _step_needles(j: int, s: StepText) -> tuple[tuple[str, str], ...]:
    pairs = (
        (s.raw_output, f"r{j}"),
        (json_inner(s.raw_output), f"R{j}"),
        (s.observation, f"o{j}"),
        (json_inner(s.observation), f"O{j}"),
    )
    return tuple(p for p in pairs if len(p[0]) >= MIN_REFERENCE)


@lru_cache(maxsize=1024)
def _question_needles(question: str) -> tuple[tuple[str, str], ...]:
    pairs = ((question, "q"), (json_inner(question), "Q"))
    return tuple(p for p in pairs if len(p[0]) >= MIN_REFERENCE)


def _find(text: str, candidates: list[tuple[str, str]]) -> list[Piece]:
    """Split `text` at the candidates' occurrences, leftmost first (the longest on a tie)."""
    pieces: list[Piece] = []
    hits = [text.find(needle) for needle, _ in candidates]
    pos = 0
    while True:
        best = -1
        for i, (needle, _) in enumerate(candidates):
            at = hits[i]
            if 0 <= at < pos:
                at = hits[i] = text.find(needle, pos)
            if at < 0:
                continue
            if best < 0 or (at, -len(needle)) < (hits[best], -len(candidates[best][0])):
                best = i
        if best < 0:
            break
        at = hits[best]
        if at > pos:
            pieces.append(text[pos:at])
        needle, token = candidates[best]
        pieces.append((token,))
        pos = at + len(needle)
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces


Shape = tuple[tuple[bool, str], ...]
"""What a step adds to the previous prompt, as (literal?, text or reference kind) items: the
same for every step of every episode when a renderer's framing never changes."""


def shape_of(pieces: Sequence[Piece], step_no: int) -> Shape | None:
    """The shape of a continuation step's pieces; None when they are not one (no `p` base,
    or references to steps before the last)."""
    if not pieces or not isinstance(pieces[0], tuple) or pieces[0][0][0] != "p":
        return None
    last = str(step_no - 1)
    items = []
    for p in pieces[1:]:
        if isinstance(p, str):
            items.append((True, p))
        elif p[0] in ("q", "Q") or (p[0][0] in "rRoO" and p[0][1:] == last):
            items.append((False, p[0][0]))
        else:
            return None
    return tuple(items)


class ShapeMatcher:
    """A learnt shape, compiled for the sink's common case: one expected text, one comparison.

    `keep` finds where a prompt that is the previous prompt plus this shape starts its
    addition (the longest common prefix, as `encode_pieces` takes it). From that, `pieces`
    gives the step's pieces, and `template`, once the shape's texts have ids, its layout.
    """

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.literals = frozenset(item for literal, item in shape if literal)
        self._kinds = frozenset(item for literal, item in shape if not literal)
        # The added text as one format string: the framing literal, the fields by kind.
        self._format = "".join(
            item.replace("{", "{{").replace("}", "}}") if literal else f"{{{item}}}"
            for literal, item in shape
        )

    def added(self, question: str, last: StepText) -> str:
        """The text this shape adds after a step whose output and observation are `last`."""
        kinds = self._kinds
        fields = {}
        if "R" in kinds:  # the runner's JSON prompts: the common case
            fields["R"] = json_inner(last.raw_output)
        if "O" in kinds:
            fields["O"] = json_inner(last.observation)
        if "r" in kinds:
            fields["r"] = last.raw_output
        if "o" in kinds:
            fields["o"] = last.observation
        if "q" in kinds:
            fields["q"] = question
        if "Q" in kinds:
            fields["Q"] = json_inner(question)
        return self._format.format_map(fields)

    def keep(self, prompt: str, *, previous: str, question: str, last: StepText) -> int | None:
        """How much of `previous` the prompt keeps if it is that plus this shape; else None."""
        added = self.added(question, last)
        keep = len(prompt) - len(added)
        if keep < 0 or keep > len(previous) or not prompt.endswith(added):
            return None
        # Where the prompt goes on as the previous one did, the search would keep more.
        if keep < len(previous) and keep < len(prompt) and previous[keep] == prompt[keep]:
            return None
        return keep if previous.startswith(prompt[:keep]) else None

    def pieces(self, keep: int, step_no: int) -> list[Piece]:
        """The pieces of a step that keeps `keep` characters and adds this shape."""
        last = step_no - 1
        out: list[Piece] = [(f"p{keep}",)]
        for literal, item in self.shape:
            out.append(item if literal else (item if item in "qQ" else f"{item}{last}",))
        return out

    def template(self, text_id: Callable[[str], int]) -> str:
        """The layout as a format string of (keep, last step number), the texts' ids in it."""
        tokens = ["p{0}"]
        for literal, item in self.shape:
            if literal:
                tokens.append(f"t{text_id(item)}")
            else:
                tokens.append(item if item in "qQ" else item + "{1}")
        return " ".join(tokens)


def common_prefix_length(a: str, b: str) -> int:
    """Length of the longest common prefix of a and b, by C-level comparisons."""
    n = min(len(a), len(b))
    if b.startswith(a[:n]):
        return n
    # Gallop back from the end (a prompt usually drops a short tail of the last one: `]`, or
    # a chat template's generation prompt), then bisect between the last miss and the hit.
    miss, back = n, 1
    while back < n and not b.startswith(a[: n - back]):
        miss, back = n - back, back * 2
    lo, hi = max(0, n - back), miss  # prefix lo matches, prefix hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(a[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


def join_layout(pieces: Sequence[Piece], text_id: Callable[[str], int]) -> str:
    """The stored layout of encoded pieces, literal texts replaced by their ids."""
    return " ".join(p[0] if isinstance(p, tuple) else f"t{text_id(p)}" for p in pieces)


def layout_text_ids(layout: str) -> list[int]:
    """The `prompt_texts` ids a layout reads."""
    return [int(tok[1:]) for tok in layout.split() if tok[0] == "t"]


def decode_layout(
    layout: str,
    *,
    texts: Mapping[int, str],
    question: str,
    steps: Mapping[int, StepText],
    step_no: int,
    previous: str | None,
) -> str:
    """The exact prompt a layout stands for; PromptLayoutError when a part is missing."""
    out: list[str] = []
    for tok in layout.split():
        kind, arg = tok[0], tok[1:]
        if kind == "t":
            text = texts.get(int(arg))
            if text is None:
                raise PromptLayoutError(f"step {step_no}: prompt text {arg} is missing")
            out.append(text)
        elif kind == "p":
            if previous is None:
                raise PromptLayoutError(f"step {step_no}: the previous step's prompt is missing")
            out.append(previous[: int(arg)])
        elif kind in "qQ" and not arg:
            out.append(question if kind == "q" else json_inner(question))
        elif kind in "rRoO":
            s = steps.get(int(arg))
            if s is None:
                raise PromptLayoutError(f"step {step_no}: refers to missing step {arg}")
            field = s.raw_output if kind in "rR" else s.observation
            out.append(field if kind in "ro" else json_inner(field))
        else:
            raise PromptLayoutError(f"step {step_no}: unknown prompt layout token {tok!r}")
    return "".join(out)


def decode_episode(
    layouts: Sequence[tuple[int, str]],
    *,
    texts: Mapping[int, str],
    question: str,
    steps: Mapping[int, StepText],
) -> tuple[dict[int, str], dict[int, str]]:
    """Prompts of one episode's steps from (step_no, layout) in step order.

    Returns (step_no -> prompt, step_no -> why it could not be rebuilt): a damaged row must
    not hide the rest of the episode (its later steps, based on it, fail too).
    """
    prompts: dict[int, str] = {}
    errors: dict[int, str] = {}
    for step_no, layout in layouts:
        try:
            prompts[step_no] = decode_layout(
                layout,
                texts=texts,
                question=question,
                steps=steps,
                step_no=step_no,
                previous=prompts.get(step_no - 1),
            )
        except ValueError as exc:  # PromptLayoutError, or a token that is not a number
            errors[step_no] = str(exc)
    return prompts, errors
