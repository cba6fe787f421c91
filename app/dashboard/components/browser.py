"""Things Streamlit has no command for, done by a few lines of script in a same-origin iframe (no
library, nothing fetched): a "Copy link" button, keys that click buttons of the page, quiet
query parameters that browser Back skips, following a page link from a script, and moving
an alias's link to its page."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

import streamlit as st

# Streamlit gives a keyed element the class `st-key-<key>`; the script clicks the button inside.
# Keys typed into a text field are left alone, and so are arrows on a control that moves with
# them itself (a slider, a select box, tabs). The step strip's chips do not: arrows there step.
_KEYS_SCRIPT = """
const P = window.parent, doc = P.document, keys = %s;
const ARROW_ROLES = ["slider", "tab", "option", "combobox", "spinbutton", "menuitem"];
if (P.__rollscopeKeys) doc.removeEventListener("keydown", P.__rollscopeKeys, true);
P.__rollscopeKeys = (e) => {
  if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
  const t = e.target, tag = ((t && t.tagName) || "").toLowerCase();
  if (["input", "textarea", "select"].includes(tag) || (t && t.isContentEditable)) return;
  const role = (t && t.getAttribute && t.getAttribute("role")) || "";
  if (e.key.startsWith("Arrow") && ARROW_ROLES.includes(role)) return;
  const key = keys[e.key];
  if (!key) return;
  const button = doc.querySelector(".st-key-" + key + " button");
  if (!button || button.disabled) return;
  e.preventDefault();
  e.stopPropagation();
  button.click();
};
// Capture phase: before a focused chip's own arrow handling moves the focus instead.
doc.addEventListener("keydown", P.__rollscopeKeys, true);
"""

# Streamlit pushes a history entry for every change of the query string. A change of only the
# quiet parameters (a replay's step) replaces the current entry instead, so Back leaves the page
# rather than walking every step; any other change still pushes. The wrapper is installed by a
# script element of the page itself: a function of this frame would die with the frame when
# another page replaces it, and Streamlit's next navigation would call a dead function.
_QUIET_WRAPPER = """(() => {
  const H = window.history, push = H.pushState.bind(H);
  const rest = (u) => {
    const p = new URLSearchParams(u.search);
    (window.__rollscopeQuiet || []).forEach((name) => p.delete(name));
    return u.pathname + "?" + p.toString();
  };
  H.pushState = (state, title, url) => {
    try {
      const next = new URL(String(url), location.href);
      if (rest(next) === rest(new URL(location.href))) return H.replaceState(state, title, url);
    } catch (err) {}
    return push(state, title, url);
  };
})();"""

_QUIET_SCRIPT = """
const P = window.parent, doc = P.document;
P.__rollscopeQuiet = P.JSON.parse(%s);  // made by the page: it outlives this frame
if (!P.__rollscopeQuietWrapped) {
  P.__rollscopeQuietWrapped = true;
  const script = doc.createElement("script");
  script.textContent = %s;
  doc.head.appendChild(script);
}
"""

_COPY_SCRIPT = """
const button = document.getElementById("copy");
button.addEventListener("click", async () => {
  const url = window.parent.location.href;
  try {
    await navigator.clipboard.writeText(url);
  } catch (err) {
    const area = document.createElement("textarea");
    area.value = url;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  button.textContent = "Link copied";
  setTimeout(() => { button.textContent = "Copy link"; }, 2000);
});
"""

_STYLE = """
body { margin: 0; font-family: "Source Sans Pro", "Source Sans 3", sans-serif; }
button { font: inherit; font-size: 14px; padding: 5px 12px; cursor: pointer; color: #31333f;
  background: #fff; border: 1px solid rgba(49, 51, 63, 0.2); border-radius: 8px; }
button:hover { border-color: #ff4b4b; color: #ff4b4b; }
"""


def page_tools(
    *,
    copy_link: bool = True,
    keys: Mapping[str, str] | None = None,
    quiet: Sequence[str] = (),
) -> None:
    """A "Copy link" button (the page's URL, which holds its whole state) and, optionally,
    keyboard shortcuts (`keys` maps a key name, `ArrowLeft` or `j`, to a button's widget key)
    and quiet query parameters (a change of only these makes no browser history entry)."""
    parts = [f"<style>{_STYLE}</style>"]
    if copy_link:
        parts.append('<button id="copy" title="Copy this page\'s link">Copy link</button>')
        parts.append(f"<script>{_COPY_SCRIPT}</script>")
    # Each script in a block of its own: the scripts of one frame share their top-level names.
    if keys:
        parts.append(f"<script>{{{_KEYS_SCRIPT % json.dumps(dict(keys))}}}</script>")
    if quiet:
        names = json.dumps(json.dumps(list(quiet)))
        script = _QUIET_SCRIPT % (names, json.dumps(_QUIET_WRAPPER))
        parts.append(f"<script>{{{script}}}</script>")
    st.iframe("\n".join(parts), height=36 if copy_link else 1, width=120 if copy_link else 1)


_FOLLOW_SCRIPT = """
const started = Date.now();
const attempt = () => {  // the link may mount after this frame does: look for it a while
  const link = window.parent.document.querySelector(".st-key-%s a");
  if (link) link.click();
  else if (Date.now() - started < 15000) setTimeout(attempt, 100);
};
attempt();
"""


def go(
    key: str,
    page: str,
    query: Sequence[tuple[str, str]],
    label: str,
    icon: str = ":material/open_in_new:",
) -> None:
    """Open another page with these parameters, by a page link the browser follows (see
    `_follow`): one history entry, and Back returns here. The link, labelled, stays in view
    while the page opens; `key` is its container's."""
    with st.container(key=key):
        st.page_link(page, label=label, icon=icon, query_params=list(query))
    _follow(key, urlencode(query))


def _follow(key: str, token: str) -> None:
    """Click the page link inside the container keyed `key`, once per `token`.

    `st.switch_page` with query parameters leaves a history entry of the old page's path with
    the new page's parameters, so browser Back lands on a wrong page; a page
    link, clicked, makes exactly one entry.
    """
    script = _FOLLOW_SCRIPT % key
    st.iframe(f"<!-- {token} --><script>{script}</script>", height=1, width=1)


# Run by a script element of the page: this sandboxed frame may not navigate the page itself.
_MOVE_SCRIPT = r"""
location.replace(
  location.pathname.replace(/\/*$/, "").replace(/[^/]*$/, %s) + location.search + location.hash
);
"""
_IN_PAGE_SCRIPT = """
const doc = window.parent.document, script = doc.createElement("script");
script.textContent = %s;
doc.head.appendChild(script);
"""


def move_to(url_path: str) -> None:
    """Load this page's link at another path (the same parameters), replacing its history
    entry: an alias left in history would send Back forward again."""
    script = _IN_PAGE_SCRIPT % json.dumps(_MOVE_SCRIPT % json.dumps(url_path))
    st.iframe(f"<script>{script}</script>", height=1, width=1)
