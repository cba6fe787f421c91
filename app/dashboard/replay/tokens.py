"""A model output with each token shaded by its probability (or entropy), as escaped text.

Model output is data: every piece of text and every attribute value goes through
`html.escape`, so the markup holds nothing but the spans built here (each token's text is a
text node, never markup), and Streamlit's `st.html` sanitizes it again (DOMPurify, scripts
off). A token's numbers show on hover or when it is clicked (focused): probability,
log-probability, entropy and the recorded alternatives, from a `data-tip` attribute drawn by
CSS, so the text a reader selects and copies is exactly the output (its control characters
as their pictures, `picture_controls`). A long output scrolls in a box no taller than
`show_text`'s (BOX_PX).
"""

from __future__ import annotations

import html
import json
import math
import re
from typing import Literal

import streamlit as st

from app.dashboard.components.render import BOX_PX
from app.pictured import picture_controls
from app.render import fmt_num
from rollout_core.records import TokenTrace
from storage.read_models import StoredStep

Shade = Literal["probability", "entropy"]
SHADES: tuple[Shade, ...] = ("probability", "entropy")
ENTROPY_FULL = 3.0
"""Entropy (nats) shaded at full strength: about a uniform choice among 20 tokens."""
NO_TOKENS = (
    "Not shaded by token confidence, as this step's record holds none: token "
    "log-probability and entropy."
)
_MAX_ALPHA = 0.75
_CSS = """<style>
.rs-tokens { font-family: "Source Code Pro", monospace; font-size: 0.85rem; line-height: 1.9;
  white-space: pre-wrap; word-break: break-word; padding: 0.6rem 0.8rem; box-sizing: border-box;
  overflow-y: auto;
  border: 1px solid rgba(49, 51, 63, 0.2); border-radius: 0.5rem; }
.rs-tok { position: relative; border-radius: 2px; cursor: pointer; }
.rs-tok:hover, .rs-tok:focus { outline: 1px solid #31333f; }
.rs-tok:hover::after, .rs-tok:focus::after { content: attr(data-tip); position: absolute;
  left: 0; top: 1.6em; z-index: 10; white-space: pre; background: #31333f; color: #fff;
  padding: 0.3rem 0.5rem; border-radius: 0.3rem; font-size: 0.75rem; line-height: 1.4;
  pointer-events: none; }
</style>"""


def token_strength(trace: TokenTrace, i: int, shade: Shade) -> float | None:
    """How strongly token i is shaded, in [0, 1]: 1 - its probability, or its entropy over
    ENTROPY_FULL; None when that number was not recorded."""
    if shade == "probability":
        if trace.logprobs is None:
            return None
        return min(1.0, max(0.0, 1.0 - math.exp(trace.logprobs[i])))
    if trace.entropies is None:
        return None
    return min(1.0, max(0.0, trace.entropies[i] / ENTROPY_FULL))


def quoted(text: str) -> str:
    r"""A token's text as a JSON string, with the sequences for which DOMPurify drops a whole
    attribute (`</script`, `-->`, `]>`: its guard against markup hidden in attributes)
    written with JSON's own escapes (`<\/`, `\u003e`), as JSON embedded in HTML is."""
    out = json.dumps(text, ensure_ascii=False).replace("</", "<\\/")
    return re.sub(r"(--!?|\])>", lambda m: m.group(1) + "\\u003e", out)


def token_tip(trace: TokenTrace, i: int) -> str:
    """What hovering token i shows (plain text, lines)."""
    lines = [f"token {i + 1}: {quoted(trace.text[i])}"]
    if trace.logprobs is not None:
        lp = trace.logprobs[i]
        lines.append(f"p {math.exp(lp):.3f}  log-prob {lp:.3f}")
    if trace.entropies is not None:
        lines.append(f"entropy {trace.entropies[i]:.3f} nats")
    if trace.top is not None and trace.top[i]:
        lines.append("alternatives:")
        lines += [f"  {quoted(text)}  p {math.exp(lp):.3f}" for text, lp in trace.top[i]]
    return "\n".join(lines)


def token_html(trace: TokenTrace, shade: Shade = "probability") -> str:
    """The output as one block of escaped spans, one per non-empty token piece."""
    spans = []
    for i, piece in enumerate(trace.text):
        if not piece:  # special tokens and trimmed whitespace: no text to shade
            continue
        strength = token_strength(trace, i, shade)
        alpha = 0.0 if strength is None else round(_MAX_ALPHA * strength, 3)
        tip = picture_controls(token_tip(trace, i))
        spans.append(
            f'<span class="rs-tok" tabindex="0" style="background: rgba(255, 75, 75, {alpha})" '
            f'data-tip="{html.escape(tip, quote=True)}">'
            f"{html.escape(picture_controls(piece), quote=True)}</span>"
        )
    return f'<div class="rs-tokens" style="max-height: {BOX_PX}px">{"".join(spans)}</div>'


def show_tokens(step: StoredStep, *, key: str) -> None:
    """The step's output shaded token by token, with its mean log-prob and entropy; one line
    saying why not for a step whose policy (or whose file) recorded no tokens."""
    trace = step.tokens
    if trace is None or not trace.text:
        st.caption(NO_TOKENS)
        return
    # Each at its own width in a wrapping row: in equal columns of an 800 px window's half,
    # the numbers were cut to "-1.…".
    row = st.container(horizontal=True, gap="medium", vertical_alignment="bottom")
    choices = [s for s in SHADES if (trace.logprobs if s == "probability" else trace.entropies)]
    shade: Shade = (
        row.radio("Shade tokens by", choices, horizontal=True, key=key, width="content")
        if len(choices) > 1
        else (choices[0] if choices else "probability")
    )
    mean_p = None if step.mean_logprob is None else math.exp(step.mean_logprob)
    row.metric(
        "mean log-prob",
        fmt_num(step.mean_logprob, 3),
        help="Mean log-probability of the output's tokens; exp(mean) is the geometric-mean "
        f"token probability ({fmt_num(mean_p, 3)}).",
        width="content",
    )
    row.metric(
        "mean entropy", fmt_num(step.mean_entropy, 3), help="nats per token", width="content"
    )
    st.caption(
        "Tokens shaded by "
        + ("1 - probability" if shade == "probability" else "entropy")
        + ": darker is less certain. Hover or click a token for its numbers."
    )
    st.html(_CSS + token_html(trace, shade))
