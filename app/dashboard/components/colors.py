"""One colour per run, taken from its id, so a run keeps its colour on every page and chart."""

from __future__ import annotations

import html

# Kelly's 22 colours of maximum contrast without white and black (K. Kelly, 1965): 20 runs in a
# chart stay distinguishable, and neighbouring ids get colours far apart.
PALETTE: tuple[str, ...] = (
    "#0067A5",  # blue
    "#F38400",  # orange
    "#008856",  # green
    "#BE0032",  # red
    "#875692",  # purple
    "#A1CAF1",  # light blue
    "#F3C300",  # yellow
    "#882D17",  # reddish brown
    "#E68FAC",  # pink
    "#8DB600",  # yellow green
    "#604E97",  # violet
    "#F99379",  # salmon
    "#848482",  # grey
    "#B3446C",  # purplish red
    "#C2B280",  # buff
    "#2B3D26",  # olive green
    "#F6A600",  # orange yellow
    "#654522",  # brown
    "#DCD300",  # greenish yellow
    "#E25822",  # reddish orange
)


def run_color(run_id: int) -> str:
    """The run's colour (ids 20 apart share one)."""
    return PALETTE[(run_id - 1) % len(PALETTE)]


def swatch(run_id: int) -> str:
    """Markdown for a dot in the run's colour."""
    return f':color[●]{{foreground="{run_color(run_id)}"}}'


NAME_CHARS = 28
"""Characters of a run name a chart label keeps; the full name shows on hover."""


def short_name(name: str, limit: int = NAME_CHARS) -> str:
    """A run name cut in the middle to `limit` characters: both ends tell runs apart
    (`checkpoint-100-tr…-224513`)."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2 + (limit - 1) % 2
    return f"{name[:head]}…{name[len(name) - (limit - 1 - head) :]}"


def plotly_text(text: str) -> str:
    """User text as a Plotly label or hover shows it: its `<`, `>` and `&` escaped (Plotly
    reads a subset of HTML there), quotes as they are (it decodes no `&quot;`)."""
    return html.escape(text, quote=False)


def plot_label(run_id: int, name: str) -> str:
    """A run's axis or legend label in a Plotly figure: the name (cut to `NAME_CHARS`) escaped
    (Plotly reads a subset of HTML in labels, and a run name is user text), after a dot in the
    run's colour."""
    dot = f'<span style="color:{run_color(run_id)}">●</span>'
    return f"{dot} {plotly_text(short_name(name))} #{run_id}"


def hover_name(run_id: int, name: str) -> str:
    """A run's full name and id for a chart's hover text, escaped as `plot_label` is."""
    return f"{plotly_text(name)} #{run_id}"
