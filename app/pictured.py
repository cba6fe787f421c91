"""Untrusted text made safe to show: its control characters drawn, not obeyed."""

from __future__ import annotations

# C0 controls but newline and tab, and DEL, as their Unicode Control Pictures (ESC -> U+241B);
# C1 controls (CSI is U+009B) have no picture and show as U+FFFD.
_PICTURES = (
    {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\n\t"}
    | {0x7F: 0x2421}
    | dict.fromkeys(range(0x80, 0xA0), 0xFFFD)
)


def picture_controls(text: str) -> str:
    """Text with each control character (but newline and tab) pictured: a terminal obeys
    ESC and CSI (clearing the screen, retitling the window, writing the clipboard), a browser
    draws an empty box or nothing. A Windows line end (CR LF) shows as the line end it is.
    For display only; the store keeps the text as it was."""
    return text.replace("\r\n", "\n").translate(_PICTURES)
