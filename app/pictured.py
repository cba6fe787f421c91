"""Untrusted text made safe to show: its control characters drawn, not obeyed."""

from __future__ import annotations

# C0 controls but newline and tab, and DEL, as their Unicode Control Pictures (ESC -> U+241B);
# C1 controls (CSI is U+009B) have no picture and show as U+FFFD.
# Bidirectional embeddings, overrides and isolates have neither: each shows as its code point,
# as it would otherwise reorder the text around it ("evil" drawn as "live").
_PICTURES: dict[int, int | str] = (
    {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\n\t"}
    | {0x7F: 0x2421}
    | dict.fromkeys(range(0x80, 0xA0), 0xFFFD)
    | {c: f"[U+{c:04X}]" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)


def picture_controls(text: str) -> str:
    """Text with each control character (but newline and tab) pictured: a terminal obeys
    ESC and CSI (clearing the screen, retitling the window, writing the clipboard), a browser
    draws an empty box or nothing; and each bidirectional override or isolate named, which
    would show the text reordered. A Windows line end (CR LF) shows as the line end it is.
    For display only; the store keeps the text as it was."""
    return text.replace("\r\n", "\n").translate(_PICTURES)
