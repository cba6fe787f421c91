"""The route table (page files relative to main.py) and the query parameters of a URL's state."""

from __future__ import annotations

from dataclasses import dataclass

RUNS = "runs/page.py"
EPISODES = "episodes/page.py"
REPLAY = "replay/page.py"
COMPARE = "compare/page.py"
LAUNCH = "launch/page.py"
TRAINING = "training/page.py"
GROUPS = "groups/page.py"
MAP = "question_map/page.py"


@dataclass(frozen=True, slots=True)
class Route:
    """One page of the dashboard, in menu order."""

    path: str
    title: str
    icon: str
    url_path: str
    writes: bool = False
    """Starts or changes runs: left out of a read-only dashboard."""
    aliases: tuple[str, ...] = ()
    """More URL paths that open the page (hidden from the menu)."""


ROUTES: tuple[Route, ...] = (
    # The first page is the default, served at "/"; Streamlit still reserves its url_path, so
    # the natural "/runs" is a hidden alias and the reserved name is one nobody types.
    Route(RUNS, "Runs", ":material/list:", "runs-home", aliases=("runs",)),
    Route(EPISODES, "Episodes", ":material/table:", "episodes"),
    Route(REPLAY, "Replay", ":material/replay:", "replay"),
    Route(COMPARE, "Compare", ":material/compare:", "compare"),
    # The page's title as a path is what people type; Streamlit would read "/question_map" as
    # the page "map" under a base path "/question_", and open the default page instead.
    Route(
        MAP, "Question map", ":material/grid_on:", "map", aliases=("question-map", "question_map")
    ),
    Route(GROUPS, "GRPO groups", ":material/workspaces:", "groups"),
    Route(TRAINING, "Training", ":material/model_training:", "training"),
    Route(LAUNCH, "Launch", ":material/rocket_launch:", "launch", writes=True),
)

P_RUN = "run"
"""A run id; repeated for several runs (Runs selection, Episodes filter, Compare)."""
P_EPISODE = "episode"
P_STEP = "step"
"""1-based step number in a replay."""
P_TRAIN_FROM = "tmin"
P_TRAIN_TO = "tmax"
"""Episodes: the first and last training step listed (Training opens a point's steps)."""
P_QUESTION = "question"
P_GROUP = "group"
"""GRPO groups page: a training run's group number (`Episode.group_index`)."""
P_AT = "at"
"""GRPO groups page: the training step of a training run's group without a number (the
question's samples at that step), `AT_NONE` for the question's samples without a step."""
AT_NONE = "none"
P_CURSOR = "cursor"
"""Episodes page: the stack of keyset cursors of the pages before this one, repeated."""
P_FROM = "from"
"""Replay: the Episodes list it was opened from, as that page's query string."""
P_SAMPLE = "sample"
"""Compare: `RUN:INDEX`, the sample shown of a run with several, repeated per run."""
